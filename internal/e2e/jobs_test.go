package e2e_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// A job enqueued while no process runs (by hand, on the command line) is
// worked within seconds after `serve` starts, and the same under `worker`:
// the job runner does not keep the context the command started it with.
func TestJobEnqueuedWhileNothingRuns(t *testing.T) {
	t.Parallel()
	for _, cmd := range []string{"serve", "worker"} {
		t.Run(cmd, func(t *testing.T) {
			t.Parallel()
			reserve(t, 1)
			a := newApp(t, "tasks")
			var run struct {
				ID int64 `json:"id"`
			}
			out := a.cli(t, "job", "run", "task.daily-digest", "--json").stdout
			require.NoError(t, json.Unmarshal([]byte(out), &run), out)
			require.Equal(t, 1, a.db.Count(t, "SELECT count(*) FROM river_job WHERE id = $1 AND state = 'available'", run.ID))

			if cmd == "serve" {
				a.serve(t, "nothing-ran-serve")
			} else {
				a.worker(t, "nothing-ran-worker")
			}
			waitFor(t, 15*time.Second, "the job enqueued before the start completes", countIs(t, a.db, 1,
				"SELECT count(*) FROM river_job WHERE id = $1 AND state = 'completed'", run.ID))
			require.Equal(t, 1, a.db.Count(t, "SELECT count(*) FROM kumiko_events WHERE type = 'digest.compiled'"))
		})
	}
}

// e2eapp under serve: a job on a schedule (@every 1s), and a job a command
// enqueues in its transaction to run a few seconds later.
func TestJobsOfTheE2EApp(t *testing.T) {
	t.Parallel()
	reserve(t, 1)
	a := newE2EApp(t)
	srv := a.serve(t, "e2e-jobs")

	t.Run("cron", func(t *testing.T) {
		t.Parallel()
		waitFor(t, 30*time.Second, "three runs of the scheduled job", func() (bool, string) {
			n := a.db.Count(t, "SELECT count(*) FROM e2e_job_runs WHERE job = 'e2e.tick'")
			return n >= 3, fmt.Sprint(n, " runs")
		})
		var spread float64
		require.NoError(t, a.db.Pool.QueryRow(t.Context(),
			"SELECT extract(epoch FROM max(ran_at) - min(ran_at)) FROM e2e_job_runs WHERE job = 'e2e.tick'").Scan(&spread))
		require.GreaterOrEqual(t, spread, 1.0, "runs on a schedule, not all at once")
	})

	t.Run("enqueued by a command, run at its time", func(t *testing.T) {
		t.Parallel()
		user := a.as(t, srv, uuid.New(), "ursula", "User")
		key := uuid.NewString()
		answer := ok[struct {
			At time.Time `json:"at"`
		}](user.command("e2e.schedule", map[string]any{"key": key, "in": 3000}))
		require.Equal(t, 1, a.db.Count(t, "SELECT count(*) FROM river_job WHERE kind = 'e2e.at' AND state = 'scheduled' AND args->'args'->>'key' = $1", key),
			"the job is there when the command answers, waiting for its time")
		waitFor(t, 20*time.Second, "the scheduled job runs", countIs(t, a.db, 1, "SELECT count(*) FROM e2e_job_runs WHERE job = 'e2e.at' AND key = $1", key))
		var ran time.Time
		require.NoError(t, a.db.Pool.QueryRow(t.Context(), "SELECT ran_at FROM e2e_job_runs WHERE job = 'e2e.at' AND key = $1", key).Scan(&ran))
		require.False(t, ran.Before(answer.At), "ran at %s, before its time %s", ran, answer.At)
		require.Less(t, ran.Sub(answer.At), 10*time.Second, "ran within seconds of its time")
	})
}

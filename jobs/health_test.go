package jobs_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/jobs"
	"github.com/kumiko-go/kumiko/kumikotest"
)

// With no process working jobs, Health says so and counts the jobs past
// the threshold — available ones and scheduled ones whose time passed —
// naming the oldest; a fresh job is not overdue. Once a runner starts, the
// jobs are worked and Health names its process as the leader; when it
// stops cleanly, nobody is live again at once.
func TestHealth(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	ran := make(chan int64, 8)
	sweep := jobs.Job{Name: "health.sweep", Work: func(_ context.Context, run jobs.Run) error {
		ran <- run.ID
		return nil
	}}
	idle := newRunner(t, db, jobs.Config{}, false, sweep)
	health := func(after time.Duration) jobs.Health {
		t.Helper()
		h, err := idle.Health(t.Context(), after)
		require.NoError(t, err)
		return h
	}

	h := health(0)
	require.False(t, h.Live, "no process has started")
	require.Empty(t, h.Leader)
	require.Zero(t, h.Overdue)
	require.Zero(t, h.Oldest)

	fresh, err := idle.Enqueue(t.Context(), "health.sweep", nil, jobs.Options{})
	require.NoError(t, err)
	late, err := idle.Enqueue(t.Context(), "health.sweep", nil, jobs.Options{})
	require.NoError(t, err)
	db.Exec(t, "UPDATE river_job SET scheduled_at = now() - interval '2 minutes' WHERE id = $1", late.ID) // available for two minutes
	h = health(0)
	require.False(t, h.Live)
	require.Equal(t, 1, h.Overdue, "the job available for two minutes; the fresh one is within the threshold")
	require.Equal(t, late.ID, h.Oldest.ID)
	require.Equal(t, "health.sweep", h.Oldest.Name)
	require.Equal(t, "available", h.Oldest.State)
	require.GreaterOrEqual(t, h.Oldest.Waited, 2*time.Minute)
	require.False(t, h.OverdueCapped)

	// A job to run at a time (River keeps it scheduled until the leader
	// moves it to available) whose time passed with no leader.
	stale, err := idle.Enqueue(t.Context(), "health.sweep", nil, jobs.Options{RunAt: time.Now().Add(-5 * time.Minute)})
	require.NoError(t, err)
	h = health(0)
	require.Equal(t, 2, h.Overdue)
	require.Equal(t, stale.ID, h.Oldest.ID, "the oldest overdue job")
	require.Equal(t, "scheduled", h.Oldest.State)
	require.GreaterOrEqual(t, h.Oldest.Waited, 5*time.Minute-5*time.Second) // the app's clock against the database's

	require.Zero(t, health(time.Hour).Overdue, "nothing has waited an hour")
	require.Eventually(t, func() bool { return health(time.Millisecond).Overdue == 3 }, 10*time.Second, 20*time.Millisecond,
		"past a threshold of 1 ms the fresh job is overdue too")

	worker, err := jobs.New(db.Store, jobs.Config{Logger: slog.New(slog.DiscardHandler), PollInterval: 50 * time.Millisecond}, sweep)
	require.NoError(t, err)
	require.NoError(t, worker.Start(t.Context()))
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			require.NoError(t, worker.Stop(context.Background()))
		}
	})
	worked := map[int64]bool{}
	deadline := time.After(30 * time.Second)
	for len(worked) < 3 {
		select {
		case id := <-ran:
			worked[id] = true
		case <-deadline:
			t.Fatalf("the started runner worked %d of the 3 jobs", len(worked))
		}
	}
	require.Equal(t, map[int64]bool{fresh.ID: true, late.ID: true, stale.ID: true}, worked)
	require.Eventually(t, func() bool {
		h = health(0)
		return h.Live && h.Overdue == 0
	}, 30*time.Second, 50*time.Millisecond, "the started runner is live and nothing waits: %+v", h)
	require.NotEmpty(t, h.Leader)
	require.False(t, h.LeaderSince.After(h.At))
	require.True(t, h.LeaderUntil.After(h.At), "a current term")
	require.Empty(t, h.PausedQueues)

	db.Exec(t, "UPDATE river_queue SET paused_at = now() WHERE name = 'default'")
	require.Equal(t, []string{"default"}, health(0).PausedQueues)

	stopped = true
	require.NoError(t, worker.Stop(t.Context()))
	require.Eventually(t, func() bool { return !health(0).Live }, 10*time.Second, 50*time.Millisecond,
		"a runner that stops gives its term up at once")
}

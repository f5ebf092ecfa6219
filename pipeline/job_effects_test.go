package pipeline_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/jobs"
	"github.com/kumiko-go/kumiko/kumikotest"
	"github.com/kumiko-go/kumiko/pipeline"
	"github.com/kumiko-go/kumiko/registry"
)

// startRunner works app's jobs until the test ends.
func startRunner(t *testing.T, app *kumikotest.App) *jobs.Runner {
	t.Helper()
	r := app.Executor.Jobs()
	require.NoError(t, r.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, r.Stop(context.Background())) })
	return r
}

// waitJob waits until job id is in state and returns it.
func waitJob(t *testing.T, r *jobs.Runner, id int64, state string) jobs.Info {
	t.Helper()
	var in jobs.Info
	require.Eventually(t, func() bool {
		var err error
		in, err = r.Get(t.Context(), id)
		require.NoError(t, err)
		return in.State == state
	}, 30*time.Second, 10*time.Millisecond, "job %d never reached %s (last: %+v)", id, state, in)
	return in
}

// An attempt past the job's JobTimeout has its context cancelled and fails;
// the job is retried like after any failure.
func TestJobTimeoutCancelsTheAttempt(t *testing.T) {
	t.Parallel()
	const timeout = 300 * time.Millisecond
	waited := make(chan time.Duration, 1)
	app := kumikotest.NewApp(t, []*feature.Feature{feature.Define("slow", func(r *feature.Registrar) {
		r.Job("slow.once", remindArgs{}, func(ctx feature.JobContext, _ remindArgs) error {
			if ctx.Attempt() > 1 {
				return nil
			}
			begun := time.Now()
			<-ctx.Context().Done() // as a call would that honours its context
			waited <- time.Since(begun)
			return ctx.Context().Err()
		}, feature.JobTimeout(timeout))
	})})
	r := startRunner(t, app)
	e, err := r.Enqueue(t.Context(), "slow.once", nil, jobs.Options{})
	require.NoError(t, err)
	in := waitJob(t, r, e.ID, "completed")
	require.Equal(t, 2, in.Attempt, "the timed-out attempt was retried")
	require.Len(t, in.Errors, 1)
	require.Contains(t, in.Errors[0].Error, "deadline exceeded")
	w := <-waited
	require.GreaterOrEqual(t, w, timeout-50*time.Millisecond, "the context lasted the timeout")
	require.Less(t, w, timeout+10*time.Second, "the context ended at the timeout, not the default minute")
}

// JobTimeout must be positive; the boot error names the feature and the job.
func TestJobTimeoutMustBePositive(t *testing.T) {
	t.Parallel()
	_, err := registry.Build(feature.Define("timeouts", func(r *feature.Registrar) {
		r.Job("zero.timeout", remindArgs{}, func(feature.JobContext, remindArgs) error { return nil }, feature.JobTimeout(0))
		r.Job("negative.timeout", remindArgs{}, func(feature.JobContext, remindArgs) error { return nil }, feature.JobTimeout(-time.Second))
	}))
	require.ErrorContains(t, err, `feature "timeouts"`)
	require.ErrorContains(t, err, `job "zero.timeout": JobTimeout must be positive, got 0s`)
	require.ErrorContains(t, err, `job "negative.timeout": JobTimeout must be positive, got -1s`)
}

// effectArgs are the args of once.write.
type effectArgs struct {
	N int `json:"n"`
}

// effectFeature has the job once.write, which writes a row into job_effect
// and appends once.written: its database effects. Before writing, attempt
// n waits on gate(n) (nil: no wait).
func effectFeature(gate func(attempt int) <-chan struct{}) *feature.Feature {
	return feature.Define("once", func(r *feature.Registrar) {
		r.DefineEvent("once.written", effectArgs{})
		r.Job("once.write", effectArgs{}, func(ctx feature.JobContext, a effectArgs) error {
			if g := gate(ctx.Attempt()); g != nil {
				<-g
			}
			if _, err := ctx.DB().Exec(ctx.Context(), `INSERT INTO job_effect (n, attempt) VALUES ($1, $2)`, a.N, ctx.Attempt()); err != nil {
				return err
			}
			_, err := ctx.AppendEvent(feature.AppendSpec{AggregateType: "once", Type: "once.written", Payload: a})
			return err
		})
	})
}

// effects counts once.write's table rows and events.
func effects(t *testing.T, app *kumikotest.App) (rows, events int) {
	t.Helper()
	return app.Count(t, "SELECT count(*) FROM job_effect"), app.Count(t, "SELECT count(*) FROM kumiko_events WHERE type = 'once.written'")
}

// A job's database writes commit in the transaction that marks the job
// completed: while the completion waits (here on a row lock the test holds
// on the job, as a slow completion would), none of the writes is visible,
// and afterwards both are. A crash in between therefore leaves either both
// or neither, and the job is never worked again after its effects are in.
func TestJobEffectsCommitWithTheCompletion(t *testing.T) {
	t.Parallel()
	started, proceed := make(chan struct{}, 1), make(chan struct{})
	app := kumikotest.NewApp(t, []*feature.Feature{effectFeature(func(int) <-chan struct{} {
		started <- struct{}{}
		return proceed
	})})
	app.Exec(t, "CREATE TABLE job_effect (n int, attempt int)")
	r := startRunner(t, app)
	e, err := r.Enqueue(t.Context(), "once.write", effectArgs{N: 1}, jobs.Options{})
	require.NoError(t, err)
	<-started

	lock, err := app.Pool.Begin(t.Context())
	require.NoError(t, err)
	defer func() { _ = lock.Rollback(context.Background()) }()
	var pid int
	require.NoError(t, lock.QueryRow(t.Context(), "SELECT pg_backend_pid()").Scan(&pid))
	_, err = lock.Exec(t.Context(), "SELECT 1 FROM river_job WHERE id = $1 FOR UPDATE", e.ID)
	require.NoError(t, err)
	close(proceed)
	require.Eventually(t, func() bool {
		return app.Count(t, "SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))", pid) > 0
	}, 30*time.Second, 5*time.Millisecond, "the job's completion waits for the lock on the job's row")
	rows, evs := effects(t, app)
	require.Zero(t, rows, "the job's row write is not visible before its completion")
	require.Zero(t, evs, "the job's event is not visible before its completion")
	require.Equal(t, "running", jobState(t, app, e.ID))

	require.NoError(t, lock.Rollback(t.Context()))
	waitJob(t, r, e.ID, "completed")
	rows, evs = effects(t, app)
	require.Equal(t, 1, rows)
	require.Equal(t, 1, evs)
}

// rescue does to job id what the leader's rescue does to a job held past
// Config.RescueAfter, and River's scheduler once its retry is due: it is
// available again, its attempt counted as failed.
func rescue(t *testing.T, db *kumikotest.DB, id int64) {
	t.Helper()
	db.Exec(t, `UPDATE river_job SET state = 'available', scheduled_at = now(),
		errors = array_append(errors, jsonb_build_object('at', now(), 'attempt', attempt, 'error', 'Stuck job rescued by JobRescuer')),
		metadata = metadata || jsonb_build_object('river:rescue_count', 1)
		WHERE id = $1 AND state = 'running'`, id)
}

// A job rescued while its first attempt still works (a process that
// stalled past RescueAfter rather than died) runs twice at once; only one
// attempt's writes commit: the second completes the job, and the first,
// finishing later, finds the job no longer running in its attempt and
// rolls back.
func TestRescuedJobsEffectsCommitOnce(t *testing.T) {
	t.Parallel()
	started, release := make(chan struct{}, 1), make(chan struct{})
	f := effectFeature(func(attempt int) <-chan struct{} {
		if attempt > 1 {
			return nil
		}
		started <- struct{}{}
		return release
	})
	// The attempts counter tells when the first attempt has returned: its
	// outcome leaves no trace in the job, which the second completed.
	metrics := prometheus.NewRegistry()
	reg, err := registry.Build(f)
	require.NoError(t, err)
	db := kumikotest.NewDB(t, kumikotest.StoreConfig(eventstore.Config{Upcaster: reg}))
	d, err := pipeline.New(reg, db.Store, pipeline.Config{})
	require.NoError(t, err)
	runner, err := jobs.New(db.Store, jobs.Config{Metrics: metrics}, d.JobDefinitions()...)
	require.NoError(t, err)
	d.UseJobs(runner)
	require.NoError(t, d.EnsureSchema(t.Context()))
	app := &kumikotest.App{DB: db, Registry: reg, Executor: d}
	app.Exec(t, "CREATE TABLE job_effect (n int, attempt int)")
	r := startRunner(t, app)
	e, err := r.Enqueue(t.Context(), "once.write", effectArgs{N: 1}, jobs.Options{})
	require.NoError(t, err)
	<-started
	rescue(t, app.DB, e.ID)
	in := waitJob(t, r, e.ID, "completed")
	require.Equal(t, 2, in.Attempt)
	require.Equal(t, 1, app.Count(t, "SELECT count(*) FROM job_effect WHERE attempt = 2"))

	close(release) // the first attempt writes, then tries to complete
	require.Eventually(t, func() bool { a := attempts(t, metrics); return a["ok"]+a["error"] == 2 }, 30*time.Second, 10*time.Millisecond, "the first attempt returns")
	require.Equal(t, map[string]int{"ok": 1, "error": 1}, attempts(t, metrics), "the first attempt was refused its completion")
	rows, evs := effects(t, app)
	require.Equal(t, 1, rows, "only one attempt's row write committed")
	require.Equal(t, 1, evs, "only one attempt's event committed")
	in = waitJob(t, r, e.ID, "completed")
	require.Equal(t, 2, in.Attempt)
	require.Len(t, in.Errors, 1, "the refused attempt left the completed job as it was")
}

// attempts counts kumiko_job_attempts_total by outcome.
func attempts(t *testing.T, g prometheus.Gatherer) map[string]int {
	t.Helper()
	mfs, err := g.Gather()
	require.NoError(t, err)
	out := map[string]int{}
	for _, mf := range mfs {
		if mf.GetName() != "kumiko_job_attempts_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "outcome" {
					out[l.GetValue()] += int(m.GetCounter().GetValue())
				}
			}
		}
	}
	return out
}

func jobState(t *testing.T, app *kumikotest.App, id int64) string {
	t.Helper()
	var state string
	require.NoError(t, app.Pool.QueryRow(t.Context(), "SELECT state FROM river_job WHERE id = $1", id).Scan(&state))
	return state
}

// A handler that ignores its context runs on past JobTimeout, but nothing
// it writes then commits, even through a context of its own: the commit
// and the completion use the job's context, which has ended.
func TestJobWritesPastTheTimeoutDoNotCommit(t *testing.T) {
	t.Parallel()
	app := kumikotest.NewApp(t, []*feature.Feature{feature.Define("late", func(r *feature.Registrar) {
		r.Job("late.write", effectArgs{}, func(ctx feature.JobContext, a effectArgs) error {
			if ctx.Attempt() == 1 {
				<-ctx.Context().Done() // past the timeout, and on as if nothing happened
			}
			_, err := ctx.DB().Exec(context.WithoutCancel(ctx.Context()), `INSERT INTO job_effect (n, attempt) VALUES ($1, $2)`, a.N, ctx.Attempt())
			return err
		}, feature.JobTimeout(200*time.Millisecond))
	})})
	app.Exec(t, "CREATE TABLE job_effect (n int, attempt int)")
	r := startRunner(t, app)
	e, err := r.Enqueue(t.Context(), "late.write", effectArgs{N: 1}, jobs.Options{})
	require.NoError(t, err)
	in := waitJob(t, r, e.ID, "completed")
	require.Equal(t, 2, in.Attempt)
	require.Len(t, in.Errors, 1, "the late attempt failed")
	require.Equal(t, 1, app.Count(t, "SELECT count(*) FROM job_effect"))
	require.Equal(t, 1, app.Count(t, "SELECT count(*) FROM job_effect WHERE attempt = 2"), "only the second attempt's write committed")
}

package pipeline_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/jobs"
	"github.com/kumiko-go/kumiko/kumikotest"
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

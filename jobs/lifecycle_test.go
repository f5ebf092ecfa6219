package jobs_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/internal/lifecycle"
	"github.com/kumiko-go/kumiko/jobs"
	"github.com/kumiko-go/kumiko/kumikotest"
)

// receiveWithin is receive with a bound of its own.
func receiveWithin[T any](t *testing.T, c <-chan T, d time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(d):
		t.Fatalf("%s: nothing arrived within %s", what, d)
		var zero T
		return zero
	}
}

// The command line starts the app with a context it cancels as soon as
// Start returns: the runner keeps working jobs, also one enqueued
// afterwards.
func TestRunnerOutlivesItsStartContext(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	ran := make(chan int64, 1)
	r := newRunner(t, db, jobs.Config{}, false, jobs.Job{Name: "after-start", Work: func(_ context.Context, run jobs.Run) error {
		ran <- run.ID
		return nil
	}})
	start, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	require.NoError(t, r.Start(start))
	cancel()
	t.Cleanup(func() { require.NoError(t, r.Stop(context.Background())) })

	e, err := r.Enqueue(t.Context(), "after-start", nil, jobs.Options{})
	require.NoError(t, err)
	require.Equal(t, e.ID, receiveWithin(t, ran, 10*time.Second, "a job enqueued after the start context ended"))
	waitState(t, r, e.ID, "completed")
}

// At the end of Stop's context the running jobs are cancelled; one that
// returns then is named as cancelled, one that ignores its context as
// abandoned, and Stop returns within its deadline plus the second of grace.
func TestStopIsBoundedAndNamesWhatItAbandons(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	started := make(chan string, 2)
	release := make(chan struct{})
	r := newRunner(t, db, jobs.Config{}, false,
		jobs.Job{Name: "stubborn", Work: func(context.Context, jobs.Run) error {
			started <- "stubborn"
			<-release // ignores its context, like an external call without a deadline
			return nil
		}},
		jobs.Job{Name: "polite", Work: func(ctx context.Context, _ jobs.Run) error {
			started <- "polite"
			<-ctx.Done()
			return ctx.Err()
		}})
	require.NoError(t, r.Start(t.Context()))
	stubborn, err := r.Enqueue(t.Context(), "stubborn", nil, jobs.Options{})
	require.NoError(t, err)
	polite, err := r.Enqueue(t.Context(), "polite", nil, jobs.Options{})
	require.NoError(t, err)
	receive(t, started)
	receive(t, started)

	const deadline = 300 * time.Millisecond
	stop, cancel := context.WithTimeout(t.Context(), deadline)
	defer cancel()
	begun := time.Now()
	err = r.Stop(stop)
	took := time.Since(begun)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Less(t, took, deadline+lifecycle.Grace+2*time.Second, "Stop is bounded by its deadline plus the grace")
	require.GreaterOrEqual(t, took, deadline, "Stop waited for the running jobs until its deadline")
	require.ErrorContains(t, err, fmt.Sprintf("cancelled running job polite (id %d)", polite.ID))
	require.ErrorContains(t, err, fmt.Sprintf("abandoned running job stubborn (id %d)", stubborn.ID))

	close(release)
	done, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	require.NoError(t, r.Stop(done), "once the abandoned job returns, the runner stops")
	in, err := r.Get(t.Context(), polite.ID)
	require.NoError(t, err)
	require.Equal(t, "available", in.State, "the cancelled job is worked again at the next start")
	require.Empty(t, in.Errors, "its interrupted attempt is not counted as failed")
}

package lifecycle_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/internal/lifecycle"
)

// Work names what runs, a name begun twice once with its count, and is
// idle once everything ended (an end called twice counts once).
func TestWorkNamesWhatRuns(t *testing.T) {
	t.Parallel()
	var w lifecycle.Work
	require.Empty(t, w.Names())
	a, b, c := w.Begin("pass x"), w.Begin("pass x"), w.Begin("job y")
	require.Equal(t, []string{"job y", "pass x (×2)"}, w.Names())
	idle := w.Idle()
	a()
	a()
	b()
	require.Equal(t, []string{"job y"}, w.Names())
	select {
	case <-idle:
		t.Fatal("idle while a job runs")
	default:
	}
	c()
	<-idle
	require.Empty(t, w.Names())
}

// Drain returns nil when the work ends before ctx; otherwise it cancels the
// work, waits for it, and names what was running when ctx ended, wrapping
// ctx's error.
func TestDrainNamesWhatItGaveUpOn(t *testing.T) {
	t.Parallel()
	var w lifecycle.Work
	end := w.Begin("quick")
	go func() { time.Sleep(10 * time.Millisecond); end() }()
	require.NoError(t, w.Drain(context.Background(), "abandoned", nil))
	require.Empty(t, w.Names(), "Drain waited for the work to end")

	end = w.Begin("slow")
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	cancelled := make(chan struct{})
	go func() { <-cancelled; end() }()
	err := w.Drain(ctx, "abandoned", func() { close(cancelled) })
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.EqualError(t, err, "abandoned slow: context deadline exceeded")
	<-w.Idle()
}

// Work that ignores the cancel is given up on at GiveUp: Grace after the
// deadline, however late the stop looks.
func TestGiveUpSharesOneGraceAfterTheDeadline(t *testing.T) {
	t.Parallel()
	deadline := time.Now().Add(-300 * time.Millisecond)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	require.WithinDuration(t, deadline.Add(lifecycle.Grace), lifecycle.GiveUp(ctx), time.Millisecond)

	long, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Minute))
	defer cancel()
	require.True(t, lifecycle.GiveUp(long).After(time.Now()), "a brief moment at least")

	var w lifecycle.Work
	defer w.Begin("stuck")()
	short, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	began := time.Now()
	require.ErrorContains(t, w.Drain(short, "abandoned", nil), "abandoned stuck")
	took := time.Since(began)
	require.GreaterOrEqual(t, took, 20*time.Millisecond+lifecycle.Grace-10*time.Millisecond, "the grace is waited")
	require.Less(t, took, 20*time.Millisecond+lifecycle.Grace+500*time.Millisecond, "bounded")
}

package consumer_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/consumer"
	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/internal/lifecycle"
	"github.com/kumiko-go/kumiko/kumikotest"
)

// blocking wraps c's handler: it signals entered, then waits for release —
// ignoring its context, as an external call without a deadline would — and
// reports on ctxErr what its context said once released.
type blocking struct {
	entered chan int64
	release chan struct{}
	ctxErr  chan error
}

func newBlocking() *blocking {
	return &blocking{entered: make(chan int64, 10), release: make(chan struct{}), ctxErr: make(chan error, 10)}
}

func (b *blocking) wrap(c consumer.Consumer) consumer.Consumer {
	handle := c.Handle
	c.Handle = func(ctx context.Context, tx pgx.Tx, ev eventstore.Event) error {
		if err := handle(ctx, tx, ev); err != nil {
			return err
		}
		b.entered <- ev.ID
		<-b.release
		b.ctxErr <- ctx.Err()
		return nil
	}
	return c
}

func cursorOf(t *testing.T, db *kumikotest.DB, name string) int64 {
	t.Helper()
	return int64(db.Count(t, "SELECT last_processed_event_id FROM kumiko_event_consumers WHERE name = $1 AND instance_id = $2", name, consumer.SharedInstance))
}

// Stop lets a pass that runs when it is called finish and commit, until its
// deadline: the handler's context is not cancelled, the cursor moves past
// the event, and Stop returns nil.
func TestStopLetsARunningPassFinish(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	b := newBlocking()
	d := newEventDispatcher(t, db, "graceful-1", b.wrap(recorder(t, db, "graceful", feature.Shared)))
	require.NoError(t, d.Start(ctx))
	ev := appendOne(t, db.Store)
	require.Equal(t, ev.ID, <-b.entered)

	stopped := make(chan error, 1)
	go func() {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		stopped <- d.Stop(sctx)
	}()
	// Stop has begun (or is about to); the pass must still be allowed to
	// finish.
	time.Sleep(200 * time.Millisecond)
	select {
	case err := <-stopped:
		t.Fatalf("Stop returned while a pass was running: %v", err)
	default:
	}
	close(b.release)
	require.NoError(t, <-b.ctxErr, "the running pass's context was not cancelled")
	require.NoError(t, <-stopped)
	require.Equal(t, []int64{ev.ID}, seen(t, db, "graceful"))
	require.Equal(t, ev.ID, cursorOf(t, db, "graceful"))
}

// A handler that ignores its context and never returns: Stop returns within
// its deadline + lifecycle.Grace (and a little), with an error wrapping the
// deadline that names the consumer; its context was cancelled; the pass
// commits nothing, and a dispatcher started later delivers the event once.
func TestStopAbandonsABlockedPass(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	b := newBlocking()
	released := false
	t.Cleanup(func() {
		if !released {
			close(b.release)
		}
	})
	other := recorder(t, db, "bystander", feature.Shared)
	d := newEventDispatcher(t, db, "stuck-1", b.wrap(recorder(t, db, "stuck", feature.Shared)), other)
	require.NoError(t, d.Start(ctx))
	ev := appendOne(t, db.Store)
	require.Equal(t, ev.ID, <-b.entered)
	require.Eventually(t, func() bool { return cursorOf(t, db, "bystander") == ev.ID }, 10*time.Second, 10*time.Millisecond)

	const timeout = 300 * time.Millisecond
	sctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	began := time.Now()
	err := d.Stop(sctx)
	took := time.Since(began)
	require.Error(t, err)
	require.True(t, errors.Is(err, context.DeadlineExceeded), "%v", err)
	require.ErrorContains(t, err, "stuck")
	require.NotContains(t, err.Error(), "bystander", "only the consumers whose passes were running are named")
	require.Less(t, took, timeout+lifecycle.Grace+time.Second, "Stop is bounded")
	require.Less(t, cursorOf(t, db, "stuck"), ev.ID, "the cursor did not move past the abandoned event")

	close(b.release)
	released = true
	require.ErrorIs(t, <-b.ctxErr, context.Canceled, "the abandoned pass's context was cancelled")
	// The handler returned nil, but the pass cannot commit on its cancelled
	// context: its transaction rolls back and frees the shard.
	next := newEventDispatcher(t, db, "stuck-2", recorder(t, db, "stuck", feature.Shared))
	require.NoError(t, next.Start(ctx))
	t.Cleanup(func() { require.NoError(t, next.Stop(context.Background())) })
	require.Eventually(t, func() bool { return cursorOf(t, db, "stuck") == ev.ID }, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, []int64{ev.ID}, seen(t, db, "stuck"), "delivered again, once")
}

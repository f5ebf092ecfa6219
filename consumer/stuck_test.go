package consumer_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/consumer"
	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/kumikotest"
)

// blocker is a handler that blocks on its first call until released (or
// its context ends), and counts its calls.
type blocker struct {
	release chan struct{}
	once    sync.Once
	calls   atomic.Int32
}

// unblock releases the handler; it may be called more than once.
func (b *blocker) unblock() { b.once.Do(func() { close(b.release) }) }

func newBlocker() *blocker { return &blocker{release: make(chan struct{})} }

func (b *blocker) handle(ctx context.Context, _ pgx.Tx, _ eventstore.Event) error {
	if b.calls.Add(1) > 1 {
		return nil
	}
	select {
	case <-b.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// A handler that runs past its consumer's StuckAfter is reported stuck —
// the event, the process, since when — by a reader on another connection
// while the pass's transaction holds the shard's row; the gauge says so.
// Once the handler returns, the shard is idle again, and the gauge 0.
func TestStuckHandlerIsReported(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	reg := prometheus.NewRegistry()
	b := newBlocker()
	d, err := consumer.New(db.Store, consumer.Config{InstanceID: "p1", PollInterval: 50 * time.Millisecond,
		Heartbeat: testHeartbeat, StaleAfter: testStaleAfter, StuckAfter: time.Hour, Metrics: reg},
		consumer.Consumer{Name: "slow", Handle: b.handle, StuckAfter: 300 * time.Millisecond},
		consumer.Consumer{Name: "quick", Handle: noop})
	require.NoError(t, err)
	require.NoError(t, d.Start(ctx))
	t.Cleanup(func() { require.NoError(t, d.Stop(context.Background())) })
	t.Cleanup(b.unblock) // first, should the test fail before it

	started := time.Now()
	ev := appendOne(t, db.Store)
	var st consumer.ShardStatus
	require.Eventually(t, func() bool {
		st = shardStatus(t, db, "slow")
		return st.Status == consumer.StatusStuck
	}, 20*time.Second, 10*time.Millisecond, "the shard shows stuck")
	require.GreaterOrEqual(t, time.Since(started), 300*time.Millisecond, "not before the threshold")
	require.Equal(t, ev.ID, st.StuckEventID)
	require.Equal(t, "p1", st.StuckInstanceID)
	require.Equal(t, consumer.SharedInstance, st.InstanceID)
	require.NotNil(t, st.StuckSince)
	require.WithinDuration(t, started, *st.StuckSince, 10*time.Second)
	require.Greater(t, st.StuckSeconds, 0.0)
	require.Equal(t, 0, st.Attempts)
	require.Equal(t, "", st.LastError)
	require.Equal(t, ev.ID-1, st.Cursor)
	// The other consumer delivers the event meanwhile (under load it may
	// still be catching up when the slow one shows stuck): it ends idle,
	// never stuck.
	require.Eventually(t, func() bool {
		quick := shardStatus(t, db, "quick")
		require.NotEqual(t, consumer.StatusStuck, quick.Status, "another consumer is not stuck")
		require.Zero(t, quick.StuckEventID)
		require.Nil(t, quick.StuckSince)
		return quick.Status == consumer.StatusIdle
	}, 20*time.Second, 10*time.Millisecond, "another consumer is idle")
	require.Equal(t, 1.0, gauge(t, reg, "kumiko_event_consumer_stuck", "slow"))
	require.Equal(t, 0.0, gauge(t, reg, "kumiko_event_consumer_stuck", "quick"))

	b.unblock()
	require.Eventually(t, func() bool {
		st = shardStatus(t, db, "slow")
		return st.Status == consumer.StatusIdle && st.Cursor == ev.ID
	}, 20*time.Second, 10*time.Millisecond, "idle again once the handler returned")
	require.Zero(t, st.StuckEventID)
	require.Nil(t, st.StuckSince)
	require.Eventually(t, func() bool { return gauge(t, reg, "kumiko_event_consumer_stuck", "slow") == 0 },
		20*time.Second, 10*time.Millisecond)
	var rows int
	require.Eventually(t, func() bool {
		require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM kumiko_consumer_stuck").Scan(&rows))
		return rows == 0
	}, 20*time.Second, 10*time.Millisecond, "the record is cleared")
}

// A stuck record of a process that no longer beats is not trusted.
func TestStuckRecordOfAStaleProcessIsIgnored(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	newEventDispatcher(t, db, "p1", consumer.Consumer{Name: "slow", Handle: noop})
	ev := appendOne(t, db.Store)
	db.Exec(t, `INSERT INTO kumiko_instances (instance_id, last_seen, heartbeat, stale_after) VALUES ('gone', now() - interval '1 hour', '1s', '1m')`)
	db.Exec(t, fmt.Sprintf(`INSERT INTO kumiko_consumer_stuck (name, shard_instance, instance_id, event_id, since)
VALUES ('slow', '__shared__', 'gone', %d, now() - interval '1 hour')`, ev.ID))
	require.Equal(t, consumer.StatusCatchingUp, shardStatus(t, db, "slow").Status)
	db.Exec(t, `UPDATE kumiko_instances SET last_seen = now()`)
	require.Equal(t, consumer.StatusStuck, shardStatus(t, db, "slow").Status, "trusted while the process beats")
}

// With a HandlerTimeout, a handler running past it has its context
// cancelled, and the pass counts a failed attempt naming the timeout —
// without running the handler again in the same pass; MaxAttempts of them
// make the shard dead.
func TestHandlerTimeoutCountsAnAttempt(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	var calls, cancelled atomic.Int32
	handle := func(ctx context.Context, _ pgx.Tx, _ eventstore.Event) error {
		calls.Add(1)
		select {
		case <-ctx.Done():
			cancelled.Add(1)
			return ctx.Err()
		case <-time.After(time.Minute):
			return nil
		}
	}
	d := newEventDispatcher(t, db, "p1", consumer.Consumer{Name: "slow", Handle: handle, HandlerTimeout: 200 * time.Millisecond, MaxAttempts: 2},
		consumer.Consumer{Name: "batch", HandleBatch: func(ctx context.Context, tx pgx.Tx, evs []eventstore.Event) error {
			return handle(ctx, tx, evs[0])
		}, HandlerTimeout: 200 * time.Millisecond})
	ev := appendOne(t, db.Store)

	res, err := d.RunPass(ctx, "slow")
	require.NoError(t, err)
	require.Error(t, res.Failed)
	require.Contains(t, res.Failed.Error(), "handler timeout after 200ms")
	require.Equal(t, int32(1), calls.Load(), "the timed-out call is not made again")
	require.Equal(t, int32(1), cancelled.Load(), "the handler's context was cancelled")
	st := shardStatus(t, db, "slow")
	require.Equal(t, consumer.StatusCatchingUp, st.Status)
	require.Equal(t, 1, st.Attempts)
	require.True(t, strings.Contains(st.LastError, "handler timeout after 200ms"), st.LastError)
	require.Equal(t, ev.ID-1, st.Cursor)

	_, err = d.RunPass(ctx, "slow")
	require.NoError(t, err)
	st = shardStatus(t, db, "slow")
	require.Equal(t, consumer.StatusDead, st.Status)
	require.Equal(t, 2, st.Attempts)

	calls.Store(0)
	res, err = d.RunPass(ctx, "batch")
	require.NoError(t, err)
	require.Contains(t, res.Failed.Error(), "handler timeout after 200ms")
	require.Equal(t, int32(1), calls.Load())
	require.Equal(t, 1, shardStatus(t, db, "batch").Attempts)
}

// gauge returns the value of a gauge family's series for consumer.
func gauge(t *testing.T, reg *prometheus.Registry, name, consumerName string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "consumer" && l.GetValue() == consumerName {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	return -1
}

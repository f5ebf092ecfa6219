package integration_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/consumer"
	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/integration"
	"github.com/kumiko-go/kumiko/pipeline"
)

// age makes the inbox rows of the messages look handled that long ago.
func (e *env) age(t *testing.T, age time.Duration, ids ...uuid.UUID) {
	t.Helper()
	e.Exec(t, "UPDATE kumiko_inbox SET handled_at = now() - make_interval(secs => $2) WHERE message_id = ANY($1)", ids, age.Seconds())
}

// messages are the messages the shop published, in id order.
func (e *env) messages(t *testing.T) []feature.Message {
	t.Helper()
	rows, err := e.Pool.Query(ctx, `SELECT aggregate_id, type, event_version, payload, tenant_id, coalesce(metadata->>'userId', '')
FROM kumiko_events WHERE aggregate_type = $1 ORDER BY id`, pipeline.MessageStream)
	require.NoError(t, err)
	msgs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (feature.Message, error) {
		var m feature.Message
		return m, r.Scan(&m.ID, &m.Type, &m.Version, &m.Payload, &m.TenantID, &m.UserID)
	})
	require.NoError(t, err)
	return msgs
}

func ids(msgs []feature.Message) []uuid.UUID {
	out := make([]uuid.UUID, len(msgs))
	for i, m := range msgs {
		out[i] = m.ID
	}
	return out
}

func (e *env) shipMany(t *testing.T, n int) {
	t.Helper()
	for i := range n {
		require.NoError(t, e.ship(t, alice, ShipOrder{OrderID: fmt.Sprintf("o-%d", i)}))
	}
}

// Rows past the retention go, in batches; recent ones stay, and a message
// redelivered within the window still skips the handlers that handled it.
func TestInboxSweepDeletesOnlyRowsPastTheRetention(t *testing.T) {
	t.Parallel()
	e := newEnv(t, integration.Config{InboxSweepBatch: 3})
	e.shipMany(t, 6)
	e.relay(t)
	require.Equal(t, 12, e.Count(t, "SELECT count(*) FROM kumiko_inbox"))
	msgs := e.messages(t)
	e.age(t, 8*24*time.Hour, ids(msgs[:5])...)
	e.age(t, 6*24*time.Hour, msgs[5].ID)

	n, err := e.svc.SweepInbox(ctx, time.Now().Add(-integration.DefaultInboxRetention))
	require.NoError(t, err)
	require.Equal(t, int64(10), n, "in batches of at most three")
	require.Equal(t, 2, e.Count(t, "SELECT count(*) FROM kumiko_inbox WHERE message_id = $1", msgs[5].ID))
	require.Equal(t, 2, e.Count(t, "SELECT count(*) FROM kumiko_inbox"))

	require.NoError(t, e.svc.Handle(ctx, msgs[5]), "redelivered within the window")
	require.Equal(t, 6, e.shop.callsOf("record"), "the handlers skip it")
	require.Equal(t, 6, e.shop.callsOf("flaky"))
}

// Sweeps of several instances at once delete every old row exactly once
// between them, and none waits for a row a transaction holds: it skips it,
// and a later sweep takes it.
func TestInboxSweepsRunConcurrentlyAndSkipHeldRows(t *testing.T) {
	t.Parallel()
	e := newEnv(t, integration.Config{InboxSweepBatch: 5})
	e.shipMany(t, 40)
	e.relay(t)
	msgs := e.messages(t)
	e.age(t, 8*24*time.Hour, ids(msgs)...)

	// A transaction holds one old row (a handler's claim of it would).
	held, err := e.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = held.Rollback(context.Background()) }()
	_, err = held.Exec(ctx, "SELECT 1 FROM kumiko_inbox WHERE message_id = $1 AND handler = 'record' FOR UPDATE", msgs[0].ID)
	require.NoError(t, err)

	const sweepers = 4
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
		got   [sweepers]int64
		errs  [sweepers]error
	)
	for i := range sweepers {
		svc, err := integration.New(e.Executor, e.Store, integration.Config{InboxSweepBatch: 5})
		require.NoError(t, err)
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			got[i], errs[i] = svc.SweepInbox(ctx, time.Now().Add(-integration.DefaultInboxRetention))
		}()
	}
	close(start)
	wg.Wait() // returns while the row is still held: no sweep waited for it
	var total int64
	for i := range sweepers {
		require.NoError(t, errs[i])
		total += got[i]
	}
	require.Equal(t, int64(79), total, "every old row but the held one, each once")
	require.Equal(t, 1, e.Count(t, "SELECT count(*) FROM kumiko_inbox"))

	require.NoError(t, held.Rollback(ctx))
	n, err := e.svc.SweepInbox(ctx, time.Now().Add(-integration.DefaultInboxRetention))
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
}

// A started service sweeps by itself; a negative retention keeps the rows.
func TestStartedServiceSweepsTheInbox(t *testing.T) {
	t.Parallel()
	e := newEnv(t, integration.Config{})
	e.shipMany(t, 2)
	e.relay(t)
	e.age(t, 8*24*time.Hour, ids(e.messages(t))...)

	keep, err := integration.New(e.Executor, e.Store, integration.Config{InboxRetention: -1, InboxSweepInterval: time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, keep.Start(ctx))
	require.NoError(t, keep.Stop(ctx))
	require.Equal(t, 4, e.Count(t, "SELECT count(*) FROM kumiko_inbox"))

	svc, err := integration.New(e.Executor, e.Store, integration.Config{InboxSweepInterval: time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, svc.Start(ctx))
	t.Cleanup(func() { require.NoError(t, svc.Stop(context.Background())) })
	require.Eventually(t, func() bool { return e.Count(t, "SELECT count(*) FROM kumiko_inbox") == 0 }, 10*time.Second, 5*time.Millisecond)
}

// Published messages are pruned like any events, but only those the relay
// has passed: never one still waiting to leave, even with the relay's
// shard disabled or gone.
func TestPruneOfMessagesLetsOnlyRelayedOnesGo(t *testing.T) {
	t.Parallel()
	e := newEnv(t, integration.Config{})
	e.shipMany(t, 3)
	e.relay(t)
	require.NoError(t, e.ship(t, alice, ShipOrder{OrderID: "waiting"})) // not relayed
	ops := consumer.NewOps(e.Store)
	prune := func(dryRun bool, guard bool) (eventstore.PruneResult, error) {
		opts := eventstore.PruneOptions{OlderThan: time.Now().Add(time.Hour), AggregateTypes: []string{pipeline.MessageStream}, DryRun: dryRun}
		if guard {
			opts.Guard = integration.PruneGuard(e.Store)
		}
		return ops.PruneEvents(ctx, opts)
	}

	_, err := prune(false, true)
	require.ErrorIs(t, err, consumer.ErrLagging, "the relay has not passed the newest message")

	_, err = ops.Disable(ctx, integration.RelayName, consumer.SharedInstance)
	require.NoError(t, err)
	res, err := prune(true, false)
	require.NoError(t, err)
	require.Equal(t, int64(4), res.Deleted, "without the relay's guard a disabled relay would let the waiting message go")

	res, err = prune(false, true)
	require.NoError(t, err)
	require.Equal(t, int64(3), res.Deleted)
	left := e.messages(t)
	require.Len(t, left, 1)
	require.JSONEq(t, `{"orderId":"waiting"}`, string(left[0].Payload))

	// No relay shard at all: nothing goes.
	e.Exec(t, "DELETE FROM kumiko_event_consumers WHERE name = $1", integration.RelayName)
	res, err = prune(false, true)
	require.NoError(t, err)
	require.Zero(t, res.Deleted)
	require.Len(t, e.messages(t), 1)
}

package eventstore_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/kumikotest"
)

// listen opens a connection listening on the store's channel.
func listen(t *testing.T, db *kumikotest.DB) *pgx.Conn {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, db.URL)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	_, err = conn.Exec(ctx, "LISTEN "+pgx.Identifier{db.Store.NotifyChannel()}.Sanitize())
	require.NoError(t, err)
	return conn
}

// nextNotification waits for the next notification and returns its event id.
func nextNotification(t *testing.T, conn *pgx.Conn) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, err := conn.WaitForNotification(ctx)
	require.NoError(t, err, "no notification arrived")
	id, err := strconv.ParseInt(n.Payload, 10, 64)
	require.NoError(t, err)
	return id
}

// A rolled-back transaction leaves no event and sends no notification; the
// first notification after it is for the next committed event. Both paths are
// checked: WithTx (post-commit wake-up) and a caller-owned transaction
// (transactional NOTIFY).
func TestRollbackLeavesNoEventAndNoNotification(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	ctx := context.Background()
	s := db.Store
	conn := listen(t, db)
	stream := eventstore.Stream{TenantID: tenantA, AggregateType: "task"}

	var rolledBack []int64
	errBoom := errors.New("boom")
	err := s.WithTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		res, err := s.AppendTx(ctx, tx, stream, 0, ev("task.created", `{}`))
		require.NoError(t, err)
		rolledBack = append(rolledBack, res.Events[0].ID)
		return errBoom
	})
	require.ErrorIs(t, err, errBoom)

	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	res, err := s.AppendTx(ctx, tx, stream, 0, ev("task.created", `{}`))
	require.NoError(t, err)
	rolledBack = append(rolledBack, res.Events[0].ID)
	require.NoError(t, tx.Rollback(ctx))

	require.Equal(t, 0, db.Count(t, "SELECT count(*) FROM kumiko_events"))

	committed, err := s.Append(ctx, stream, 0, ev("task.created", `{}`))
	require.NoError(t, err)
	got := nextNotification(t, conn)
	require.Equal(t, committed.Events[0].ID, got, "the first notification is the committed event's")
	require.NotContains(t, rolledBack, got)
}

func TestCommittedEventsAreAnnounced(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	ctx := context.Background()
	s := db.Store
	conn := listen(t, db)
	stream := eventstore.Stream{TenantID: tenantA, AggregateType: "task"}

	// Through WithTx: announced after the commit.
	var id int64
	require.NoError(t, s.WithTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		res, err := s.AppendTx(ctx, tx, stream, 0, ev("task.created", `{}`), ev("task.updated", `{}`))
		id = res.Events[1].ID
		return err
	}))
	require.Equal(t, id, nextNotification(t, conn))

	// Through a caller-owned transaction: announced by Postgres at commit.
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	res, err := s.AppendTx(ctx, tx, stream, 0, ev("task.created", `{}`))
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	require.Equal(t, res.Events[0].ID, nextNotification(t, conn))

	// Through a Tx of the caller's (a consumer's pass): after its commit,
	// in process too; an append in a savepoint rolled back is not announced.
	wake, cancel := s.Subscribe()
	defer cancel()
	var kept int64
	require.NoError(t, eventstore.RunTx(ctx, db.Pool, func(tx *eventstore.Tx) error {
		sp, err := tx.Begin(ctx)
		require.NoError(t, err)
		_, err = s.AppendTx(ctx, sp, stream, 0, ev("task.created", `{}`))
		require.NoError(t, err)
		require.NoError(t, sp.Rollback(ctx))
		select {
		case <-wake:
			t.Fatal("announced before the commit")
		default:
		}
		res, err := s.AppendTx(ctx, tx, stream, 0, ev("task.created", `{}`))
		kept = res.Events[0].ID
		return err
	}))
	select {
	case <-wake:
	default:
		t.Fatal("a committed append in a Tx did not wake the subscriber")
	}
	require.Equal(t, kept, nextNotification(t, conn))

	// Through a batch.
	batch, err := s.AppendBatch(ctx, []eventstore.StreamAppend{
		{Stream: stream, Events: []eventstore.NewEvent{ev("task.created", `{}`)}},
		{Stream: stream, Events: []eventstore.NewEvent{ev("task.created", `{}`)}},
	})
	require.NoError(t, err)
	require.Equal(t, batch[1].Events[0].ID, nextNotification(t, conn))
}

func TestSubscribeWakesInProcess(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	ctx := context.Background()
	s := db.Store
	wake, cancel := s.Subscribe()
	defer cancel()

	require.Error(t, s.WithTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		_, err := s.AppendTx(ctx, tx, eventstore.Stream{TenantID: tenantA, AggregateType: "task"}, 0, ev("task.created", `{}`))
		require.NoError(t, err)
		return errors.New("roll back")
	}))
	select {
	case <-wake:
		t.Fatal("a rolled-back append woke a subscriber")
	default:
	}
	_, err := s.Append(ctx, eventstore.Stream{TenantID: tenantA, AggregateType: "task"}, 0, ev("task.created", `{}`))
	require.NoError(t, err)
	select {
	case <-wake:
	default:
		t.Fatal("a committed append did not wake the subscriber")
	}
}

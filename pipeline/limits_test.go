package pipeline_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/kumikotest"
	"github.com/kumiko-go/kumiko/pipeline"
)

// PruneIdempotencyKeys deletes the keys recorded before its cutoff, in
// chunks, through the index on created_at; newer keys keep refusing a
// second apply.
func TestPruneIdempotencyKeys(t *testing.T) {
	t.Parallel()
	app := newTasks(t)
	keyed := func(key string) pipeline.Caller {
		c := alice
		c.IdempotencyKey, c.RequestHash = key, "h-"+key
		return c
	}
	for _, k := range []string{"old-1", "old-2", "recent"} {
		write(t, app, keyed(k), "task.create", `{"title":"keyed"}`)
	}
	app.Exec(t, `UPDATE kumiko_idempotency_keys SET created_at = now() - interval '8 days' WHERE key LIKE 'old-%'`)
	// A backlog of more than two chunks.
	app.Exec(t, `INSERT INTO kumiko_idempotency_keys (tenant_id, user_id, key, created_at)
SELECT $1, 'bulk', 'bulk-' || g, now() - interval '30 days' FROM generate_series(1, 25000) g`, [16]byte(tenantB))
	// The catalogs, not pg_indexes: its indexdef opens every index it
	// looks at, and other tests drop theirs concurrently.
	require.Equal(t, 1, app.Count(t, `SELECT count(*) FROM pg_index i
	JOIN pg_class t ON t.oid = i.indrelid
	JOIN pg_namespace n ON n.oid = t.relnamespace
	JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = i.indkey[0]
WHERE n.nspname = $1 AND t.relname = 'kumiko_idempotency_keys' AND a.attname = 'created_at' AND i.indnatts = 1`, app.Schema), "an index serves the prune")

	n, err := app.Executor.PruneIdempotencyKeys(ctx, time.Now().Add(-7*24*time.Hour))
	require.NoError(t, err)
	require.Equal(t, int64(25_002), n)
	require.Equal(t, 1, app.Count(t, `SELECT count(*) FROM kumiko_idempotency_keys`))
	require.Equal(t, 1, app.Count(t, `SELECT count(*) FROM kumiko_idempotency_keys WHERE key = 'recent'`))

	_, err = app.Executor.Write(ctx, keyed("recent"), req("task.create", `{"title":"keyed"}`))
	_, pe := code(t, err)
	require.Equal(t, "already_applied", pe.Reason(), "a kept key still refuses")

	n, err = app.Executor.PruneIdempotencyKeys(ctx, time.Now().Add(-7*24*time.Hour))
	require.NoError(t, err)
	require.Zero(t, n, "nothing left to prune")
}

// holdEvents locks the test schema's kumiko_events against every read until
// the returned release is called, and waits returns once n sessions are
// queued behind the lock: a deterministic slow as-of read.
func holdEvents(t *testing.T, app *kumikotest.App) (waiting func(n int), release func()) {
	t.Helper()
	tx, err := app.Pool.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `LOCK TABLE kumiko_events IN ACCESS EXCLUSIVE MODE`)
	require.NoError(t, err)
	var once sync.Once
	release = func() { once.Do(func() { _ = tx.Rollback(ctx) }) }
	t.Cleanup(release)
	waiting = func(n int) {
		t.Helper()
		require.Eventually(t, func() bool { return eventsWaiters(t, app) >= n },
			20*time.Second, 5*time.Millisecond, "%d sessions wait for kumiko_events", n)
	}
	return waiting, release
}

// eventsWaiters counts the sessions waiting for a lock on kumiko_events.
func eventsWaiters(t *testing.T, app *kumikotest.App) int {
	t.Helper()
	return app.Count(t, `SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = 'kumiko_events'::regclass`)
}

// Lists with asOf are bounded: past AsOfConcurrency one more is refused at
// once (unavailable, as_of_busy) while the others are held, other reads go
// on, and the slot is free again when they end.
func TestAsOfListConcurrencyLimit(t *testing.T) {
	t.Parallel()
	app := newTasks(t)
	write(t, app, alice, "task.create", `{"title":"then"}`)
	d, err := pipeline.New(app.Registry, app.Store, pipeline.Config{AsOfConcurrency: 1, AsOfTimeout: time.Minute})
	require.NoError(t, err)
	asOf := req("task.list", fmt.Sprintf(`{"asOf":%q}`, time.Now().Add(time.Hour).UTC().Format(time.RFC3339Nano)))

	waiting, release := holdEvents(t, app)
	held := make(chan error, 1)
	go func() { _, err := d.Query(ctx, alice, asOf); held <- err }()
	waiting(1)

	quick, cancel := context.WithTimeout(ctx, 10*time.Second) // fails cleanly instead of hanging
	defer cancel()
	_, err = d.Query(quick, bob, asOf)
	c, pe := code(t, err)
	require.Equal(t, pipeline.CodeUnavailable, c, err)
	require.Equal(t, "as_of_busy", pe.Reason())
	_, err = d.Query(quick, alice, req("task.list", `{}`))
	require.NoError(t, err, "a list of current rows is not limited")

	release()
	require.NoError(t, <-held)
	out, err := d.Query(ctx, alice, asOf)
	require.NoError(t, err, "the slot is free again")
	require.Len(t, row(t, out)["rows"], 1)
}

// A list with asOf that outlasts AsOfTimeout ends with unavailable
// (as_of_timeout), its read cancelled in the database, and frees its slot.
func TestAsOfListTimeout(t *testing.T) {
	t.Parallel()
	app := newTasks(t)
	write(t, app, alice, "task.create", `{"title":"then"}`)
	d, err := pipeline.New(app.Registry, app.Store, pipeline.Config{AsOfConcurrency: 1, AsOfTimeout: 100 * time.Millisecond})
	require.NoError(t, err)
	asOf := req("task.list", fmt.Sprintf(`{"asOf":%q}`, time.Now().Add(time.Hour).UTC().Format(time.RFC3339Nano)))

	_, release := holdEvents(t, app)
	done := make(chan error, 1)
	go func() { _, err := d.Query(ctx, alice, asOf); done <- err }()
	var err2 error
	select {
	case err2 = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the as-of list outlived its timeout")
	}
	c, pe := code(t, err2)
	require.Equal(t, pipeline.CodeUnavailable, c, err2)
	require.Equal(t, "as_of_timeout", pe.Reason())
	require.Eventually(t, func() bool { return eventsWaiters(t, app) == 0 },
		20*time.Second, 5*time.Millisecond, "the read was cancelled in the database")

	release()
	_, err = d.Query(ctx, alice, asOf)
	require.NoError(t, err, "the slot was freed")
}

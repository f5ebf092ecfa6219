package pipeline_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

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
	require.Equal(t, 1, app.Count(t, `SELECT count(*) FROM pg_indexes WHERE schemaname = $1
	AND tablename = 'kumiko_idempotency_keys' AND indexdef LIKE '%(created_at)%'`, app.Schema), "an index serves the prune")

	n, err := app.Dispatcher.PruneIdempotencyKeys(ctx, time.Now().Add(-7*24*time.Hour))
	require.NoError(t, err)
	require.Equal(t, int64(25_002), n)
	require.Equal(t, 1, app.Count(t, `SELECT count(*) FROM kumiko_idempotency_keys`))
	require.Equal(t, 1, app.Count(t, `SELECT count(*) FROM kumiko_idempotency_keys WHERE key = 'recent'`))

	_, err = app.Dispatcher.Write(ctx, keyed("recent"), req("task.create", `{"title":"keyed"}`))
	_, pe := code(t, err)
	require.Equal(t, "already_applied", pe.Reason, "a kept key still refuses")

	n, err = app.Dispatcher.PruneIdempotencyKeys(ctx, time.Now().Add(-7*24*time.Hour))
	require.NoError(t, err)
	require.Zero(t, n, "nothing left to prune")
}

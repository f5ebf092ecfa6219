package batchtx_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/internal/batchtx"
	"github.com/kumiko-go/kumiko/kumikotest"
)

// Queued statements reach the server in order before whatever comes next
// on the transaction: a read, a batch, a savepoint, a statement of several
// commands; the first failure surfaces there, and the commit sends the rest.
func TestQueuedStatementsKeepTheirOrder(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	ctx := context.Background()
	db.Exec(t, `CREATE TABLE q (n int PRIMARY KEY)`)

	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	q := batchtx.New(tx)
	tag, err := q.Exec(ctx, `INSERT INTO q VALUES ($1)`, 1)
	require.NoError(t, err)
	require.Equal(t, int64(0), tag.RowsAffected(), "queued: no command tag yet")
	var n int
	require.NoError(t, q.QueryRow(ctx, `SELECT count(*) FROM q`).Scan(&n))
	require.Equal(t, 1, n, "a read sends the queue first")

	_, err = q.Exec(ctx, `INSERT INTO q VALUES ($1)`, 2)
	require.NoError(t, err)
	var b pgx.Batch
	b.Queue(`SELECT count(*) FROM q`)
	br := q.SendBatch(ctx, &b)
	require.NoError(t, br.QueryRow().Scan(&n))
	require.NoError(t, br.Close())
	require.Equal(t, 2, n, "a caller's batch comes after the queue")

	_, err = q.Exec(ctx, `INSERT INTO q VALUES ($1)`, 3)
	require.NoError(t, err)
	_, err = q.Exec(ctx, `INSERT INTO q VALUES (4); INSERT INTO q VALUES (5)`) // several commands run at once
	require.NoError(t, err)
	sp, err := q.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, sp.QueryRow(ctx, `SELECT count(*) FROM q`).Scan(&n))
	require.Equal(t, 5, n)
	require.NoError(t, sp.Commit(ctx))

	_, err = q.Exec(ctx, `INSERT INTO q VALUES ($1)`, 6)
	require.NoError(t, err)
	require.NoError(t, q.Commit(ctx), "the commit sends the queue")
	require.Equal(t, 6, db.Count(t, `SELECT count(*) FROM q`))

	tx, err = db.Pool.Begin(ctx)
	require.NoError(t, err)
	q = batchtx.New(tx)
	_, err = q.Exec(ctx, `INSERT INTO q VALUES ($1)`, 1) // a duplicate
	require.NoError(t, err)
	require.ErrorContains(t, q.Flush(ctx), "duplicate key")
	require.NoError(t, q.Rollback(ctx))
}

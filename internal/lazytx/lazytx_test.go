package lazytx_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/internal/lazytx"
	"github.com/kumiko-go/kumiko/internal/roundtrips"
	"github.com/kumiko-go/kumiko/kumikotest"
)

// setup returns a pool on a fresh schema holding table q (n int primary
// key), whose connections report what they send.
func setup(t *testing.T) (*pgxpool.Pool, *roundtrips.Recorder) {
	t.Helper()
	db := kumikotest.NewDB(t)
	db.Exec(t, `CREATE TABLE q (n int PRIMARY KEY)`)
	cfg, err := pgxpool.ParseConfig(db.URL)
	require.NoError(t, err)
	s := &roundtrips.Recorder{}
	cfg.ConnConfig.Tracer = s
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool, s
}

// begin opens a Tx on a connection of pool, after warming the connection's
// statement cache with the statements the tests send (a statement a
// connection sees first is prepared in a round trip of its own).
func begin(t *testing.T, pool *pgxpool.Pool, s *roundtrips.Recorder) *lazytx.Tx {
	t.Helper()
	ctx := context.Background()
	pc, err := pool.Acquire(ctx)
	require.NoError(t, err)
	warm := lazytx.Begin(pc.Conn(), nil)
	warm.Enqueue(nil, `INSERT INTO q VALUES ($1)`, -1)
	var n int
	require.NoError(t, warm.QueryRow(ctx, `SELECT count(*) FROM q WHERE n > $1`, 0).Scan(&n))
	_, err = warm.Exec(ctx, `INSERT INTO q VALUES ($1)`, -2)
	require.NoError(t, err)
	rows, err := warm.Query(ctx, `SELECT n FROM q WHERE n > $1`, 0)
	require.NoError(t, err)
	rows.Close()
	require.NoError(t, warm.Rollback(ctx))
	s.Take()
	return lazytx.Begin(pc.Conn(), pc.Release)
}

func count(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*) FROM q WHERE n > 0`).Scan(&n))
	return n
}

// BEGIN travels with the first statement and the queue with the next one;
// COMMIT carries what is still queued: a write of a queued key, a read and a
// queued row is two round trips, where a plain transaction takes five.
func TestRoundTrips(t *testing.T) {
	t.Parallel()
	pool, s := setup(t)
	ctx := context.Background()

	tx := begin(t, pool, s)
	tx.Enqueue(nil, `INSERT INTO q VALUES ($1)`, 1)
	var n int
	require.NoError(t, tx.QueryRow(ctx, `SELECT count(*) FROM q WHERE n > $1`, 0).Scan(&n))
	require.Equal(t, 1, n, "the read comes after the queued insert")
	tx.Enqueue(nil, `INSERT INTO q VALUES ($1)`, 2)
	require.NoError(t, tx.Commit(ctx))
	require.Equal(t, [][]string{{"BEGIN", "INSERT", "SELECT"}, {"INSERT", "COMMIT"}}, s.Take())
	require.Equal(t, 2, count(t, pool))
	s.Take()
	require.Equal(t, int32(0), pool.Stat().AcquiredConns(), "the connection went back to the pool")

	// A transaction that sent nothing ends without a round trip.
	tx = begin(t, pool, s)
	require.NoError(t, tx.Commit(ctx))
	tx = begin(t, pool, s)
	require.NoError(t, tx.Rollback(ctx))
	require.Empty(t, s.Take())

	// An Exec carries; the commit then goes alone.
	tx = begin(t, pool, s)
	_, err := tx.Exec(ctx, `INSERT INTO q VALUES ($1)`, 3)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	require.Equal(t, [][]string{{"BEGIN", "INSERT"}, {"COMMIT"}}, s.Take())
	require.Equal(t, 3, count(t, pool))
}

// A queued statement that fails at the commit keeps everything from
// committing: PostgreSQL skips the COMMIT after it, the check names the
// error, the connection goes back to the pool usable.
func TestFailureCarriedWithCommitCommitsNothing(t *testing.T) {
	t.Parallel()
	pool, s := setup(t)
	ctx := context.Background()
	_, err := pool.Exec(ctx, `INSERT INTO q VALUES (1)`)
	require.NoError(t, err)

	tx := begin(t, pool, s)
	_, err = tx.Exec(ctx, `INSERT INTO q VALUES ($1)`, 2)
	require.NoError(t, err)
	named := errors.New("row 1 exists")
	tx.Enqueue(func(err error) error { return errors.Join(named, err) }, `INSERT INTO q VALUES ($1)`, 1)
	err = tx.Commit(ctx)
	require.ErrorIs(t, err, named)
	require.ErrorContains(t, err, "duplicate key")
	require.Equal(t, 1, count(t, pool), "row 2 did not commit")
	require.Equal(t, int32(0), pool.Stat().AcquiredConns())
	require.Equal(t, 1, count(t, pool), "the connection is usable again")
}

// The first queued failure is answered by the statement that carried it,
// by every later one and by the commit.
func TestQueuedFailureSticks(t *testing.T) {
	t.Parallel()
	pool, s := setup(t)
	ctx := context.Background()
	_, err := pool.Exec(ctx, `INSERT INTO q VALUES (1)`)
	require.NoError(t, err)

	tx := begin(t, pool, s)
	named := errors.New("refused")
	tx.Enqueue(func(error) error { return named }, `INSERT INTO q VALUES ($1)`, 1)
	_, err = tx.Exec(ctx, `INSERT INTO q VALUES ($1)`, 2)
	require.ErrorIs(t, err, named, "the carrying statement answers the queued failure")
	var n int
	require.ErrorIs(t, tx.QueryRow(ctx, `SELECT count(*) FROM q WHERE n > $1`, 0).Scan(&n), named)
	_, err = tx.Query(ctx, `SELECT n FROM q WHERE n > $1`, 0) //nolint:sqlclosecheck // fails: there are no rows
	require.ErrorIs(t, err, named)
	require.ErrorIs(t, tx.Flush(ctx), named)
	require.ErrorIs(t, tx.Err(), named)
	require.ErrorIs(t, tx.Commit(ctx), named)
	require.Equal(t, 1, count(t, pool))
	require.ErrorIs(t, tx.Rollback(ctx), pgx.ErrTxClosed)
}

// Rows of a carried query close their batch when read to the end, so the
// connection serves the next statement; Rollback undoes what was sent.
func TestQueryCarriesAndRollbackUndoes(t *testing.T) {
	t.Parallel()
	pool, s := setup(t)
	ctx := context.Background()
	tx := begin(t, pool, s)
	tx.Enqueue(nil, `INSERT INTO q VALUES ($1)`, 1)
	tx.Enqueue(nil, `INSERT INTO q VALUES ($1)`, 2)
	rows, err := tx.Query(ctx, `SELECT n FROM q WHERE n > $1 ORDER BY n`, 0)
	require.NoError(t, err)
	var got []int
	for rows.Next() {
		var n int
		require.NoError(t, rows.Scan(&n))
		got = append(got, n)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []int{1, 2}, got)
	require.Equal(t, [][]string{{"BEGIN", "INSERT", "INSERT", "SELECT"}}, s.Take())
	_, err = tx.Exec(ctx, `INSERT INTO q VALUES ($1)`, 3)
	require.NoError(t, err, "the batch of the rows is closed")
	require.NoError(t, tx.Rollback(ctx))
	require.Equal(t, 0, count(t, pool))
	require.Equal(t, int32(0), pool.Stat().AcquiredConns())
}

// Savepoints are queued: one rolled back before anything was sent costs
// nothing; one rolled back after a failure leaves the transaction usable.
func TestSavepoints(t *testing.T) {
	t.Parallel()
	pool, s := setup(t)
	ctx := context.Background()
	tx := begin(t, pool, s)

	sp, err := tx.Begin(ctx)
	require.NoError(t, err)
	lazytx.Enqueue(ctx, sp, nil, `INSERT INTO q VALUES ($1)`, 1) //nolint:errcheck // queued: nil
	require.NoError(t, sp.Rollback(ctx))
	require.Empty(t, s.Take(), "nothing was sent")

	_, err = tx.Exec(ctx, `INSERT INTO q VALUES ($1)`, 1)
	require.NoError(t, err)
	sp, err = tx.Begin(ctx)
	require.NoError(t, err)
	_, err = sp.Exec(ctx, `INSERT INTO q VALUES ($1)`, 1)
	require.ErrorContains(t, err, "duplicate key")
	require.NoError(t, sp.Rollback(ctx))
	require.ErrorIs(t, sp.Rollback(ctx), pgx.ErrTxClosed)

	sp, err = tx.Begin(ctx)
	require.NoError(t, err)
	_, err = sp.Exec(ctx, `INSERT INTO q VALUES ($1)`, 2)
	require.NoError(t, err)
	require.NoError(t, sp.Commit(ctx))
	require.NoError(t, tx.Commit(ctx))
	require.Equal(t, [][]string{
		{"BEGIN", "INSERT"},
		{"SAVEPOINT", "INSERT"}, {"ROLLBACK"},
		{"SAVEPOINT", "INSERT"},
		{"RELEASE", "COMMIT"},
	}, s.Take())
	require.Equal(t, 2, count(t, pool))
}

// What cannot travel in a batch runs alone after the queue: several
// statements in one string, an explicit QueryExecMode, a COPY; Conn begins
// the transaction, so what runs on the connection directly rolls back with
// it; large objects work inside the transaction.
func TestWhatGoesAlone(t *testing.T) {
	t.Parallel()
	pool, s := setup(t)
	ctx := context.Background()
	tx := begin(t, pool, s)
	tx.Enqueue(nil, `INSERT INTO q VALUES ($1)`, 1)
	_, err := tx.Exec(ctx, `INSERT INTO q VALUES (2); INSERT INTO q VALUES (3)`)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `INSERT INTO q VALUES ($1)`, pgx.QueryExecModeSimpleProtocol, 4)
	require.NoError(t, err)
	_, err = tx.CopyFrom(ctx, pgx.Identifier{"q"}, []string{"n"}, pgx.CopyFromRows([][]any{{5}}))
	require.NoError(t, err)
	_, err = tx.Conn().Exec(ctx, `INSERT INTO q VALUES (6)`)
	require.NoError(t, err)
	lo := tx.LargeObjects()
	oid, err := lo.Create(ctx, 0)
	require.NoError(t, err)
	obj, err := lo.Open(ctx, oid, pgx.LargeObjectModeWrite)
	require.NoError(t, err)
	_, err = obj.Write([]byte("kumiko"))
	require.NoError(t, err)
	require.NoError(t, obj.Close())
	require.Equal(t, [][]string{{"BEGIN", "INSERT"}, {"INSERT"}, {"INSERT"}}, s.Take()[:3])
	var n int
	require.NoError(t, tx.QueryRow(ctx, `SELECT count(*) FROM q WHERE n > $1`, 0).Scan(&n))
	require.Equal(t, 6, n)
	require.NoError(t, tx.Rollback(ctx))
	require.Equal(t, 0, count(t, pool))
}

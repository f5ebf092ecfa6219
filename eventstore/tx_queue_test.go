package eventstore_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/internal/roundtrips"
	"github.com/kumiko-go/kumiko/kumikotest"
)

// txSetup returns a pool on a fresh schema holding table q (n int primary
// key), whose connections report what they send.
func txSetup(t *testing.T) (*pgxpool.Pool, *roundtrips.Recorder) {
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

// txBegin opens a Tx on a connection of pool, after warming the connection's
// statement cache with the statements the tests send (a statement a
// connection sees first is prepared in a round trip of its own).
func txBegin(t *testing.T, pool *pgxpool.Pool, s *roundtrips.Recorder) *eventstore.Tx {
	t.Helper()
	ctx := context.Background()
	pc, err := pool.Acquire(ctx)
	require.NoError(t, err)
	warm := eventstore.NewTx(pc.Conn(), nil)
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
	return eventstore.NewTx(pc.Conn(), pc.Release)
}

func txCount(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*) FROM q WHERE n > 0`).Scan(&n))
	return n
}

// BEGIN travels with the first statement and the queue with the next one;
// COMMIT carries what is still queued: a write of a queued key, a read and a
// queued row is two round trips, where a plain transaction takes five.
func TestTxRoundTrips(t *testing.T) {
	t.Parallel()
	pool, s := txSetup(t)
	ctx := context.Background()

	tx := txBegin(t, pool, s)
	tx.Enqueue(nil, `INSERT INTO q VALUES ($1)`, 1)
	var n int
	require.NoError(t, tx.QueryRow(ctx, `SELECT count(*) FROM q WHERE n > $1`, 0).Scan(&n))
	require.Equal(t, 1, n, "the read comes after the queued insert")
	tx.Enqueue(nil, `INSERT INTO q VALUES ($1)`, 2)
	require.NoError(t, tx.Commit(ctx))
	require.Equal(t, [][]string{{"BEGIN", "INSERT", "SELECT"}, {"INSERT", "COMMIT"}}, s.Take())
	require.Equal(t, 2, txCount(t, pool))
	s.Take()
	require.Equal(t, int32(0), pool.Stat().AcquiredConns(), "the connection went back to the pool")

	// A transaction that sent nothing ends without a round trip.
	tx = txBegin(t, pool, s)
	require.NoError(t, tx.Commit(ctx))
	tx = txBegin(t, pool, s)
	require.NoError(t, tx.Rollback(ctx))
	require.Empty(t, s.Take())

	// An Exec carries; the commit then goes alone.
	tx = txBegin(t, pool, s)
	_, err := tx.Exec(ctx, `INSERT INTO q VALUES ($1)`, 3)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	require.Equal(t, [][]string{{"BEGIN", "INSERT"}, {"COMMIT"}}, s.Take())
	require.Equal(t, 3, txCount(t, pool))
}

// A queued statement that fails at the commit keeps everything from
// committing: PostgreSQL skips the COMMIT after it, the check names the
// error, the connection goes back to the pool usable.
func TestTxFailureCarriedWithCommitCommitsNothing(t *testing.T) {
	t.Parallel()
	pool, s := txSetup(t)
	ctx := context.Background()
	_, err := pool.Exec(ctx, `INSERT INTO q VALUES (1)`)
	require.NoError(t, err)

	tx := txBegin(t, pool, s)
	_, err = tx.Exec(ctx, `INSERT INTO q VALUES ($1)`, 2)
	require.NoError(t, err)
	named := errors.New("row 1 exists")
	tx.Enqueue(func(err error) error { return errors.Join(named, err) }, `INSERT INTO q VALUES ($1)`, 1)
	err = tx.Commit(ctx)
	require.ErrorIs(t, err, named)
	require.ErrorContains(t, err, "duplicate key")
	require.Equal(t, 1, txCount(t, pool), "row 2 did not commit")
	require.Equal(t, int32(0), pool.Stat().AcquiredConns())
	require.Equal(t, 1, txCount(t, pool), "the connection is usable again")
}

// The first queued failure is answered by the statement that carried it,
// by every later one and by the commit.
func TestTxQueuedFailureSticks(t *testing.T) {
	t.Parallel()
	pool, s := txSetup(t)
	ctx := context.Background()
	_, err := pool.Exec(ctx, `INSERT INTO q VALUES (1)`)
	require.NoError(t, err)

	tx := txBegin(t, pool, s)
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
	require.Equal(t, 1, txCount(t, pool))
	require.ErrorIs(t, tx.Rollback(ctx), pgx.ErrTxClosed)
}

// Rows of a carried query close their batch when read to the end, so the
// connection serves the next statement; Rollback undoes what was sent.
func TestTxQueryCarriesAndRollbackUndoes(t *testing.T) {
	t.Parallel()
	pool, s := txSetup(t)
	ctx := context.Background()
	tx := txBegin(t, pool, s)
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
	require.Equal(t, 0, txCount(t, pool))
	require.Equal(t, int32(0), pool.Stat().AcquiredConns())
}

// Savepoints are queued: one rolled back before anything was sent costs
// nothing; one rolled back after a failure leaves the transaction usable.
func TestTxSavepoints(t *testing.T) {
	t.Parallel()
	pool, s := txSetup(t)
	ctx := context.Background()
	tx := txBegin(t, pool, s)

	sp, err := tx.Begin(ctx)
	require.NoError(t, err)
	eventstore.Enqueue(ctx, sp, nil, `INSERT INTO q VALUES ($1)`, 1) //nolint:errcheck // queued: nil
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
	require.Equal(t, 2, txCount(t, pool))
}

// What cannot travel in a batch runs alone after the queue: several
// statements in one string, an explicit QueryExecMode, a COPY; Conn begins
// the transaction, so what runs on the connection directly rolls back with
// it; large objects work inside the transaction.
func TestTxWhatGoesAlone(t *testing.T) {
	t.Parallel()
	pool, s := txSetup(t)
	ctx := context.Background()
	tx := txBegin(t, pool, s)
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
	require.Equal(t, 0, txCount(t, pool))
}

// The Queued view queues Exec statements; they reach the server in order
// before whatever comes next: a read, a caller's batch, a savepoint's
// statement, a statement of several commands. The first failure is answered
// there, named by its statement.
func TestTxQueuedViewKeepsOrder(t *testing.T) {
	t.Parallel()
	pool, s := txSetup(t)
	ctx := context.Background()
	tx := txBegin(t, pool, s)
	q := tx.Queued()
	require.Same(t, tx, eventstore.TxOf(q))
	tag, err := q.Exec(ctx, `INSERT INTO q VALUES ($1)`, 1)
	require.NoError(t, err)
	require.Equal(t, int64(0), tag.RowsAffected(), "queued: no command tag yet")
	require.Empty(t, s.Take(), "nothing sent")
	var n int
	require.NoError(t, q.QueryRow(ctx, `SELECT count(*) FROM q WHERE n > $1`, 0).Scan(&n))
	require.Equal(t, 1, n, "a read carries the queue")
	require.Equal(t, [][]string{{"BEGIN", "INSERT", "SELECT"}}, s.Take())

	_, err = q.Exec(ctx, `INSERT INTO q VALUES ($1)`, 2)
	require.NoError(t, err)
	var b pgx.Batch
	b.Queue(`SELECT count(*) FROM q WHERE n > $1`, 0)
	br := q.SendBatch(ctx, &b)
	require.NoError(t, br.QueryRow().Scan(&n))
	require.NoError(t, br.Close())
	require.Equal(t, 2, n, "a caller's batch comes after the queue")

	_, err = q.Exec(ctx, `INSERT INTO q VALUES ($1)`, 3)
	require.NoError(t, err)
	_, err = q.Exec(ctx, `INSERT INTO q VALUES (4); INSERT INTO q VALUES (5)`) // several commands go alone, after the queue
	require.NoError(t, err)
	sp, err := q.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, sp.QueryRow(ctx, `SELECT count(*) FROM q WHERE n > $1`, 0).Scan(&n))
	require.Equal(t, 5, n)
	require.NoError(t, sp.Commit(ctx))
	_, err = q.Exec(ctx, `INSERT INTO q VALUES ($1)`, 6)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx), "the commit carries the queue")
	require.Equal(t, 6, txCount(t, pool))

	tx = txBegin(t, pool, s)
	q = tx.Queued()
	_, err = q.Exec(ctx, `INSERT INTO q VALUES ($1)`, 1) // a duplicate
	require.NoError(t, err)
	err = tx.Flush(ctx)
	require.ErrorContains(t, err, "duplicate key")
	require.ErrorContains(t, err, `queued statement "INSERT INTO q VALUES ($1)"`, "the failure names its statement")
	_, err = q.Exec(ctx, `INSERT INTO q VALUES ($1)`, 7)
	require.ErrorIs(t, err, tx.Err(), "the failure sticks")
	require.NoError(t, tx.Rollback(ctx))
	require.Equal(t, 6, txCount(t, pool))
}

// A statement queued inside a savepoint is the savepoint's: its Commit
// sends it and, when it fails, rolls back to the savepoint and answers the
// failure, and the transaction goes on. A savepoint with nothing queued
// inside commits without a round trip.
func TestTxSavepointOwnsItsQueuedFailures(t *testing.T) {
	t.Parallel()
	pool, s := txSetup(t)
	ctx := context.Background()
	_, err := pool.Exec(ctx, `INSERT INTO q VALUES (1)`)
	require.NoError(t, err)

	tx := txBegin(t, pool, s)
	tx.Enqueue(nil, `INSERT INTO q VALUES ($1)`, 2)
	sp, err := tx.Begin(ctx)
	require.NoError(t, err)
	named := errors.New("row 1 exists")
	require.NoError(t, eventstore.Enqueue(ctx, sp, func(err error) error { return errors.Join(named, err) }, `INSERT INTO q VALUES ($1)`, 1))
	require.ErrorIs(t, sp.Commit(ctx), named)
	require.NoError(t, tx.Err(), "the failure was the savepoint's")
	require.ErrorIs(t, sp.Rollback(ctx), pgx.ErrTxClosed)

	sp, err = tx.Begin(ctx)
	require.NoError(t, err)
	_, err = sp.Exec(ctx, `INSERT INTO q VALUES ($1)`, 3)
	require.NoError(t, err)
	s.Take()
	require.NoError(t, sp.Commit(ctx))
	require.Empty(t, s.Take(), "RELEASE is queued")
	require.NoError(t, tx.Commit(ctx))
	require.Equal(t, [][]string{{"RELEASE", "COMMIT"}}, s.Take())
	require.Equal(t, 3, txCount(t, pool), "rows 1, 2 and 3")
}

// AfterCommit functions run after the commit, in order; never after a
// rollback; a savepoint rolled back drops those given inside it.
func TestTxAfterCommit(t *testing.T) {
	t.Parallel()
	pool, s := txSetup(t)
	ctx := context.Background()
	var ran []string
	mark := func(s string) func() { return func() { ran = append(ran, s) } }

	tx := txBegin(t, pool, s)
	tx.AfterCommit(mark("a"))
	sp, err := tx.Begin(ctx)
	require.NoError(t, err)
	eventstore.TxOf(sp).AfterCommit(mark("dropped"))
	require.NoError(t, sp.Rollback(ctx))
	sp, err = tx.Begin(ctx)
	require.NoError(t, err)
	eventstore.TxOf(sp).AfterCommit(mark("b"))
	require.NoError(t, sp.Commit(ctx))
	_, err = tx.Exec(ctx, `INSERT INTO q VALUES ($1)`, 1)
	require.NoError(t, err)
	require.Empty(t, ran, "nothing runs before the commit")
	require.NoError(t, tx.Commit(ctx))
	require.Equal(t, []string{"a", "b"}, ran)

	ran = nil
	tx = txBegin(t, pool, s)
	tx.AfterCommit(mark("c"))
	_, err = tx.Exec(ctx, `INSERT INTO q VALUES ($1)`, 2)
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(ctx))
	require.Empty(t, ran, "a rollback runs nothing")

	tx = txBegin(t, pool, s)
	tx.AfterCommit(mark("d"))
	tx.Enqueue(nil, `INSERT INTO q VALUES ($1)`, 1) // a duplicate
	require.Error(t, tx.Commit(ctx))
	require.Empty(t, ran, "a failed commit runs nothing")
}

// Package batchtx queues a transaction's Exec statements and sends them as
// one batch: the pipelining behind multi-stream projection passes and
// rebuilds.
package batchtx

import (
	"context"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Tx is a transaction whose Exec statements are queued and sent together,
// in order, in one round trip before anything else touches the connection
// (a Query, a QueryRow, a savepoint, a commit, Flush), so code running on it
// still reads its own writes. Exec answers an empty command tag; the first
// failing statement surfaces at the next of those calls.
type Tx struct {
	pgx.Tx
	batch pgx.Batch
}

// Exec queues sql, unless it holds several statements (which the extended
// protocol of a batch refuses): those run at once, after the queue.
func (q *Tx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if strings.Contains(strings.TrimRight(sql, "; \t\r\n"), ";") {
		if err := q.Flush(ctx); err != nil {
			return pgconn.CommandTag{}, err
		}
		return q.Tx.Exec(ctx, sql, args...)
	}
	q.batch.Queue(sql, args...)
	return pgconn.CommandTag{}, nil
}

func (q *Tx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if err := q.Flush(ctx); err != nil {
		return nil, err
	}
	return q.Tx.Query(ctx, sql, args...)
}

func (q *Tx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if err := q.Flush(ctx); err != nil {
		return errRow{err}
	}
	return q.Tx.QueryRow(ctx, sql, args...)
}

func (q *Tx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if err := q.Flush(ctx); err != nil {
		return errBatch{err}
	}
	return q.Tx.SendBatch(ctx, b)
}

func (q *Tx) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	if err := q.Flush(ctx); err != nil {
		return 0, err
	}
	return q.Tx.CopyFrom(ctx, table, columns, src)
}

func (q *Tx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	if err := q.Flush(ctx); err != nil {
		return nil, err
	}
	return q.Tx.Prepare(ctx, name, sql)
}

func (q *Tx) Begin(ctx context.Context) (pgx.Tx, error) {
	if err := q.Flush(ctx); err != nil {
		return nil, err
	}
	return q.Tx.Begin(ctx)
}

// Conn is the connection, with the queue sent: whatever runs on it directly
// comes after the queued statements. A failure to send the queue surfaces
// at the end of the pass.
func (q *Tx) Conn() *pgx.Conn {
	if q.batch.Len() > 0 {
		_ = q.Flush(context.Background())
	}
	return q.Tx.Conn()
}

// Commit and Rollback belong to the pass, not to its handlers.
func (q *Tx) Commit(ctx context.Context) error {
	if err := q.Flush(ctx); err != nil {
		return err
	}
	return q.Tx.Commit(ctx)
}

// New wraps tx.
func New(tx pgx.Tx) *Tx { return &Tx{Tx: tx} }

// Flush sends the queued statements and reports the first failure.
func (q *Tx) Flush(ctx context.Context) error {
	n := q.batch.Len()
	if n == 0 {
		return nil
	}
	b := q.batch // the results read from the batch while the queue fills anew
	q.batch = pgx.Batch{}
	br := q.Tx.SendBatch(ctx, &b)
	for range n {
		if _, err := br.Exec(); err != nil {
			_ = br.Close()
			return err
		}
	}
	return br.Close()
}

// ErrRow is a pgx.Row whose Scan fails with err: what a wrapped
// transaction answers when the statements it had to send first failed.
func ErrRow(err error) pgx.Row { return errRow{err} }

// ErrBatch is a pgx.BatchResults that fails with err, for the same case.
func ErrBatch(err error) pgx.BatchResults { return errBatch{err} }

// errRow is a pgx.Row that fails with err.
type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// errBatch is a pgx.BatchResults that fails with err.
type errBatch struct{ err error }

func (b errBatch) Exec() (pgconn.CommandTag, error) { return pgconn.CommandTag{}, b.err }
func (b errBatch) Query() (pgx.Rows, error)         { return nil, b.err }
func (b errBatch) QueryRow() pgx.Row                { return errRow(b) }
func (b errBatch) Close() error                     { return b.err }
func (b errBatch) Tx() pgx.Tx                       { return nil }

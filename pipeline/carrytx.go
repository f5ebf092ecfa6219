package pipeline

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/kumiko-go/kumiko/internal/batchtx"
)

// carryTx is the write transaction as handlers and the event store see it:
// statements the executor queues (enqueue) are not sent on their own but
// travel in one batch with the next statement anything sends on the
// transaction — one round trip instead of two. The idempotency key insert
// goes this way with the append that follows it.
//
// A queued statement's check runs when its result arrives; the first
// failure is kept (err) and answered by the statement that carried it and by
// every later one, so a handler that ignores an error cannot commit past a
// refused key: the executor reads err before the commit.
//
// Exec and QueryRow carry the queue; every other call sends it first (Flush)
// and then runs as on the plain transaction.
type carryTx struct {
	pgx.Tx
	queue []queued
	err   error
}

// queued is a statement waiting to be carried.
type queued struct {
	sql  string
	args []any
	// check judges the statement's result (err: its failure); it returns
	// the error to answer, nil when the result is fine.
	check func(tag pgconn.CommandTag, err error) error
}

// resolver is a check's error that needs the connection to say what went
// wrong (a read after the batch is done): resolve returns the final error.
type resolver interface {
	resolve(ctx context.Context, tx pgx.Tx) error
}

func newCarryTx(tx pgx.Tx) *carryTx { return &carryTx{Tx: tx} }

// carriedFailed reports whether tx is a carryTx whose queued statements
// failed (a refused idempotency key).
func carriedFailed(tx pgx.Tx) bool {
	q, ok := tx.(*carryTx)
	return ok && q.err != nil
}

// enqueue queues sql to travel with the next statement.
func (q *carryTx) enqueue(sql string, check func(pgconn.CommandTag, error) error, args ...any) {
	q.queue = append(q.queue, queued{sql: sql, args: args, check: check})
}

// send sends the queue and then sql (when not empty) in one batch, reads the
// queue's results and returns the batch, positioned at sql's result.
func (q *carryTx) send(ctx context.Context, sql string, args []any) (pgx.BatchResults, error) {
	if q.err != nil {
		return nil, q.err
	}
	items := q.queue
	q.queue = nil
	b := &pgx.Batch{}
	for _, s := range items {
		b.Queue(s.sql, s.args...)
	}
	if sql != "" {
		b.Queue(sql, args...)
	}
	br := q.Tx.SendBatch(ctx, b)
	for _, s := range items {
		tag, err := br.Exec()
		if cerr := s.check(tag, err); cerr != nil {
			_ = br.Close()
			if r, ok := cerr.(resolver); ok && err == nil {
				cerr = r.resolve(ctx, q.Tx)
			}
			q.err = cerr
			return nil, cerr
		}
	}
	return br, nil
}

// Flush sends what is queued, alone.
func (q *carryTx) Flush(ctx context.Context) error {
	if len(q.queue) == 0 {
		return q.err
	}
	br, err := q.send(ctx, "", nil)
	if err != nil {
		return err
	}
	return br.Close()
}

func (q *carryTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if len(q.queue) == 0 && q.err == nil {
		return q.Tx.Exec(ctx, sql, args...)
	}
	br, err := q.send(ctx, sql, args)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return tag, err
}

func (q *carryTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if len(q.queue) == 0 && q.err == nil {
		return q.Tx.QueryRow(ctx, sql, args...)
	}
	br, err := q.send(ctx, sql, args)
	if err != nil {
		return batchtx.ErrRow(err)
	}
	return batchRow{row: br.QueryRow(), br: br}
}

func (q *carryTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if err := q.Flush(ctx); err != nil {
		return nil, err
	}
	return q.Tx.Query(ctx, sql, args...)
}

func (q *carryTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if err := q.Flush(ctx); err != nil {
		return batchtx.ErrBatch(err)
	}
	return q.Tx.SendBatch(ctx, b)
}

func (q *carryTx) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	if err := q.Flush(ctx); err != nil {
		return 0, err
	}
	return q.Tx.CopyFrom(ctx, table, columns, src)
}

func (q *carryTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	if err := q.Flush(ctx); err != nil {
		return nil, err
	}
	return q.Tx.Prepare(ctx, name, sql)
}

func (q *carryTx) Begin(ctx context.Context) (pgx.Tx, error) {
	if err := q.Flush(ctx); err != nil {
		return nil, err
	}
	return q.Tx.Begin(ctx)
}

// Conn is the connection, with the queue sent: what runs on it directly
// comes after the queued statements. A failure to send is kept in err.
func (q *carryTx) Conn() *pgx.Conn {
	_ = q.Flush(context.Background())
	return q.Tx.Conn()
}

func (q *carryTx) Commit(ctx context.Context) error {
	if err := q.Flush(ctx); err != nil {
		return err
	}
	return q.Tx.Commit(ctx)
}

func (q *carryTx) Rollback(ctx context.Context) error {
	q.queue = nil
	return q.Tx.Rollback(ctx)
}

// batchRow is the row of a statement sent in a batch: Scan also closes the
// batch.
type batchRow struct {
	row pgx.Row
	br  pgx.BatchResults
}

func (r batchRow) Scan(dest ...any) error {
	err := r.row.Scan(dest...)
	if cerr := r.br.Close(); err == nil {
		return cerr
	}
	return err
}

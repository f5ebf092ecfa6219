package eventstore

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Check turns a queued statement's failure into the error to answer. A
// queued statement succeeds or fails in the database: a check judges only
// failures, never a result, because COMMIT may travel in the same batch and
// PostgreSQL skips it only after a failed statement. A nil Check answers
// the failure naming the statement.
type Check func(err error) error

// Tx is the one transaction kumiko writes in: the write path, consumer
// passes, rebuilds and the idempotency key all use it. It costs no round
// trip of its own — BEGIN travels with its first statement, statements
// queued with Enqueue travel with the next one, and COMMIT carries whatever
// is still queued — so a write that records its key, appends an event and
// inserts its row takes two round trips instead of five. It implements
// pgx.Tx:
//
//   - Exec, Query, QueryRow and SendBatch send BEGIN (until it is sent) and
//     the queue in one batch with their own statements. A statement that
//     cannot go in a batch (several statements in one string, an explicit
//     QueryExecMode argument) is sent alone after them.
//   - Enqueue queues a statement; Queued is a view of the transaction whose
//     Exec queues too. The first queued statement that fails is kept (its
//     Check names the error): the statement that carried it answers it, and
//     so do every later statement and the commit, so the transaction never
//     commits past it — unless it failed inside a savepoint that is then
//     rolled back, which leaves the transaction usable again.
//   - Flush sends what is queued now, so its failures are answered here and
//     not by whatever statement comes next.
//   - AfterCommit runs a function once the transaction committed: the
//     store's wake-up of consumers for the events appended in it.
//   - Commit sends the queue and COMMIT in one batch; a transaction that
//     sent nothing commits without a round trip.
//   - Begin opens a savepoint, queued like any statement (see Begin);
//     CopyFrom, Prepare, LargeObjects and Conn send what is queued first.
//
// A Tx is not safe for concurrent use, as no pgx.Tx is.
type Tx struct {
	conn    *pgx.Conn
	release func()
	begun   bool // BEGIN was sent
	done    bool // committed or rolled back
	queue   []queued
	sent    int // how many queued statements were sent, ever
	err     error
	errAt   int // the place of the statement that failed (err) among all queued ones
	nextSP  int
	after   []func()
}

// queued is a statement waiting to be carried.
type queued struct {
	sql   string
	args  []any
	check Check
}

// NewTx returns a transaction on conn that has sent nothing yet. release,
// when not nil, runs once the transaction has ended (the connection back
// to its pool).
func NewTx(conn *pgx.Conn, release func()) *Tx {
	return &Tx{conn: conn, release: release}
}

// RunTx runs fn in a Tx on a connection of pool and commits it when fn
// returns nil; it rolls back when fn fails or panics (the panic goes on),
// and the connection goes back to the pool either way. The functions
// given to AfterCommit run after the commit.
func RunTx(ctx context.Context, pool *pgxpool.Pool, fn func(tx *Tx) error) error {
	pc, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	return run(ctx, NewTx(pc.Conn(), pc.Release), fn)
}

// RunTxOn is RunTx on a connection the caller holds.
func RunTxOn(ctx context.Context, conn *pgx.Conn, fn func(tx *Tx) error) error {
	return run(ctx, NewTx(conn, nil), fn)
}

func run(ctx context.Context, t *Tx, fn func(tx *Tx) error) error {
	defer func() { _ = t.Rollback(ctx) }() // a no-op after the commit
	if err := fn(t); err != nil {
		return err
	}
	if err := t.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// TxOf returns the Tx behind db — itself, one of its savepoints or its
// Queued view — and nil when db is none of them.
func TxOf(db any) *Tx {
	switch t := db.(type) {
	case *Tx:
		return t
	case *savepoint:
		return t.Tx
	case queuedView:
		return t.Tx
	}
	return nil
}

// Execer is what Enqueue needs of a connection that is not a Tx.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Enqueue queues sql on the Tx behind db (see TxOf) to travel with its next
// statement; check, when not nil, names its failure. On any other db, sql
// runs at once and check names its failure there.
func Enqueue(ctx context.Context, db Execer, check Check, sql string, args ...any) error {
	if t := TxOf(db); t != nil {
		t.Enqueue(check, sql, args...)
		return nil
	}
	_, err := db.Exec(ctx, sql, args...)
	if err != nil {
		return checked(check, sql, err)
	}
	return nil
}

// Enqueue queues sql to travel with the next statement sent; check, when
// not nil, names its failure.
func (t *Tx) Enqueue(check Check, sql string, args ...any) {
	t.queue = append(t.queue, queued{sql: sql, args: args, check: check})
}

// checked is err, the failure of sql, as check names it; without a check,
// wrapped with the statement's first words.
func checked(check Check, sql string, err error) error {
	if check != nil {
		return check(err)
	}
	s := strings.Join(strings.Fields(sql), " ")
	if len(s) > 60 {
		s = s[:60] + "…"
	}
	return fmt.Errorf("queued statement %q: %w", s, err)
}

// Err is the first failure of a queued statement, nil while there is none.
func (t *Tx) Err() error { return t.err }

// AfterCommit arranges for fn to run once the transaction committed, in the
// order given; fn never runs when it rolls back. Inside a savepoint, fn is
// dropped when the savepoint is rolled back.
func (t *Tx) AfterCommit(fn func()) { t.after = append(t.after, fn) }

// Queued is a view of the transaction whose Exec queues its statement (it
// answers an empty command tag) instead of sending it: the pipelining of
// consumer passes and rebuilds, whose handlers write many rows and read
// few. Everything else behaves as on the Tx, and reads still see the
// queued writes, which travel in front of them. A queued statement's
// failure is answered by the next statement sent, by Flush or by the
// commit, named by its statement.
func (t *Tx) Queued() pgx.Tx { return queuedView{t} }

// queuedView is the Tx as Queued returns it.
type queuedView struct{ *Tx }

// Exec queues sql, unless it cannot travel in a batch (see Tx).
func (q queuedView) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if q.done {
		return pgconn.CommandTag{}, pgx.ErrTxClosed
	}
	if q.err != nil {
		return pgconn.CommandTag{}, q.err
	}
	if alone(sql, args) {
		return q.Tx.Exec(ctx, sql, args...)
	}
	q.Enqueue(nil, sql, args...)
	return pgconn.CommandTag{}, nil
}

// send sends BEGIN (when not sent yet), the queue and then extra in one
// batch, runs the queue's checks and returns the batch, positioned at
// extra's first result. Unless it fails, the caller closes it.
func (t *Tx) send(ctx context.Context, extra ...*pgx.QueuedQuery) (pgx.BatchResults, error) {
	if t.done {
		return nil, pgx.ErrTxClosed
	}
	if t.err != nil {
		return nil, t.err
	}
	b := &pgx.Batch{QueuedQueries: make([]*pgx.QueuedQuery, 0, len(t.queue)+len(extra)+1)}
	begin := !t.begun
	if begin {
		b.Queue("BEGIN")
	}
	items := t.queue
	t.queue = nil
	first := t.sent
	t.sent += len(items)
	for _, q := range items {
		b.Queue(q.sql, q.args...)
	}
	b.QueuedQueries = append(b.QueuedQueries, extra...)
	br := t.conn.SendBatch(ctx, b)
	t.begun = true
	if begin {
		if _, err := br.Exec(); err != nil {
			_ = br.Close()
			return nil, fmt.Errorf("begin: %w", err)
		}
	}
	for i, q := range items {
		if _, err := br.Exec(); err != nil {
			_ = br.Close()
			t.err, t.errAt = checked(q.check, q.sql, err), first+i
			return nil, t.err
		}
	}
	return br, nil
}

// one is sql as a batch's statement.
func one(sql string, args []any) *pgx.QueuedQuery {
	return &pgx.QueuedQuery{SQL: sql, Arguments: args}
}

// Flush sends BEGIN (when not sent yet) and the queue, alone, and answers
// the first failure of a queued statement.
func (t *Tx) Flush(ctx context.Context) error {
	if t.err != nil || t.done || (t.begun && len(t.queue) == 0) {
		return t.err
	}
	br, err := t.send(ctx)
	if err != nil {
		return err
	}
	return br.Close()
}

// alone reports whether sql cannot go in a batch: several statements in
// one string (the extended protocol of a batch refuses them) or a
// QueryExecMode argument (a batch ignores it).
func alone(sql string, args []any) bool {
	if strings.Contains(strings.TrimRight(sql, "; \t\r\n"), ";") {
		return true
	}
	if len(args) > 0 {
		if _, ok := args[0].(pgx.QueryExecMode); ok {
			return true
		}
	}
	return false
}

// direct reports whether sql goes on the connection as it is: nothing waits
// to be sent, or it cannot go in a batch. What waits is flushed first.
func (t *Tx) direct(ctx context.Context, sql string, args []any) (bool, error) {
	if t.done {
		return true, pgx.ErrTxClosed
	}
	if t.begun && len(t.queue) == 0 {
		return true, t.err
	}
	if !alone(sql, args) {
		return false, nil
	}
	return true, t.Flush(ctx)
}

// Exec carries BEGIN and the queue with sql.
func (t *Tx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if direct, err := t.direct(ctx, sql, args); err != nil {
		return pgconn.CommandTag{}, err
	} else if direct {
		return t.conn.Exec(ctx, sql, args...)
	}
	br, err := t.send(ctx, one(sql, args))
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return tag, err
}

// QueryRow carries BEGIN and the queue with sql.
func (t *Tx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if direct, err := t.direct(ctx, sql, args); err != nil {
		return errRow{err}
	} else if direct {
		return t.conn.QueryRow(ctx, sql, args...)
	}
	br, err := t.send(ctx, one(sql, args))
	if err != nil {
		return errRow{err}
	}
	return batchRow{row: br.QueryRow(), br: br}
}

// Query carries BEGIN and the queue with sql.
func (t *Tx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if direct, err := t.direct(ctx, sql, args); err != nil {
		return nil, err
	} else if direct {
		return t.conn.Query(ctx, sql, args...)
	}
	br, err := t.send(ctx, one(sql, args))
	if err != nil {
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		_ = br.Close()
		return nil, err
	}
	return &batchRows{Rows: rows, br: br}, nil
}

// SendBatch carries BEGIN and the queue in front of b's statements.
func (t *Tx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if direct, err := t.direct(ctx, "", nil); err != nil {
		return errBatch{err}
	} else if direct || b.Len() == 0 {
		if err := t.Flush(ctx); err != nil {
			return errBatch{err}
		}
		return t.conn.SendBatch(ctx, b)
	}
	br, err := t.send(ctx, b.QueuedQueries...)
	if err != nil {
		return errBatch{err}
	}
	return br
}

// CopyFrom sends what waits first.
func (t *Tx) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	if err := t.flushOpen(ctx); err != nil {
		return 0, err
	}
	return t.conn.CopyFrom(ctx, table, columns, src)
}

// Prepare sends what waits first.
func (t *Tx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	if err := t.flushOpen(ctx); err != nil {
		return nil, err
	}
	return t.conn.Prepare(ctx, name, sql)
}

// flushOpen is Flush on a transaction that has not ended.
func (t *Tx) flushOpen(ctx context.Context) error {
	if t.done {
		return pgx.ErrTxClosed
	}
	return t.Flush(ctx)
}

// LargeObjects sends what waits first; the large objects' statements run
// in the transaction.
func (t *Tx) LargeObjects() pgx.LargeObjects {
	ctx := context.Background()
	_ = t.flushOpen(ctx)
	// pgx builds LargeObjects only on its own transactions: one opened as a
	// savepoint of this one serves, and ends with it.
	inner, err := t.conn.BeginTx(ctx, pgx.TxOptions{BeginQuery: "SAVEPOINT " + t.savepointName()})
	if err != nil {
		return pgx.LargeObjects{}
	}
	return inner.LargeObjects()
}

// Conn is the connection, with BEGIN and the queue sent: what runs on it
// directly is inside the transaction, after the queued statements. A
// failure to send is kept (Err) and answered by the commit.
func (t *Tx) Conn() *pgx.Conn {
	if err := t.Flush(context.Background()); err != nil && t.err == nil {
		t.err = err
	}
	return t.conn
}

// Begin opens a savepoint: SAVEPOINT is queued and travels with the next
// statement. The savepoint's Commit sends what was queued inside it first,
// so those statements' failures are its own: Commit then rolls back to the
// savepoint and answers the failure, and the transaction goes on. Its
// Rollback drops what is still queued inside it, and undoes what was sent.
func (t *Tx) Begin(_ context.Context) (pgx.Tx, error) {
	if t.done {
		return nil, pgx.ErrTxClosed
	}
	name := t.savepointName()
	t.Enqueue(nil, "SAVEPOINT "+name)
	return &savepoint{Tx: t, name: name, seq: t.sent + len(t.queue) - 1, after: len(t.after)}, nil
}

func (t *Tx) savepointName() string {
	t.nextSP++
	return fmt.Sprintf("kumiko_sp_%d", t.nextSP)
}

// Commit sends the queue and COMMIT in one batch, then runs the functions
// given to AfterCommit. A transaction that sent nothing and has nothing
// queued ends without a round trip. A queued statement's failure, kept or
// found now, is the answer, and nothing commits.
func (t *Tx) Commit(ctx context.Context) error {
	if t.done {
		return pgx.ErrTxClosed
	}
	if t.err != nil {
		_ = t.Rollback(ctx)
		return t.err
	}
	if !t.begun && len(t.queue) == 0 {
		t.end()
		t.runAfter()
		return nil
	}
	br, err := t.send(ctx, one("COMMIT", nil))
	if err != nil {
		_ = t.Rollback(ctx)
		return err
	}
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err == nil && tag.String() == "ROLLBACK" {
		err = pgx.ErrTxCommitRollback
	}
	if err != nil {
		_ = t.Rollback(ctx)
		return err
	}
	t.end()
	t.runAfter()
	return nil
}

func (t *Tx) runAfter() {
	after := t.after
	t.after = nil
	for _, fn := range after {
		fn()
	}
}

// Rollback drops the queue and rolls back what was sent. After Commit it
// answers pgx.ErrTxClosed and does nothing.
func (t *Tx) Rollback(ctx context.Context) error {
	if t.done {
		return pgx.ErrTxClosed
	}
	t.queue, t.after = nil, nil
	var err error
	if t.begun && t.conn.PgConn().TxStatus() != 'I' {
		_, err = t.conn.Exec(ctx, "ROLLBACK")
	}
	t.end()
	return err
}

// end marks the transaction ended and hands the connection back. A
// connection still in a transaction (a failed rollback) is closed rather
// than reused.
func (t *Tx) end() {
	t.done = true
	if t.conn.PgConn().TxStatus() != 'I' {
		_ = t.conn.Close(context.Background())
	}
	if t.release != nil {
		t.release()
	}
}

// savepoint is a savepoint of a Tx: statements go through the Tx; Commit
// releases it, Rollback rolls back to it.
type savepoint struct {
	*Tx
	name  string
	seq   int // the SAVEPOINT statement's place among all queued ones
	after int // how many AfterCommit functions the Tx had at its start
	done  bool
}

func (s *savepoint) Begin(ctx context.Context) (pgx.Tx, error) {
	if s.done {
		return nil, pgx.ErrTxClosed
	}
	return s.Tx.Begin(ctx)
}

// Commit sends the statements queued inside the savepoint (when any besides
// SAVEPOINT itself wait), then queues RELEASE SAVEPOINT. When a statement
// queued inside it fails, the savepoint is rolled back and Commit answers
// the failure.
func (s *savepoint) Commit(ctx context.Context) error {
	if s.done {
		return pgx.ErrTxClosed
	}
	if s.Tx.done {
		s.done = true
		return pgx.ErrTxClosed
	}
	if s.sent+len(s.queue)-1 > s.seq {
		if err := s.Flush(ctx); err != nil {
			if s.err == nil || s.errAt <= s.seq {
				s.done = true
				return err // not the savepoint's failure: the transaction's
			}
			if rbErr := s.Rollback(ctx); rbErr != nil {
				return rbErr
			}
			return err
		}
	}
	s.done = true
	s.Enqueue(nil, "RELEASE SAVEPOINT "+s.name)
	return nil
}

// Rollback undoes what ran since the savepoint: statements still queued
// after it are dropped; when SAVEPOINT itself was not sent yet, nothing
// needs to be. A queued statement's failure inside it is forgotten, and so
// are the AfterCommit functions given since it began.
func (s *savepoint) Rollback(ctx context.Context) error {
	if s.done {
		return pgx.ErrTxClosed
	}
	s.done = true
	if s.Tx.done {
		return pgx.ErrTxClosed
	}
	s.Tx.after = s.Tx.after[:min(s.after, len(s.Tx.after))]
	if i := s.seq - s.sent; i >= 0 {
		s.queue = s.queue[:i]
		return nil
	}
	s.queue = nil
	if s.err != nil {
		if s.errAt <= s.seq {
			return s.err // failed before the savepoint: nothing to roll back to
		}
		s.err = nil
	}
	_, err := s.conn.Exec(ctx, "ROLLBACK TO SAVEPOINT "+s.name)
	return err
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

// batchRows are the rows of a statement sent in a batch: the batch closes
// with them (Close, or Next reaching the end).
type batchRows struct {
	pgx.Rows
	br     pgx.BatchResults
	closed bool
	err    error
}

func (r *batchRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.Close()
	return false
}

func (r *batchRows) Close() {
	if r.closed {
		return
	}
	r.closed = true
	r.Rows.Close()
	r.err = r.br.Close()
}

func (r *batchRows) Err() error {
	if err := r.Rows.Err(); err != nil {
		return err
	}
	return r.err
}

// errRow is a pgx.Row whose Scan fails with err: what the Tx answers when
// the statements it had to send first failed.
type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// errBatch is a pgx.BatchResults that fails with err, for the same case.
type errBatch struct{ err error }

func (b errBatch) Exec() (pgconn.CommandTag, error) { return pgconn.CommandTag{}, b.err }
func (b errBatch) Query() (pgx.Rows, error)         { return nil, b.err }
func (b errBatch) QueryRow() pgx.Row                { return errRow(b) }
func (b errBatch) Close() error                     { return b.err }
func (b errBatch) Tx() pgx.Tx                       { return nil }

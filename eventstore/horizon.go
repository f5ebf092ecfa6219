package eventstore

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// Horizon is what a reader needs to know to never skip an event that commits
// late. Ids are allocated when an event is inserted, not when it commits, so
// an id can become visible after higher ids were read. Every transaction that
// inserts events holds a RowExclusiveLock on kumiko_events from before it
// allocates its first id until after it commits or rolls back, so:
//
//   - every id up to LastID is settled (visible, or gone for good) once none
//     of Writers — the transactions holding that lock when Horizon was read —
//     is still running, and right away when Writers is empty;
//   - a transaction that starts writing later can only allocate ids above
//     LastID.
//
// LastID is read before Writers; reversed, a writer could allocate an id in
// between and be missed. A transaction that holds no lock on kumiko_events
// (one that never wrote an event) never delays anything.
type Horizon struct {
	// LastID is the highest id allocated so far (0 when none was).
	LastID int64
	// Writers are the virtual transaction ids of the other transactions
	// holding a write lock on kumiko_events.
	Writers []string
}

// HorizonTx reads the horizon in tx, whose own lock (if it appended events)
// does not count. Call it before reading the events it is meant to judge: a
// later statement sees every transaction that ended before.
func (s *Store) HorizonTx(ctx context.Context, tx pgx.Tx) (Horizon, error) {
	// One round trip; the server runs the two statements in order.
	b := &pgx.Batch{}
	b.Queue(s.sql.lastID)
	b.Queue(s.sql.writers)
	br := tx.SendBatch(ctx, b)
	defer br.Close()
	var h Horizon
	if err := br.QueryRow().Scan(&h.LastID); err != nil {
		return h, TranslateError(fmt.Errorf("horizon: last id: %w", err))
	}
	rows, err := br.Query()
	if err != nil {
		return h, TranslateError(fmt.Errorf("horizon: writers: %w", err))
	}
	if h.Writers, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		return h, TranslateError(fmt.Errorf("horizon: writers: %w", err))
	}
	return h, nil
}

// SettledTx reads the horizon and waits, polling every poll, until none of
// its writers is still running: then every id up to the returned LastID is
// settled, and a read up to it misses nothing that will ever commit. Writers
// that started after the horizon was read do not prolong the wait.
func (s *Store) SettledTx(ctx context.Context, tx pgx.Tx, poll time.Duration) (Horizon, error) {
	h, err := s.HorizonTx(ctx, tx)
	if err != nil {
		return h, err
	}
	for len(h.Writers) > 0 {
		now, err := s.HorizonTx(ctx, tx)
		if err != nil {
			return h, err
		}
		if !slices.ContainsFunc(h.Writers, func(w string) bool { return slices.Contains(now.Writers, w) }) {
			break
		}
		timer := time.NewTimer(poll)
		select {
		case <-ctx.Done():
			timer.Stop()
			return h, ctx.Err()
		case <-timer.C:
		}
	}
	return h, nil
}

// ReadRangeTx reads the events with after < id ≤ upTo in id order, at most
// limit of them, upcast, in tx.
func (s *Store) ReadRangeTx(ctx context.Context, tx pgx.Tx, after, upTo int64, limit int) ([]Event, error) {
	rows, err := tx.Query(ctx, s.sql.readRange, after, upTo, limit)
	if err != nil {
		return nil, TranslateError(fmt.Errorf("read events %d..%d: %w", after, upTo, err))
	}
	evs, err := s.scanEvents(ctx, rows)
	if err != nil {
		return nil, TranslateError(fmt.Errorf("read events %d..%d: %w", after, upTo, err))
	}
	return evs, nil
}

// PositionAt is the id of the newest event created before t (0 when none):
// the position after which the events created at t or later lie.
func (s *Store) PositionAt(ctx context.Context, t time.Time) (int64, error) {
	var id int64
	q := `SELECT COALESCE(max(id), 0) FROM ` + pgx.Identifier{s.Schema(), "kumiko_events"}.Sanitize() + ` WHERE created_at < $1`
	if err := s.pool.QueryRow(ctx, q, t).Scan(&id); err != nil {
		return 0, TranslateError(fmt.Errorf("position at %s: %w", t, err))
	}
	return id, nil
}

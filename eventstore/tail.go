package eventstore

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// tailPoll is how often Tail looks whether the writers it waits for ended.
const tailPoll = 10 * time.Millisecond

// TailStart is the position from which Tail (or ReadAll) yields the last n
// events matching f: the id before the oldest of them, 0 when fewer than n
// match. n = 0 is the head, the highest id visible now, so only events
// appended later follow.
func (s *Store) TailStart(ctx context.Context, f ReadFilter, n int) (int64, error) {
	var pos int64
	if n <= 0 {
		if err := s.pool.QueryRow(ctx, s.sql.head).Scan(&pos); err != nil {
			return 0, TranslateError(fmt.Errorf("tail start: %w", err))
		}
		return pos, nil
	}
	err := s.pool.QueryRow(ctx, s.sql.tailStart, append(f.args(), n)...).Scan(&pos)
	if err != nil {
		return 0, TranslateError(fmt.Errorf("tail start: %w", err))
	}
	return pos, nil
}

// Tail calls fn with each settled event matching f after position after, in
// id order, upcast, and returns the position to continue from.
//
// Ids are allocated before commit, so an event can become visible after a
// higher id was read (see [Horizon]). Tail first waits for the transactions
// writing events when it was called, then reads up to their horizon: every
// id it moves past has committed or is gone for good, so a Tail from the
// returned position misses nothing that commits later. Following the log is
// calling Tail again from that position whenever [Store.Listen] wakes the
// caller, or a poll interval passed.
//
// When every event reached fn, the position is the horizon (which may lie
// past the last matching event); when fn or a read fails, it is the last
// event fn accepted, and fn's error is returned as is. Errors of the
// database are translated like every error of the store (ErrUnavailable).
func (s *Store) Tail(ctx context.Context, after int64, f ReadFilter, fn func(Event) error) (int64, error) {
	var h Horizon
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		h, err = s.SettledTx(ctx, tx, tailPoll)
		return err
	})
	if err != nil {
		return after, TranslateError(fmt.Errorf("tail after %d: %w", after, err))
	}
	pos := after
	for e, err := range s.ReadAll(ctx, after, f) {
		if err != nil {
			return pos, err
		}
		if e.ID > h.LastID {
			break
		}
		if err := fn(e); err != nil {
			return pos, err
		}
		pos = e.ID
	}
	return max(pos, h.LastID), nil
}

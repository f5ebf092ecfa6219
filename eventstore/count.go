package eventstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// HeadTx returns the highest id of the events matching f that tx sees, 0
// when there is none. Like ReadAll, it shows what is committed: a lower id
// may still commit later (see [Horizon]).
func (s *Store) HeadTx(ctx context.Context, tx pgx.Tx, f ReadFilter) (int64, error) {
	var head int64
	if err := tx.QueryRow(ctx, s.sql.filteredHead, f.args()...).Scan(&head); err != nil {
		return 0, TranslateError(fmt.Errorf("head: %w", err))
	}
	return head, nil
}

// CountTx counts the events matching f with after < id ≤ upTo that tx
// sees; upTo 0 sets no upper bound. It reads ids, not pages: a lag or a
// progress total, without loading events.
func (s *Store) CountTx(ctx context.Context, tx pgx.Tx, f ReadFilter, after, upTo int64) (int64, error) {
	var n int64
	if err := tx.QueryRow(ctx, s.sql.filteredCount, append(f.args(), after, upTo)...).Scan(&n); err != nil {
		return 0, TranslateError(fmt.Errorf("count after %d: %w", after, err))
	}
	return n, nil
}

// OldestAfterTx returns when the first event matching f after id after was
// created, and false when tx sees none: the age of a reader's lag.
func (s *Store) OldestAfterTx(ctx context.Context, tx pgx.Tx, f ReadFilter, after int64) (time.Time, bool, error) {
	var at time.Time
	err := tx.QueryRow(ctx, s.sql.filteredOldest, append(f.args(), after)...).Scan(&at)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return time.Time{}, false, nil
	case err != nil:
		return time.Time{}, false, TranslateError(fmt.Errorf("oldest after %d: %w", after, err))
	}
	return at, true, nil
}

// args are f's tenant, aggregate types and event types as the filtered
// statements take them: nil where f sets nothing.
func (f ReadFilter) args() []any {
	var tenant *[16]byte
	if f.TenantID != uuid.Nil {
		t := [16]byte(f.TenantID)
		tenant = &t
	}
	return []any{tenant, nilIfEmpty(f.AggregateTypes), nilIfEmpty(f.Types)}
}

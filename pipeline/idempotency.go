package pipeline

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// CodeIdempotencyConflict is the code of a keyed request that was already
// applied (reason already_applied) or whose key belongs to another request
// (reason key_reused).
const CodeIdempotencyConflict = "idempotency_conflict"

// recordKey records the caller's idempotency key in the write transaction.
// The primary key makes a concurrent duplicate wait for the first
// transaction and then fail, so a keyed write applies at most once however
// the HTTP layer's record fares.
func (d *Executor) recordKey(ctx context.Context, tx pgx.Tx, c *Caller) error {
	if c.IdempotencyKey == "" {
		return nil
	}
	tag, err := tx.Exec(ctx, d.sql.recordKey, [16]byte(c.User.TenantID), c.User.ID, c.IdempotencyKey, c.RequestHash)
	if err != nil {
		return fmt.Errorf("record idempotency key: %w", err)
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	var hash string
	if err := tx.QueryRow(ctx, d.sql.keyHash,
		[16]byte(c.User.TenantID), c.User.ID, c.IdempotencyKey).Scan(&hash); err != nil {
		return fmt.Errorf("read idempotency key: %w", err)
	}
	if hash != c.RequestHash {
		return newError(CodeIdempotencyConflict, ReasonKeyReused, "the idempotency key was used for a different request", nil)
	}
	return newError(CodeIdempotencyConflict, ReasonAlreadyApplied, "this request was already applied; its response is no longer available", nil)
}

// pruneKeysChunk is how many recorded keys one statement of
// PruneIdempotencyKeys deletes at most.
const pruneKeysChunk = 10_000

// PruneIdempotencyKeys deletes the idempotency keys recorded before
// olderThan and returns how many it deleted. A keyed request whose key was
// pruned is no longer recognised, so a retry of it would apply again: keep
// keys longer than any client retries, and never shorter than the HTTP
// layer replays responses (24 h by default). The kumiko facade runs it on a
// schedule.
//
// It deletes in chunks of 10,000 rows, each its own statement, found through
// the index on created_at: a large backlog never holds many locks for long.
func (d *Executor) PruneIdempotencyKeys(ctx context.Context, olderThan time.Time) (int64, error) {
	var total int64
	for {
		tag, err := d.pool.Exec(ctx, d.sql.pruneKeys, olderThan)
		if err != nil {
			return total, fmt.Errorf("prune idempotency keys: %w", err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < pruneKeysChunk {
			return total, nil
		}
	}
}

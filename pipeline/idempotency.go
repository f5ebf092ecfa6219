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
	table := d.qualify("kumiko_idempotency_keys")
	tag, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (tenant_id, user_id, key, request_hash) VALUES ($1, $2, $3, $4)
ON CONFLICT DO NOTHING`, table), [16]byte(c.User.TenantID), c.User.ID, c.IdempotencyKey, c.RequestHash)
	if err != nil {
		return fmt.Errorf("record idempotency key: %w", err)
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	var hash string
	if err := tx.QueryRow(ctx, fmt.Sprintf(`SELECT request_hash FROM %s WHERE tenant_id = $1 AND user_id = $2 AND key = $3`, table),
		[16]byte(c.User.TenantID), c.User.ID, c.IdempotencyKey).Scan(&hash); err != nil {
		return fmt.Errorf("read idempotency key: %w", err)
	}
	if hash != c.RequestHash {
		return newError(CodeIdempotencyConflict, "key_reused", "the idempotency key was used for a different request", nil)
	}
	return newError(CodeIdempotencyConflict, "already_applied", "this request was already applied; its response is no longer available", nil)
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
	table := d.qualify("kumiko_idempotency_keys")
	sql := fmt.Sprintf(`DELETE FROM %[1]s WHERE ctid = ANY (ARRAY(
	SELECT ctid FROM %[1]s WHERE created_at < $1 LIMIT %[2]d))`, table, pruneKeysChunk)
	var total int64
	for {
		tag, err := d.pool.Exec(ctx, sql, olderThan)
		if err != nil {
			return total, fmt.Errorf("prune idempotency keys: %w", err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < pruneKeysChunk {
			return total, nil
		}
	}
}

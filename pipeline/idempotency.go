package pipeline

import (
	"context"
	"fmt"

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
func (d *Dispatcher) recordKey(ctx context.Context, tx pgx.Tx, c *Caller) error {
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

// idempotencyDDL creates the table of recorded keys.
func (d *Dispatcher) idempotencyDDL() string {
	return fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
	tenant_id    uuid        NOT NULL,
	user_id      text        NOT NULL,
	key          text        NOT NULL,
	request_hash text        NOT NULL DEFAULT '',
	created_at   timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (tenant_id, user_id, key)
)`, d.qualify("kumiko_idempotency_keys"))
}

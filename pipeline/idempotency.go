package pipeline

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// CodeIdempotencyConflict is the code of a keyed request that was already
// applied (reason already_applied) or whose key belongs to another request
// (reason key_reused).
const CodeIdempotencyConflict = "idempotency_conflict"

// recordKey queues the caller's idempotency key for the write transaction:
// it travels to the database with the transaction's first statement (see
// carryTx). The primary key makes a concurrent duplicate wait for the first
// transaction and then fail, so a keyed write applies at most once however
// the HTTP layer's record fares.
func (d *Executor) recordKey(tx *carryTx, c *Caller) {
	if c.IdempotencyKey == "" {
		return
	}
	taken := keyTaken{d: d, c: c}
	tx.enqueue(d.sql.recordKey, func(tag pgconn.CommandTag, err error) error {
		switch {
		case err != nil:
			return fmt.Errorf("record idempotency key: %w", err)
		case tag.RowsAffected() == 1:
			return nil
		}
		return taken
	}, [16]byte(c.User.TenantID), c.User.ID, c.IdempotencyKey, c.RequestHash)
}

// keyTaken is the check's answer when the key is recorded already; resolve
// reads the recorded request's fingerprint to tell a retry from a reused
// key.
type keyTaken struct {
	d *Executor
	c *Caller
}

func (k keyTaken) Error() string { return "idempotency key recorded already" }

func (k keyTaken) resolve(ctx context.Context, tx pgx.Tx) error {
	var hash string
	if err := tx.QueryRow(ctx, k.d.sql.keyHash,
		[16]byte(k.c.User.TenantID), k.c.User.ID, k.c.IdempotencyKey).Scan(&hash); err != nil {
		return fmt.Errorf("read idempotency key: %w", err)
	}
	if hash != k.c.RequestHash {
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

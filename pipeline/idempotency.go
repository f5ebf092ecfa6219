package pipeline

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/kumikotype"
)

// CodeIdempotencyConflict is the code of a keyed request that was already
// applied (reason already_applied) or whose key belongs to another request
// (reason key_reused).
const CodeIdempotencyConflict = string(kumikotype.CodeIdempotencyConflict)

// recordKey queues the caller's idempotency key for the write transaction:
// it travels to the database with the transaction's first statement. The
// primary key makes a concurrent duplicate wait for the first transaction
// and then fail, so a keyed write applies at most once however the HTTP
// layer's record fares. A recorded key fails its statement, and with it the
// transaction: errKeyTaken, which resolveKey explains.
func (d *Executor) recordKey(tx *eventstore.Tx, c *Caller) {
	if c.IdempotencyKey == "" {
		return
	}
	tx.Enqueue(func(err error) error {
		var pg *pgconn.PgError
		if errors.As(err, &pg) && pg.Code == "23505" {
			return errKeyTaken
		}
		return fmt.Errorf("record idempotency key: %w", err)
	}, d.sql.recordKey, [16]byte(c.User.TenantID), c.User.ID, c.IdempotencyKey, c.RequestHash)
}

// errKeyTaken is the failure of a write whose idempotency key is recorded
// already.
var errKeyTaken = errors.New("idempotency key recorded already")

// resolveKey reads the recorded request's fingerprint to tell a retry
// (already_applied) from a reused key (key_reused). It runs after the write
// rolled back, outside it: the key was committed by another transaction.
func (d *Executor) resolveKey(ctx context.Context, c *Caller) *Error {
	var hash string
	if err := d.pool.QueryRow(ctx, d.sql.keyHash,
		[16]byte(c.User.TenantID), c.User.ID, c.IdempotencyKey).Scan(&hash); err != nil {
		return AsError(eventstore.TranslateError(fmt.Errorf("read idempotency key: %w", err)))
	}
	if hash != c.RequestHash {
		return newError(CodeIdempotencyConflict, kumikotype.ReasonKeyReused, "the idempotency key was used for a different request", nil)
	}
	return newError(CodeIdempotencyConflict, kumikotype.ReasonAlreadyApplied, "this request was already applied; its response is no longer available", nil)
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

package consumer

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/kumiko-go/kumiko/eventstore"
)

// The statements below serve the owner of a consumer's handler — the
// executor rebuilding a multi-stream projection — which must stop the
// consumer's passes while it rewrites what they write, and then move the
// consumer to where the rewrite ended.

// LockShardsTx locks the state rows of every shard of the consumer name in
// tx, waiting for a running pass to commit, and returns their instance ids
// (none when the consumer has no state yet). Passes on them wait until tx
// ends.
func (o *Ops) LockShardsTx(ctx context.Context, tx pgx.Tx, name string) ([]string, error) {
	rows, err := tx.Query(ctx, o.sql.lockShards, name)
	if err != nil {
		return nil, fmt.Errorf("lock consumer %s: %w", name, err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("lock consumer %s: %w", name, err)
	}
	return ids, nil
}

// MoveShardsTx sets the cursor of every shard of the consumer name to
// cursor in tx and drops their gap bookkeeping; with no shard and shared
// set, it creates the shared shard at cursor. Lock the shards first
// (LockShardsTx).
func (o *Ops) MoveShardsTx(ctx context.Context, tx pgx.Tx, name string, cursor int64, shards []string, shared bool) error {
	var err error
	switch {
	case len(shards) > 0:
		_, err = tx.Exec(ctx, o.sql.moveShards, name, cursor)
	case shared:
		_, err = tx.Exec(ctx, o.sql.createShared, name, SharedInstance, cursor)
	}
	if err != nil {
		return fmt.Errorf("move consumer %s: %w", name, err)
	}
	return nil
}

// LowestCursorTx is the cursor of the consumer's shard furthest behind; 0
// when it has none.
func (o *Ops) LowestCursorTx(ctx context.Context, tx pgx.Tx, name string) (int64, error) {
	var c int64
	if err := tx.QueryRow(ctx, o.sql.lowestCursor, name).Scan(&c); err != nil {
		return 0, eventstore.TranslateError(fmt.Errorf("consumer %s: %w", name, err))
	}
	return c, nil
}

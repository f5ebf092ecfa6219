package integration

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/kumiko-go/kumiko/consumer"
	"github.com/kumiko-go/kumiko/eventstore"
)

// Defaults of the inbox retention in Config.
const (
	// DefaultInboxRetention is how long an inbox row is kept: far longer
	// than a broker keeps redelivering a message (minutes to hours, bounded
	// by MaxDeliveries), so a redelivery still finds the row and skips the
	// handler. A message redelivered after its rows are gone — retried by
	// hand from the dead letters weeks later — runs its handlers again.
	DefaultInboxRetention = 7 * 24 * time.Hour
	// DefaultInboxSweepInterval is how often each instance sweeps.
	DefaultInboxSweepInterval = time.Hour
	// DefaultInboxSweepBatch is how many rows one delete removes.
	DefaultInboxSweepBatch = 1000
)

// SweepInbox deletes the inbox rows of messages handled before olderThan,
// in batches of Config.InboxSweepBatch, each a short statement of its own,
// and returns how many it deleted. Any number of instances may sweep at
// once: a batch takes only rows nobody holds (FOR UPDATE SKIP LOCKED), so
// two sweeps never wait for or delete the same rows, and a handler's
// transaction is never held up.
func (s *Service) SweepInbox(ctx context.Context, olderThan time.Time) (int64, error) {
	var total int64
	for {
		tag, err := s.store.Pool().Exec(ctx, s.sql.sweepInbox, olderThan, s.cfg.InboxSweepBatch)
		if err != nil {
			return total, eventstore.TranslateError(fmt.Errorf("sweep the inbox: %w", err))
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < int64(s.cfg.InboxSweepBatch) {
			return total, nil
		}
	}
}

// sweep runs SweepInbox right away and then every InboxSweepInterval until
// ctx ends.
func (s *Service) sweep(ctx context.Context) {
	tick := time.NewTicker(s.cfg.InboxSweepInterval)
	defer tick.Stop()
	for {
		n, err := s.SweepInbox(ctx, time.Now().Add(-s.cfg.InboxRetention))
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			s.cfg.Logger.Warn("integration: sweep the inbox", "err", err)
		case n > 0:
			s.cfg.Logger.Info("integration: swept the inbox", "deleted", n, "retention", s.cfg.InboxRetention)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// PruneGuard is the guard of a prune of published messages (aggregate type
// pipeline.MessageStream) for consumer.Ops.PruneEvents: it lets go only
// the messages the relay has passed — handed to the transport and
// confirmed — whatever the relay shard's status, so no prune ever removes
// a message that has not left the app. Without a relay shard it lets
// nothing go. It runs after the consumer guard, under its lock on the
// consumer shards.
func PruneGuard(store *eventstore.Store) func(ctx context.Context, tx pgx.Tx, upTo int64) (int64, error) {
	ops := consumer.NewOps(store)
	return func(ctx context.Context, tx pgx.Tx, upTo int64) (int64, error) {
		relayed, err := ops.LowestCursorTx(ctx, tx, RelayName)
		if err != nil {
			return 0, fmt.Errorf("prune messages: the relay's cursor: %w", err)
		}
		return min(upTo, relayed), nil
	}
}

package eventstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// PruneOptions selects the events Prune removes.
type PruneOptions struct {
	// OlderThan is required: only events created before it are removed.
	OlderThan time.Time
	// AggregateTypes is required and non-empty: only events of these
	// aggregate types are removed. Aggregate events carry loads, projection
	// rebuilds and as-of reads, so none is ever removed unless its type is
	// named here.
	AggregateTypes []string
	// DryRun counts what would be removed, removing nothing.
	DryRun bool
	// Guard, when set, runs in the prune's transaction before anything is
	// removed (or counted), with the id of the newest event the prune would
	// remove. It returns the highest id that may be removed — upTo itself
	// to let everything go — or an error that ends the prune with nothing
	// removed. Locks it takes hold until the prune commits. The consumer
	// package's guard refuses while a consumer still needs the events.
	Guard func(ctx context.Context, tx pgx.Tx, upTo int64) (int64, error)
}

// PruneResult says what Prune removed (or, in a dry run, would remove).
type PruneResult struct {
	// Deleted counts the events removed.
	Deleted int64 `json:"deleted"`
	// UpTo is the highest id removed; 0 when nothing was.
	UpTo int64 `json:"upTo"`
	// ByType counts the events removed per aggregate type; every type of
	// the options is present, with 0 when none of its events was removed.
	ByType map[string]int64 `json:"byType"`
}

// ErrInvalidPrune: the PruneOptions lack OlderThan or the aggregate types.
var ErrInvalidPrune = errors.New("invalid prune options")

// Prune removes old events of the named aggregate types, in one
// transaction: those created before opts.OlderThan whose aggregate type is
// in opts.AggregateTypes, and no later than what opts.Guard lets go.
// Snapshots and archive markers are kept: a snapshot stands for the events
// up to its version, so it still serves loads of streams whose early events
// are gone. Consumers are the guard's business: use consumer.Ops.PruneEvents,
// which never removes an event a consumer has not processed. The delete
// records, per event type, the highest id it removed (kumiko_pruned_types,
// read through the SQL function kumiko_log_pruned_up_to), so a reader whose
// cursor lies behind it — one that was let through disabled, or restored
// from an older backup — learns that events are gone.
func (s *Store) Prune(ctx context.Context, opts PruneOptions) (PruneResult, error) {
	if err := opts.validate(); err != nil {
		return PruneResult{}, err
	}
	res := PruneResult{ByType: make(map[string]int64, len(opts.AggregateTypes))}
	for _, typ := range opts.AggregateTypes {
		res.ByType[typ] = 0
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return PruneResult{}, TranslateError(fmt.Errorf("prune events: begin: %w", err))
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit

	var limit int64
	if err := tx.QueryRow(ctx, s.sql.pruneNewest, opts.OlderThan, opts.AggregateTypes).Scan(&limit); err != nil {
		return PruneResult{}, TranslateError(fmt.Errorf("prune events: select: %w", err))
	}
	if limit == 0 {
		return res, nil // nothing to remove, nobody to ask
	}
	if opts.Guard != nil {
		if limit, err = opts.Guard(ctx, tx, limit); err != nil {
			return PruneResult{}, TranslateError(err)
		}
	}
	stmt := s.sql.pruneDelete
	if opts.DryRun {
		stmt = s.sql.pruneCount
	}
	rows, err := tx.Query(ctx, stmt, opts.OlderThan, opts.AggregateTypes, limit)
	if err != nil {
		return PruneResult{}, TranslateError(fmt.Errorf("prune events: delete: %w", err))
	}
	var (
		typ      string
		n, maxID int64
	)
	_, err = pgx.ForEachRow(rows, []any{&typ, &n, &maxID}, func() error {
		res.ByType[typ] += n
		res.Deleted += n
		res.UpTo = max(res.UpTo, maxID)
		return nil
	})
	if err != nil {
		return PruneResult{}, TranslateError(fmt.Errorf("prune events: delete: %w", err))
	}
	if opts.DryRun || res.Deleted == 0 { // every group counts at least one
		return res, nil // the deferred rollback releases the guard's locks
	}
	if err := tx.Commit(ctx); err != nil {
		return PruneResult{}, TranslateError(fmt.Errorf("prune events: commit: %w", err))
	}
	return res, nil
}

func (p PruneOptions) validate() error {
	switch {
	case p.OlderThan.IsZero():
		return fmt.Errorf("%w: OlderThan is required", ErrInvalidPrune)
	case len(p.AggregateTypes) == 0:
		return fmt.Errorf("%w: AggregateTypes is required", ErrInvalidPrune)
	}
	for _, typ := range p.AggregateTypes {
		if typ == "" {
			return fmt.Errorf("%w: an empty aggregate type", ErrInvalidPrune)
		}
	}
	return nil
}

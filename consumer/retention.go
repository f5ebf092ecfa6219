package consumer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// PruneOptions selects the events PruneEvents removes.
type PruneOptions struct {
	// OlderThan is required: only events created before it are removed.
	OlderThan time.Time
	// AggregateTypes is required and non-empty: only events of these
	// aggregate types are removed. Aggregate events carry loads, projection
	// rebuilds and as-of reads, so none is ever removed unless its type is
	// named here.
	AggregateTypes []string
	// DryRun runs the guard and counts what would be removed, removing
	// nothing.
	DryRun bool
}

// PruneResult says what PruneEvents removed (or, in a dry run, would
// remove).
type PruneResult struct {
	// Deleted counts the events removed.
	Deleted int64 `json:"deleted"`
	// UpTo is the highest id removed; 0 when nothing was.
	UpTo int64 `json:"upTo"`
	// ByType counts the events removed per aggregate type; every type of
	// the options is present, with 0 when none of its events was removed.
	ByType map[string]int64 `json:"byType"`
}

// pruneSQL holds the statements of PruneEvents.
type pruneSQL struct {
	lock, candidates, guard, count, remove string
}

// newPruneSQL builds the statements on schema's tables. It is cheap and the
// statements are prepared by pgx's statement cache, so PruneEvents builds
// them per call rather than widening Ops.
func newPruneSQL(schema string) pruneSQL {
	r := strings.NewReplacer(
		"{consumers}", pgx.Identifier{schema, "kumiko_event_consumers"}.Sanitize(),
		"{events}", pgx.Identifier{schema, "kumiko_events"}.Sanitize(),
	)
	// $1 = OlderThan, $2 = aggregate types, $3 = the lowest cursor of the
	// shards that count (the highest id every one of them has processed).
	const where = `created_at < $1 AND aggregate_type = ANY($2) AND id <= $3`
	return pruneSQL{
		// SHARE conflicts with ROW EXCLUSIVE: a registration (INSERT), a
		// pass saving its cursor and every consumer operation (UPDATE) wait
		// until the prune commits or rolls back, so the shards and cursors
		// the guard reads stay as they are until the delete is committed.
		// Readers (SELECT … FOR UPDATE of a pass) are not held up.
		lock: r.Replace(`LOCK TABLE {consumers} IN SHARE MODE`),
		candidates: r.Replace(`
SELECT COALESCE(max(id), 0) FROM {events} WHERE created_at < $1 AND aggregate_type = ANY($2)`),
		// The shard furthest behind among those the guard counts: every one
		// that is not disabled — dead ones and per-instance rows of stopped
		// processes included.
		guard: r.Replace(`
SELECT name, instance_id, last_processed_event_id FROM {consumers}
WHERE status <> $1
ORDER BY last_processed_event_id, name, instance_id LIMIT 1`),
		count: r.Replace(`
SELECT aggregate_type, count(*), max(id) FROM {events} WHERE ` + where + `
GROUP BY aggregate_type`),
		remove: r.Replace(`
WITH d AS (DELETE FROM {events} WHERE ` + where + ` RETURNING id, aggregate_type)
SELECT aggregate_type, count(*), max(id) FROM d GROUP BY aggregate_type`),
	}
}

// PruneEvents removes old events of the named aggregate types: those
// created before opts.OlderThan whose aggregate type is in
// opts.AggregateTypes. It never removes an event that a consumer shard which
// is not disabled has not processed yet: when one lags behind the newest
// event the prune would remove, it refuses with an *Error wrapping
// ErrLagging that names the shard, and removes nothing. A dry run
// (opts.DryRun) runs the same guard and reports the same counts without
// removing anything.
//
// Everything runs in one transaction that holds kumiko_event_consumers in
// SHARE mode from before the guard reads the cursors until the delete has
// committed: no shard is registered, moved, enabled or restarted meanwhile.
// A consumer that registers concurrently either committed its row before
// the lock was granted — then the guard counts it, and its cursor (0 for a
// new consumer starting from the beginning) makes the prune refuse — or it
// waits until the prune has committed, and then starts on the events that
// remain, as would any consumer registered later. This is one of two
// mechanisms the guard relies on; the other is that a dispatcher registers
// all of its consumers' rows when it starts (Dispatcher.Register),
// before its first pass, so a consumer of a running process is never
// invisible to the guard.
//
// Snapshots are kept: a snapshot stands for the events up to its version, so
// it still serves loads of streams whose early events are gone — it may be
// the only thing left that can. Archive markers are kept as well.
//
// Disabled shards do not hold a prune back: an event they had not processed
// may be removed, and a shard enabled again later resumes on the events
// that remain. Skip or disable a lagging consumer, or delete the row of a
// decommissioned instance, to let a prune through.
func (o *Ops) PruneEvents(ctx context.Context, opts PruneOptions) (PruneResult, error) {
	if err := opts.validate(); err != nil {
		return PruneResult{}, err
	}
	q := newPruneSQL(o.store.Schema())
	res := PruneResult{ByType: make(map[string]int64, len(opts.AggregateTypes))}
	for _, typ := range opts.AggregateTypes {
		res.ByType[typ] = 0
	}

	tx, err := o.pool.Begin(ctx)
	if err != nil {
		return PruneResult{}, fmt.Errorf("prune events: begin: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit

	if _, err := tx.Exec(ctx, q.lock); err != nil {
		return PruneResult{}, fmt.Errorf("prune events: lock consumers: %w", err)
	}
	var needed int64
	if err := tx.QueryRow(ctx, q.candidates, opts.OlderThan, opts.AggregateTypes).Scan(&needed); err != nil {
		return PruneResult{}, fmt.Errorf("prune events: select: %w", err)
	}
	if needed == 0 {
		return res, nil // nothing to remove, nobody to refuse
	}

	// limit is the highest id every counted shard has processed; with no
	// shard at all nothing holds the prune back.
	limit := needed
	var name, instance string
	var cursor int64
	err = tx.QueryRow(ctx, q.guard, StatusDisabled).Scan(&name, &instance, &cursor)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return PruneResult{}, fmt.Errorf("prune events: guard: %w", err)
	case cursor < needed:
		return PruneResult{}, consumerLagging(name, instance, cursor, needed)
	default:
		limit = cursor
	}

	// The delete carries id <= limit as well: an event that commits after
	// the candidates were read (read committed: each statement sees what has
	// committed before it) may match the other conditions, and it must not
	// be removed unless every counted shard has processed it. The cursors
	// cannot move while the lock is held.
	stmt := q.remove
	if opts.DryRun {
		stmt = q.count
	}
	rows, err := tx.Query(ctx, stmt, opts.OlderThan, opts.AggregateTypes, limit)
	if err != nil {
		return PruneResult{}, fmt.Errorf("prune events: delete: %w", err)
	}
	var (
		typ       string
		n, maxID  int64
		collected bool
	)
	_, err = pgx.ForEachRow(rows, []any{&typ, &n, &maxID}, func() error {
		res.ByType[typ] += n
		res.Deleted += n
		res.UpTo = max(res.UpTo, maxID)
		collected = true
		return nil
	})
	if err != nil {
		return PruneResult{}, fmt.Errorf("prune events: delete: %w", err)
	}
	if opts.DryRun || !collected {
		return res, nil // the deferred rollback releases the lock
	}
	if err := tx.Commit(ctx); err != nil {
		return PruneResult{}, fmt.Errorf("prune events: commit: %w", err)
	}
	return res, nil
}

func (p PruneOptions) validate() error {
	switch {
	case p.OlderThan.IsZero():
		return newError(codeValidation, "", "prune needs OlderThan: only events created before it are removed", nil)
	case len(p.AggregateTypes) == 0:
		return newError(codeValidation, "", "prune needs the aggregate types whose events it may remove; none is removed unless named", nil)
	}
	for _, typ := range p.AggregateTypes {
		if typ == "" {
			return newError(codeValidation, "", "prune got an empty aggregate type", nil)
		}
	}
	return nil
}

func consumerLagging(name, instance string, cursor, needed int64) *Error {
	detail := fmt.Sprintf("consumer %s (instance %s) has processed events up to %d, the prune would remove events up to %d; "+
		"let it catch up, skip it or disable it", name, instance, cursor, needed)
	if instance != SharedInstance {
		detail += fmt.Sprintf("; if instance %s is decommissioned, delete its rows: DELETE FROM kumiko_event_consumers WHERE instance_id = '%s'",
			instance, strings.ReplaceAll(instance, "'", "''"))
	}
	return newError(codeUnprocessable, ReasonLagging, detail,
		fmt.Errorf("prune events: %s/%s at %d, needs %d: %w", name, instance, cursor, needed, ErrLagging)).
		with("consumer", name).with("instanceId", instance).with("cursor", cursor).with("needed", needed)
}

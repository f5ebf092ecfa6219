package consumer

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/kumikotype"
)

// PruneEvents removes old events of the named aggregate types through
// eventstore.Store.Prune: those created before opts.OlderThan whose
// aggregate type is in opts.AggregateTypes. opts.Guard, when set, is asked
// after the consumer guard, with the id that one lets go, and may lower it
// (the integration relay's guard lets only relayed messages go). It never removes an event that a consumer shard which is
// not disabled has not processed yet: when one lags behind the newest event
// the prune would remove, it refuses with an *Error wrapping ErrLagging
// that names the shard, and removes nothing. A dry run (opts.DryRun) runs
// the same guard and reports the same counts without removing anything.
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
// all of its consumers' rows when it starts (Dispatcher.Register), before
// its first pass, so a consumer of a running process is never invisible to
// the guard.
//
// Snapshots are kept: a snapshot stands for the events up to its version, so
// it still serves loads of streams whose early events are gone — it may be
// the only thing left that can. Archive markers are kept as well.
//
// Disabled shards do not hold a prune back: an event they had not processed
// may be removed, and a shard enabled again later resumes on the events
// that remain; such a shard is expired when it is enabled again (see
// StatusExpired). Skip or disable a lagging consumer, or remove the rows of
// an instance that is gone (CollectStale), to let a prune through.
//
// A dry run counts everything the options select even when the guard would
// refuse: it returns those counts together with the refusal (ErrLagging,
// naming the consumer), so an operator sees both what a prune would remove
// and what holds it back.
func (o *Ops) PruneEvents(ctx context.Context, opts eventstore.PruneOptions) (eventstore.PruneResult, error) {
	if err := validatePrune(opts); err != nil {
		return eventstore.PruneResult{}, err
	}
	extra := opts.Guard
	var refused error
	opts.Guard = func(ctx context.Context, tx pgx.Tx, needed int64) (int64, error) {
		upTo, err := o.pruneGuard(ctx, tx, needed)
		if opts.DryRun && errors.Is(err, ErrLagging) {
			refused = err
			upTo, err = needed, nil
		}
		if err != nil || extra == nil {
			return upTo, err
		}
		return extra(ctx, tx, upTo)
	}
	res, err := o.store.Prune(ctx, opts)
	if err != nil {
		return res, err
	}
	return res, refused
}

// pruneGuard locks the consumer table and returns the highest id every
// shard that counts has processed, refusing when one has not reached
// needed, the newest id the prune would remove.
func (o *Ops) pruneGuard(ctx context.Context, tx pgx.Tx, needed int64) (int64, error) {
	if _, err := tx.Exec(ctx, o.sql.pruneLock); err != nil {
		return 0, fmt.Errorf("prune events: lock consumers: %w", err)
	}
	var name, instance string
	var cursor int64
	err := tx.QueryRow(ctx, o.sql.pruneGuard, StatusDisabled).Scan(&name, &instance, &cursor)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return needed, nil // no shard at all: nothing holds the prune back
	case err != nil:
		return 0, fmt.Errorf("prune events: guard: %w", err)
	case cursor < needed:
		return 0, consumerLagging(name, instance, cursor, needed)
	}
	return cursor, nil
}

func validatePrune(p eventstore.PruneOptions) error {
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
		detail += fmt.Sprintf("; if instance %s is gone for good, `consumer gc` removes its rows once it is stale", instance)
	}
	return newError(codeUnprocessable, kumikotype.ReasonConsumerLagging, detail,
		fmt.Errorf("prune events: %s/%s at %d, needs %d: %w", name, instance, cursor, needed, ErrLagging)).
		With("consumer", name).With("instanceId", instance).With("cursor", cursor).With("needed", needed)
}

package consumer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/kumikotype"
)

// ResetOptions says where Ops.Reset moves a consumer, and who asks.
type ResetOptions struct {
	// To is the cursor every shard of the consumer gets: the events after
	// it are delivered again (or for the first time), those up to it are
	// not. 0 is the beginning of the log; see PositionAt for a time.
	To int64
	// Actor names who resets, for the audit record (a user id, an OS
	// user); required.
	Actor string
	// Within, when set, runs in the reset's transaction after the shards
	// are locked and before their cursors move: the owner of the handler
	// resets what the handler wrote (a projection truncates its table), so
	// that the table and the cursor move together or not at all.
	Within func(ctx context.Context, tx pgx.Tx) error
	// Detail is recorded with the audit record (how the caller reset what
	// the handler wrote, …).
	Detail map[string]any
}

// ResetResult is what Ops.Reset did.
type ResetResult struct {
	// Name is the consumer; Shards the instance ids of its shards, each
	// now at To.
	Name   string   `json:"name"`
	Shards []string `json:"shards"`
	// To is the new cursor; From the cursors before, by shard.
	To   int64            `json:"to"`
	From map[string]int64 `json:"from"`
	// Unparked counts the parked streams dropped: their failing event lies
	// after To and is delivered again.
	Unparked int64 `json:"unparked"`
}

// PositionAt is the cursor of a reset "to a time": the id of the newest
// event created before t (0 when none), so that the events created at t or
// later are delivered again.
func (o *Ops) PositionAt(ctx context.Context, t time.Time) (int64, error) {
	return o.store.PositionAt(ctx, t)
}

// Reset moves every shard of the consumer name — all its partitions, or its
// per-instance shards — to the cursor opts.To at once, in one transaction,
// while processes run: it locks the shards' rows (waiting for the passes
// running on them to commit), waits until the log is settled up to To (no
// event at or below it can still commit), runs opts.Within, sets the
// cursors, drops the gap bookkeeping, makes dead and expired shards idle
// (disabled ones stay disabled), drops the parked streams whose failing
// event lies after To, records the reset in kumiko_consumer_audit and
// commits. A pass that starts afterwards, in any process, reads the new
// cursor from its row; none applies events of the old position after the
// reset commits. It refuses a To beyond the newest event and a consumer
// with no shards (ErrNotFound).
//
// What the handler did outside the database is not undone: a side-effect
// consumer's effects repeat for the events delivered again.
func (o *Ops) Reset(ctx context.Context, name string, opts ResetOptions) (ResetResult, error) {
	if opts.Actor == "" {
		return ResetResult{}, newError(codeValidation, kumikotype.ReasonInvalidOperation, "a reset needs an actor for its audit record",
			errors.New("consumer reset: no actor"))
	}
	if opts.To < 0 {
		return ResetResult{}, newError(codeValidation, kumikotype.ReasonInvalidOperation, "a reset's position must not be negative",
			errors.New("consumer reset: negative position"))
	}
	res := ResetResult{Name: name, To: opts.To, From: map[string]int64{}, Shards: []string{}}
	err := pgx.BeginFunc(ctx, o.pool, func(tx pgx.Tx) error {
		shards, err := o.lockAll(ctx, tx, name)
		if err != nil {
			return err
		}
		h, err := o.store.SettledTx(ctx, tx, 5*time.Millisecond)
		if err != nil {
			return err
		}
		if opts.To > h.LastID {
			return newError(codeUnprocessable, kumikotype.ReasonInvalidOperation,
				fmt.Sprintf("position %d lies beyond the newest event %d", opts.To, h.LastID),
				fmt.Errorf("reset %s: position %d beyond the log", name, opts.To)).With("consumer", name).With("to", opts.To)
		}
		for _, s := range shards {
			res.Shards = append(res.Shards, s.Instance)
			res.From[s.Instance] = s.Cursor
		}
		if opts.Within != nil {
			if err := opts.Within(ctx, tx); err != nil {
				return err
			}
		}
		if _, err := tx.Exec(ctx, o.sql.reset, name, opts.To); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, o.sql.resetParked, name, opts.To)
		if err != nil {
			return err
		}
		res.Unparked = tag.RowsAffected()
		detail := map[string]any{"to": opts.To, "from": res.From, "unparked": res.Unparked}
		for k, v := range opts.Detail {
			detail[k] = v
		}
		_, err = tx.Exec(ctx, o.sql.audit, name, "reset", opts.Actor, detail)
		return err
	})
	if err != nil {
		var ce *Error
		if errors.As(err, &ce) {
			return ResetResult{}, err
		}
		return ResetResult{}, eventstore.TranslateError(fmt.Errorf("reset consumer %s: %w", name, err))
	}
	return res, nil
}

// lockedShard is a shard row an operation on all of a consumer's shards
// holds locked.
type lockedShard struct { // exported fields: pgx scans by position into them
	Instance   string
	Cursor     int64
	Status     string
	Partitions int
}

// lockAll locks every shard row of the consumer name, waiting for running
// passes; none answers ErrNotFound.
func (o *Ops) lockAll(ctx context.Context, tx pgx.Tx, name string) ([]lockedShard, error) {
	rows, err := tx.Query(ctx, o.sql.shardsOf, name)
	if err != nil {
		return nil, err
	}
	shards, err := pgx.CollectRows(rows, pgx.RowToStructByPos[lockedShard])
	if err != nil {
		return nil, err
	}
	if len(shards) == 0 {
		return nil, newError(codeNotFound, kumikotype.ReasonConsumerNotFound, fmt.Sprintf("no consumer %s", name),
			fmt.Errorf("%s: %w", name, ErrNotFound)).With("consumer", name)
	}
	return shards, nil
}

// RepartitionOptions tunes Ops.Repartition.
type RepartitionOptions struct {
	// Actor names who repartitions, for the audit record; required.
	Actor string
	// Wait bounds how long the shards may take to drain to the fence;
	// default 1 minute.
	Wait time.Duration
}

// RepartitionResult is what Ops.Repartition did.
type RepartitionResult struct {
	// Name is the consumer.
	Name string `json:"name"`
	// From and To are the partition counts before and after (1: one shared
	// shard).
	From int `json:"from"`
	To   int `json:"to"`
	// Cursor is where every new shard starts: every event up to it was
	// handled by the old shards, every event after it goes to the new.
	Cursor int64 `json:"cursor"`
}

// Repartition changes the partition count of the shared consumer name to n
// (1: one shared shard) while processes run, keeping per-stream order and
// losing or repeating nothing:
//
//  1. in one transaction it locks the consumer's shards and sets a fence
//     on each at the cursor furthest ahead: no shard passes it;
//  2. it waits until every shard has reached the fence (the ones behind
//     catch up; none is dead, disabled or expired — it refuses those at
//     once — and none takes longer than opts.Wait, else it lifts the fence
//     and refuses, changing nothing);
//  3. in one transaction it replaces the shards with n new ones at the
//     fence, moves the parked streams to their new partitions and records
//     the change in kumiko_consumer_audit.
//
// Every event up to the fence was handled by the old shards, every event
// after it is handled by the new ones: the events of one stream stay in
// order. The processes running the consumer pick the new count up at their
// next look at its members, whatever their own declaration says.
func (o *Ops) Repartition(ctx context.Context, name string, n int, opts RepartitionOptions) (RepartitionResult, error) {
	switch {
	case opts.Actor == "":
		return RepartitionResult{}, newError(codeValidation, kumikotype.ReasonInvalidOperation, "a repartition needs an actor for its audit record",
			errors.New("consumer repartition: no actor"))
	case n < 1 || n > MaxPartitions:
		return RepartitionResult{}, newError(codeValidation, kumikotype.ReasonInvalidOperation,
			fmt.Sprintf("the partition count must be between 1 and %d", MaxPartitions), fmt.Errorf("consumer repartition: count %d", n))
	}
	if opts.Wait <= 0 {
		opts.Wait = time.Minute
	}
	res := RepartitionResult{Name: name, To: n}
	// 1. The fence.
	err := pgx.BeginFunc(ctx, o.pool, func(tx pgx.Tx) error {
		shards, err := o.lockAll(ctx, tx, name)
		if err != nil {
			return err
		}
		res.From = 1
		for _, s := range shards {
			switch {
			case s.Instance != SharedInstance && !isPartition(s.Instance):
				return newError(codeUnprocessable, kumikotype.ReasonRepartitionBlocked,
					fmt.Sprintf("consumer %s is per-instance; only a shared consumer has partitions", name),
					fmt.Errorf("repartition %s: per-instance", name)).With("consumer", name)
			case s.Status != StatusIdle:
				return newError(codeUnprocessable, kumikotype.ReasonRepartitionBlocked,
					fmt.Sprintf("shard %s of consumer %s is %s; restart, enable or skip it first", s.Instance, name, s.Status),
					fmt.Errorf("repartition %s: shard %s is %s", name, s.Instance, s.Status)).
					With("consumer", name).With("instanceId", s.Instance).With("status", s.Status)
			}
			res.From = max(res.From, s.Partitions)
			res.Cursor = max(res.Cursor, s.Cursor)
		}
		_, err = tx.Exec(ctx, o.sql.fence, name, res.Cursor)
		return err
	})
	if err != nil {
		return RepartitionResult{}, repartitionError(name, err)
	}
	// 2. The drain.
	if err := o.drain(ctx, name, res.Cursor, opts.Wait); err != nil {
		bound, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if _, uerr := o.pool.Exec(bound, o.sql.unfence, name); uerr != nil {
			err = errors.Join(err, uerr)
		}
		return RepartitionResult{}, repartitionError(name, err)
	}
	// 3. The swap.
	err = pgx.BeginFunc(ctx, o.pool, func(tx pgx.Tx) error {
		shards, err := o.lockAll(ctx, tx, name)
		if err != nil {
			return err
		}
		for _, s := range shards {
			if s.Cursor != res.Cursor || s.Status != StatusIdle {
				return fmt.Errorf("shard %s moved while draining (cursor %d, %s)", s.Instance, s.Cursor, s.Status)
			}
		}
		if _, err := tx.Exec(ctx, o.sql.dropShards, name); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, o.sql.insertPartitions, name, res.Cursor, n); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, o.sql.parkedStreams, name)
		if err != nil {
			return err
		}
		streams, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		shardOf := make([]string, len(streams))
		for i, s := range streams {
			shardOf[i] = SharedInstance
			if n > 1 {
				shardOf[i] = PartitionInstance(PartitionOf(s, n))
			}
		}
		if _, err := tx.Exec(ctx, o.sql.moveParked, name, streams, shardOf); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, o.sql.audit, name, "repartition", opts.Actor,
			map[string]any{"from": res.From, "to": n, "cursor": res.Cursor})
		return err
	})
	if err != nil {
		return RepartitionResult{}, repartitionError(name, err)
	}
	return res, nil
}

// drain waits until every shard of name has reached fence, polling.
func (o *Ops) drain(ctx context.Context, name string, fence int64, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	for {
		rows, err := o.pool.Query(ctx, o.sql.lowestCursor+` AND status = 'idle'`, name)
		if err != nil {
			return err
		}
		lowest, err := pgx.CollectOneRow(rows, pgx.RowTo[int64])
		if err != nil {
			return err
		}
		if lowest >= fence {
			return nil
		}
		if time.Now().After(deadline) {
			return newError(codeUnprocessable, kumikotype.ReasonRepartitionBlocked,
				fmt.Sprintf("the shards of consumer %s did not reach position %d within %s (the lowest is at %d); nothing changed", name, fence, wait, lowest),
				fmt.Errorf("repartition %s: drain timed out", name)).With("consumer", name).With("fence", fence).With("lowest", lowest)
		}
		if !sleep(ctx, 20*time.Millisecond) {
			return ctx.Err()
		}
	}
}

func repartitionError(name string, err error) error {
	var ce *Error
	if errors.As(err, &ce) {
		return err
	}
	return eventstore.TranslateError(fmt.Errorf("repartition consumer %s: %w", name, err))
}

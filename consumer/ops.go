package consumer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/kumikotype"
)

// ShardStatus is one consumer shard's state row with its lag behind the
// event log.
type ShardStatus struct {
	// Name is the consumer's name.
	Name string `json:"name"`
	// InstanceID is SharedInstance for a shared consumer, else the id of
	// the process the shard belongs to.
	InstanceID string `json:"instanceId"`
	// Cursor is the id of the last event the shard processed (or passed).
	Cursor int64 `json:"cursor"`
	// Head is the id of the newest committed event in the log (0 when the
	// log is empty). It may be below Cursor when the newest allocated ids
	// were rolled back.
	Head int64 `json:"head"`
	// LagEvents counts the committed events after Cursor.
	LagEvents int64 `json:"lagEvents"`
	// LagSeconds is the age of the oldest event after Cursor; 0 when the
	// shard has caught up.
	LagSeconds float64 `json:"lagSeconds"`
	// Status is StatusIdle, StatusDead, StatusDisabled or StatusExpired; an
	// idle shard whose pass has a handler call running past its threshold
	// shows StatusStuck (see StuckSince), else with committed events after
	// its cursor StatusCatchingUp.
	Status string `json:"status"`
	// ExpiredUpTo is, for an expired shard, the highest id of the pruned
	// events it missed; 0 otherwise.
	ExpiredUpTo int64 `json:"expiredUpTo"`
	// Liveness is, for a per-instance shard, whether its process beats:
	// LivenessLive, LivenessStale (its last beat is older than the
	// instance's stale threshold) or LivenessUnknown (no process of this
	// version has run under its id); "" for a shared shard.
	Liveness string `json:"liveness"`
	// LastSeen is the last beat of a per-instance shard's process; nil
	// when unknown or shared.
	LastSeen *time.Time `json:"lastSeen"`
	// Attempts counts the failed passes on the event after Cursor since the
	// last success.
	Attempts int `json:"attempts"`
	// LastError is the error of the last failed pass ("" when none).
	LastError string `json:"lastError"`
	// GapWaitSeconds is how long the shard has been holding committed
	// events back behind an id that a transaction still open may commit
	// (see docs/dispatcher.md); 0 when it is not waiting. Measured from
	// the pass that first stopped at the gap, so it keeps growing while no
	// pass runs.
	GapWaitSeconds float64 `json:"gapWaitSeconds"`
	// GapBackends are the process ids of the database backends whose open
	// transactions the shard waits for (pg_stat_activity.pid; the ones to
	// look at, and to terminate if they are stuck). Empty, never nil, when
	// the shard is not waiting or those transactions have ended since its
	// last pass.
	GapBackends []int32 `json:"gapBackends"`
	// UpdatedAt is when a pass or an operation last wrote the row.
	UpdatedAt time.Time `json:"updatedAt"`
	// StuckSince is, for a StatusStuck shard, when the handler call still
	// running on its next event started; nil otherwise. The call is
	// reported once it has run past its consumer's StuckAfter, by the
	// process running it (on its liveness beat), for as long as that
	// process beats and the call has not returned.
	StuckSince *time.Time `json:"stuckSince"`
	// StuckSeconds is how long that call has run; 0 when not stuck.
	StuckSeconds float64 `json:"stuckSeconds"`
	// StuckEventID is the id of the event that call handles (the first of
	// a HandleBatch call); 0 when not stuck.
	StuckEventID int64 `json:"stuckEventId"`
	// Partition and Partitions: the shard is partition Partition of
	// Partitions (see Consumer.Partitions); Partitions is 0 for a shared or
	// per-instance shard.
	Partition  int `json:"partition"`
	Partitions int `json:"partitions"`
	// Owner is, for a partition, the live process it is assigned to ("" when
	// none is live); the process passing it may differ for a moment while
	// the processes look at a changed membership.
	Owner string `json:"owner"`
	// Parked counts the streams parked on the shard (see Ops.Parked).
	Parked int `json:"parked"`
	// StuckInstanceID is the instance id of the process running that call
	// — for a shared shard, the process whose turn it is; "" when not
	// stuck.
	StuckInstanceID string `json:"stuckInstanceId"`
}

// Ops lists and operates the event dispatcher's consumer shards
// (restart, skip, disable, enable) directly on their state rows, so it works
// with or without a running dispatcher, from any process. It is safe for
// concurrent use.
//
// Each operation runs in one transaction that locks the shard's row with
// SELECT … FOR UPDATE: it waits for a pass running on the shard to commit
// and then acts on the state that pass left. An operation refuses, changing
// nothing, when the shard is missing (ErrNotFound) or in a status
// the operation does not start from (ErrWrongState).
//
// An instance id "" addresses the shared shard (SharedInstance); a
// per-instance consumer's shards are addressed by their process's instance
// id.
type Ops struct {
	store *eventstore.Store
	pool  *pgxpool.Pool
	sql   queries
}

// NewOps returns the consumer operations on store's consumer table.
// It does not touch the database.
func NewOps(store *eventstore.Store) *Ops {
	return &Ops{store: store, pool: store.Pool(), sql: newQueries(store.Schema())}
}

// List returns every consumer shard, ordered by name and instance id; an
// empty, non-nil slice when there is none.
func (o *Ops) List(ctx context.Context) ([]ShardStatus, error) {
	rows, err := o.pool.Query(ctx, o.sql.list)
	if err != nil {
		return nil, eventstore.TranslateError(fmt.Errorf("list consumers: %w", err))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ShardStatus, error) { return scanShardStatus(r) })
	if err != nil {
		return nil, eventstore.TranslateError(fmt.Errorf("list consumers: %w", err))
	}
	if out == nil {
		out = []ShardStatus{}
	}
	return out, o.owners(ctx, out)
}

// owners sets the Owner of the partitions in list.
func (o *Ops) owners(ctx context.Context, list []ShardStatus) error {
	var names []string
	for _, s := range list {
		if s.Partitions > 0 && !slices.Contains(names, s.Name) {
			names = append(names, s.Name)
		}
	}
	if len(names) == 0 {
		return nil
	}
	ms, err := memberships(ctx, o.pool, o.sql.members, names)
	if err != nil {
		return err
	}
	for i, s := range list {
		if s.Partitions > 0 {
			list[i].Owner = ownerOf(s.Partition, ms[s.Name].members)
		}
	}
	return nil
}

// Status returns one consumer shard. A missing shard answers an *Error
// wrapping ErrNotFound.
func (o *Ops) Status(ctx context.Context, name, instanceID string) (ShardStatus, error) {
	return o.status(ctx, o.pool, name, shardInstance(instanceID))
}

// Restart brings a dead shard back to idle with attempts at 0 and the error
// cleared; the cursor is kept, so the next pass retries the event that
// failed. Only a dead shard restarts. It returns the shard after the change.
func (o *Ops) Restart(ctx context.Context, name, instanceID string) (ShardStatus, error) {
	return o.change(ctx, "restart", name, instanceID, []string{StatusDead}, func(ctx context.Context, tx pgx.Tx, sh opShard) error {
		_, err := tx.Exec(ctx, o.sql.restart, name, sh.instance, StatusIdle)
		return err
	})
}

// Skip moves the cursor of a dead or idle shard past its head event — the
// first event after the cursor, normally the one that keeps failing — so the
// next pass starts with the event after it. The shard becomes idle with
// attempts at 0 and the error cleared. It refuses when there is no event
// after the cursor (ErrNothingToSkip) and when ids below the head event may
// still be committed by transactions in flight (ErrGapUnsettled): skipping
// then could pass an event nobody has seen. It returns the shard after the
// change.
//
// Skipping an expired shard accepts the loss of the pruned events it
// missed: it becomes idle and resumes from its cursor with the oldest
// retained event after it; a later prune that removes more of its events
// expires it again.
func (o *Ops) Skip(ctx context.Context, name, instanceID string) (ShardStatus, error) {
	return o.change(ctx, "skip", name, instanceID, []string{StatusDead, StatusIdle, StatusExpired}, func(ctx context.Context, tx pgx.Tx, sh opShard) error {
		if sh.status == StatusExpired {
			_, err := tx.Exec(ctx, o.sql.skipExpired, name, sh.instance, StatusIdle)
			return err
		}
		// The horizon first: it judges the events read after it.
		h, err := o.store.HorizonTx(ctx, tx)
		if err != nil {
			return err
		}
		var next *int64
		if err := tx.QueryRow(ctx, o.sql.next, sh.cursor).Scan(&next); err != nil {
			return err
		}
		if next == nil {
			return newError(codeUnprocessable, kumikotype.ReasonNothingToSkip,
				fmt.Sprintf("consumer %s/%s has no event after its cursor %d to skip", name, sh.instance, sh.cursor),
				fmt.Errorf("skip %s/%s: %w", name, sh.instance, ErrNothingToSkip)).
				With("consumer", name).With("instanceId", sh.instance).With("cursor", sh.cursor)
		}
		head := *next
		if !sh.settledBelow(head, h) {
			return newError(codeUnprocessable, kumikotype.ReasonGapUnsettled,
				fmt.Sprintf("an event before %d may still be committed; retry shortly", head),
				fmt.Errorf("skip %s/%s: %w", name, sh.instance, ErrGapUnsettled)).
				With("consumer", name).With("instanceId", sh.instance).With("cursor", sh.cursor)
		}
		_, err = tx.Exec(ctx, o.sql.skip, name, sh.instance, head, StatusIdle)
		return err
	})
}

// Disable stops an idle, dead or expired shard: passes leave a disabled
// shard alone, its cursor and attempts stay as they are. It returns the
// shard after the change.
func (o *Ops) Disable(ctx context.Context, name, instanceID string) (ShardStatus, error) {
	return o.change(ctx, "disable", name, instanceID, []string{StatusIdle, StatusDead, StatusExpired}, func(ctx context.Context, tx pgx.Tx, sh opShard) error {
		_, err := tx.Exec(ctx, o.sql.setStatus, name, sh.instance, StatusDisabled)
		return err
	})
}

// Enable makes a disabled shard idle again; passes resume from its cursor.
// Attempts are kept: a shard disabled while dead fails for good again on
// its next failed pass (Restart resets them). It returns the shard after the
// change.
func (o *Ops) Enable(ctx context.Context, name, instanceID string) (ShardStatus, error) {
	return o.change(ctx, "enable", name, instanceID, []string{StatusDisabled}, func(ctx context.Context, tx pgx.Tx, sh opShard) error {
		_, err := tx.Exec(ctx, o.sql.setStatus, name, sh.instance, StatusIdle)
		return err
	})
}

// opShard is the locked row an operation acts on.
type opShard struct {
	instance   string
	cursor     int64
	status     string
	attempts   int
	gapHorizon int64
	gapWriters []string
}

// settledBelow reports whether every id between the cursor and head is
// settled — committed and visible, or gone for good — so moving the cursor
// to head passes no event that could still commit. That holds when head
// directly follows the cursor; when no event writer is in flight; when the
// last pass failed (attempts > 0), since a pass only delivers an event once
// the ids below it are settled and nothing has moved the cursor since; and
// when the gap a pass recorded covers them and its writers have ended.
func (sh opShard) settledBelow(head int64, h eventstore.Horizon) bool {
	switch {
	case head == sh.cursor+1, len(h.Writers) == 0, sh.attempts > 0:
		return true
	}
	return sh.gapHorizon >= head-1 && sh.gapHorizon > sh.cursor && !overlaps(sh.gapWriters, h.Writers)
}

// change runs op on a shard in one transaction: lock its row (waiting for a
// running pass), check the status is one of from, apply, and read the row
// back.
func (o *Ops) change(ctx context.Context, op, name, instanceID string, from []string,
	apply func(ctx context.Context, tx pgx.Tx, sh opShard) error,
) (ShardStatus, error) {
	instance := shardInstance(instanceID)
	var out ShardStatus
	err := pgx.BeginFunc(ctx, o.pool, func(tx pgx.Tx) error {
		sh := opShard{instance: instance}
		err := tx.QueryRow(ctx, o.sql.opLock, name, instance).Scan(&sh.cursor, &sh.status, &sh.attempts, &sh.gapHorizon, &sh.gapWriters)
		if errors.Is(err, pgx.ErrNoRows) {
			return consumerNotFound(name, instance)
		}
		if err != nil {
			return fmt.Errorf("%s consumer %s/%s: lock: %w", op, name, instance, err)
		}
		if !slices.Contains(from, sh.status) {
			return newError(codeUnprocessable, kumikotype.ReasonWrongState,
				fmt.Sprintf("consumer %s/%s is %s; %s needs it %s", name, instance, sh.status, op, strings.Join(from, " or ")),
				fmt.Errorf("%s %s/%s: %w: it is %s", op, name, instance, ErrWrongState, sh.status)).
				With("consumer", name).With("instanceId", instance).With("status", sh.status)
		}
		if err := apply(ctx, tx, sh); err != nil {
			var ce *Error
			if errors.As(err, &ce) {
				return err
			}
			return fmt.Errorf("%s consumer %s/%s: %w", op, name, instance, err)
		}
		out, err = o.status(ctx, tx, name, instance)
		return err
	})
	if err != nil {
		return ShardStatus{}, eventstore.TranslateError(err)
	}
	return out, nil
}

// opsQuerier is a pool or a transaction.
type opsQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func (o *Ops) status(ctx context.Context, q opsQuerier, name, instance string) (ShardStatus, error) {
	st, err := scanShardStatus(q.QueryRow(ctx, o.sql.status, name, instance))
	if errors.Is(err, pgx.ErrNoRows) {
		return ShardStatus{}, consumerNotFound(name, instance)
	}
	if err != nil {
		return ShardStatus{}, eventstore.TranslateError(fmt.Errorf("consumer %s/%s: %w", name, instance, err))
	}
	one := []ShardStatus{st}
	err = o.owners(ctx, one)
	return one[0], err
}

func scanShardStatus(row pgx.Row) (ShardStatus, error) {
	var s ShardStatus
	err := row.Scan(&s.Name, &s.InstanceID, &s.Cursor, &s.Head, &s.LagEvents, &s.LagSeconds,
		&s.Status, &s.Attempts, &s.LastError, &s.GapWaitSeconds, &s.GapBackends, &s.UpdatedAt, &s.ExpiredUpTo, &s.Liveness, &s.LastSeen,
		&s.StuckEventID, &s.StuckInstanceID, &s.StuckSince, &s.StuckSeconds, &s.Partition, &s.Partitions, &s.Parked)
	if s.GapBackends == nil {
		s.GapBackends = []int32{}
	}
	switch {
	case s.Status == StatusIdle && s.StuckEventID > 0:
		s.Status = StatusStuck
	case s.Status == StatusIdle && s.LagEvents > 0:
		s.Status = StatusCatchingUp
	}
	return s, err
}

func consumerNotFound(name, instance string) *Error {
	return newError(codeNotFound, kumikotype.ReasonConsumerNotFound,
		fmt.Sprintf("no consumer %s with instance %s", name, instance),
		fmt.Errorf("%s/%s: %w", name, instance, ErrNotFound)).
		With("consumer", name).With("instanceId", instance)
}

// shardInstance is the instance id of a shard's row: "" means the shared one.
func shardInstance(instanceID string) string {
	if instanceID == "" {
		return SharedInstance
	}
	return instanceID
}

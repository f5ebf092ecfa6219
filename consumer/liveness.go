package consumer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/kumiko-go/kumiko/eventstore"
)

// Liveness of a per-instance shard's process (ShardStatus.Liveness).
const (
	LivenessLive    = "live"
	LivenessStale   = "stale"
	LivenessUnknown = "unknown"
)

// Defaults of the liveness beat.
const (
	DefaultHeartbeat  = 10 * time.Second
	DefaultStaleAfter = time.Minute
)

// Instance is one process's liveness record, or an instance known only by
// its per-instance shards (Recorded false: no process of this version has
// run under its id).
type Instance struct {
	// InstanceID is the process's Config.InstanceID.
	InstanceID string `json:"instanceId"`
	// Host and Version are what the process recorded (Config.Host,
	// Config.Version); "" when not Recorded.
	Host    string `json:"host"`
	Version string `json:"version"`
	// StartedAt is when the process started its dispatcher, LastSeen its
	// last beat; nil when not Recorded.
	StartedAt *time.Time `json:"startedAt"`
	LastSeen  *time.Time `json:"lastSeen"`
	// Stale: the last beat is older than the instance's threshold (and
	// than three of its beats); always true when not Recorded.
	Stale    bool `json:"stale"`
	Recorded bool `json:"recorded"`
}

// GCOptions selects what Ops.CollectStale removes.
type GCOptions struct {
	// StaleAfter overrides each instance's own threshold when positive;
	// an instance is never taken for stale before three of its beats are
	// missing, whatever the threshold.
	StaleAfter time.Duration
	// Unknown also removes the shards of instances with no liveness
	// record: processes that last ran a version without the beat. Use it
	// only once every running process beats.
	Unknown bool
	// DryRun reports what would be removed, removing nothing.
	DryRun bool
}

// GCResult says what Ops.CollectStale removed (or would remove).
type GCResult struct {
	// Instances are the stale instances, in order; empty, never nil.
	Instances []string `json:"instances"`
	// Shards counts their per-instance shards.
	Shards int64 `json:"shards"`
}

// Instances lists every instance known by a liveness record or by a
// per-instance shard, ordered by id; empty, never nil.
func (o *Ops) Instances(ctx context.Context) ([]Instance, error) {
	rows, err := o.pool.Query(ctx, o.sql.instances)
	if err != nil {
		return nil, eventstore.TranslateError(fmt.Errorf("list instances: %w", err))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Instance, error) {
		var i Instance
		err := r.Scan(&i.InstanceID, &i.Host, &i.Version, &i.StartedAt, &i.LastSeen, &i.Stale, &i.Recorded)
		return i, err
	})
	if err != nil {
		return nil, eventstore.TranslateError(fmt.Errorf("list instances: %w", err))
	}
	if out == nil {
		out = []Instance{}
	}
	return out, nil
}

// CollectStale removes the per-instance shards and the liveness records of
// stale instances, in one transaction. It never touches a shared shard nor
// an instance that beats: the threshold is at least three of the
// instance's beats, and beats wait while it runs. A process that was only
// paused and beats again afterwards registers its shards anew (Dispatcher
// logs it). It waits for a running prune, and fails rather than wait more
// than 5s for a lock after that (a rebuild holding the shards): run it
// again later.
func (o *Ops) CollectStale(ctx context.Context, opts GCOptions) (GCResult, error) {
	res := GCResult{Instances: []string{}}
	var threshold *time.Duration
	if opts.StaleAfter > 0 {
		threshold = &opts.StaleAfter
	}
	err := pgx.BeginFunc(ctx, o.pool, func(tx pgx.Tx) error {
		for _, stmt := range []string{o.sql.gcLockShards, o.sql.gcTimeout, o.sql.gcLock} {
			if _, err := tx.Exec(ctx, stmt); err != nil {
				return fmt.Errorf("lock: %w", err)
			}
		}
		rows, err := tx.Query(ctx, o.sql.gcStale, threshold, opts.Unknown)
		if err != nil {
			return err
		}
		if res.Instances, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
			return err
		}
		if res.Instances == nil {
			res.Instances = []string{}
			return nil
		}
		if opts.DryRun {
			return tx.QueryRow(ctx, o.sql.gcCount, res.Instances).Scan(&res.Shards)
		}
		tag, err := tx.Exec(ctx, o.sql.gcShards, res.Instances)
		if err != nil {
			return err
		}
		res.Shards = tag.RowsAffected()
		_, err = tx.Exec(ctx, o.sql.gcInstances, res.Instances)
		return err
	})
	if err != nil {
		return GCResult{}, eventstore.TranslateError(fmt.Errorf("collect stale instances: %w", err))
	}
	return res, nil
}

// heartbeat records the process's liveness every beat until ctx ends, on a
// connection of its own — passes that hold every pooled connection must
// not make a busy process look stale — reopened when it fails. With
// CollectStale it also removes stale instances, at most once per
// StaleAfter. Between beats it looks for handler calls running past their
// threshold (stuckCheck) and records them whenever that set changes; the
// first look clears what an earlier run under this instance id left.
func (e *Dispatcher) heartbeat(ctx context.Context, started time.Time) {
	var (
		conn        *pgx.Conn
		lastCollect = time.Now()
		recorded    []stuckCall
		known       bool // recorded is what the table holds for this process
	)
	defer func() {
		if conn == nil {
			return
		}
		// A stopping process clears its stuck records: the passes it gave
		// up on roll back, their events wait for the next turn.
		if len(recorded) > 0 {
			bound, cancel := context.WithTimeout(context.WithoutCancel(ctx), 500*time.Millisecond)
			_ = e.recordStuck(bound, conn, nil)
			cancel()
		}
		bound, cancel := context.WithTimeout(context.WithoutCancel(ctx), 500*time.Millisecond)
		conn.Close(bound)
		cancel()
	}()
	ticker := time.NewTicker(e.cfg.Heartbeat)
	defer ticker.Stop()
	check := time.NewTicker(e.stuckCheck())
	defer check.Stop()
	for {
		beat := false
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
			beat = true
		case <-check.C:
		}
		calls := e.stuckCalls(time.Now())
		if !beat && known && slices.Equal(calls, recorded) {
			continue
		}
		if conn == nil {
			c, err := pgx.ConnectConfig(ctx, e.pool.Config().ConnConfig.Copy())
			if err != nil {
				e.cfg.Logger.Warn("event dispatcher: heartbeat: connect failed", "instance_id", e.cfg.InstanceID, "err", err)
				continue
			}
			conn = c
		}
		var err error
		if beat {
			err = e.beat(ctx, conn, started, false)
		}
		if err == nil && (!known || !slices.Equal(calls, recorded)) {
			if err = e.recordStuck(ctx, conn, calls); err == nil {
				e.logStuck(calls, recorded)
				recorded, known = calls, true
			}
		}
		if err != nil {
			if ctx.Err() == nil {
				e.cfg.Logger.Warn("event dispatcher: heartbeat failed", "instance_id", e.cfg.InstanceID, "err", err)
			}
			conn.Close(context.WithoutCancel(ctx))
			conn = nil
			continue
		}
		if beat && e.cfg.CollectStale && time.Since(lastCollect) >= e.cfg.StaleAfter {
			lastCollect = time.Now()
			res, err := NewOps(e.store).CollectStale(ctx, GCOptions{})
			switch {
			case err != nil && ctx.Err() == nil:
				e.cfg.Logger.Warn("event dispatcher: removing stale instances failed", "err", err)
			case err == nil && len(res.Instances) > 0:
				e.cfg.Logger.Info("event dispatcher: removed stale instances", "instances", res.Instances, "shards", res.Shards)
			}
		}
	}
}

// beatQuerier is a connection, a pool or a transaction.
type beatQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// beat records one beat and updates the instance gauges. After the first
// beat, a missing record means a gc took the process for stale: its shards
// are registered again, so it goes on delivering.
func (e *Dispatcher) beat(ctx context.Context, q beatQuerier, started time.Time, first bool) error {
	var inserted bool
	if err := q.QueryRow(ctx, e.sql.beat, e.cfg.InstanceID, e.cfg.Host, e.cfg.Version, started,
		e.cfg.Heartbeat, e.cfg.StaleAfter).Scan(&inserted); err != nil {
		return fmt.Errorf("beat: %w", err)
	}
	if inserted && !first {
		e.cfg.Logger.Warn("event dispatcher: this instance was removed as stale; registering its consumers again",
			"instance_id", e.cfg.InstanceID)
		if err := e.Register(ctx); err != nil {
			return err
		}
	}
	rows, err := q.Query(ctx, e.sql.instances)
	if err != nil {
		return fmt.Errorf("beat: instances: %w", err)
	}
	var (
		id        string
		stale, ok bool
		skip      any
	)
	e.metrics.stale.Reset()
	_, err = pgx.ForEachRow(rows, []any{&id, &skip, &skip, &skip, &skip, &stale, &ok}, func() error {
		e.metrics.stale.WithLabelValues(id).Set(gaugeFlag(stale))
		return nil
	})
	if err != nil {
		return fmt.Errorf("beat: instances: %w", err)
	}
	return nil
}

// validateLiveness checks the beat settings after defaults.
func (cfg Config) validateLiveness() error {
	if cfg.StaleAfter < 2*cfg.Heartbeat {
		return errors.New("event dispatcher: StaleAfter must be at least two Heartbeats")
	}
	return nil
}

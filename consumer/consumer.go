package consumer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/feature"
)

// SharedInstance is the instance id of a shared consumer's state row: one
// cursor that all processes take turns on.
const SharedInstance = "__shared__"

// Consumer states.
const (
	StatusIdle     = "idle"
	StatusDead     = "dead"
	StatusDisabled = "disabled"
	// StatusExpired: a prune removed events of the consumer's types after
	// the shard's cursor (it was disabled meanwhile, or its state comes
	// from an older backup). The shard delivers nothing until an operator
	// skips it (Ops.Skip: resume with the oldest retained event after the
	// cursor, accepting the loss) or rebuilds its projection.
	StatusExpired = "expired"
	// StatusCatchingUp is how a status report (Ops.List, Ops.Status) shows
	// an idle shard that committed events wait for; it is never stored.
	StatusCatchingUp = "catching_up"
	// StatusStuck is how a status report shows an idle shard whose pass
	// has a handler running past its consumer's StuckAfter (ShardStatus
	// names the event, the process and since when); it is never stored,
	// and it takes precedence over StatusCatchingUp.
	StatusStuck = "stuck"
)

// Consumer receives every committed event, in id order, at least once; with
// a Handler that writes only in the pass transaction, exactly once in effect.
type Consumer struct {
	// Name identifies the consumer's state; unique in the app.
	Name string
	// Delivery is Shared (one process handles each event) or PerInstance
	// (every process handles every event).
	Delivery feature.Delivery
	// Types limits delivery to these event types; nil = all. The cursor
	// still moves over the others.
	Types []string
	// Handle applies one event inside the pass transaction, under a
	// savepoint of its own: its writes commit with the cursor or not at all.
	Handle func(ctx context.Context, tx pgx.Tx, ev eventstore.Event) error
	// Pipelined queues the Exec statements of Handle on a pass's first run
	// and sends them as one batch, in order, before any other statement
	// (see Consumer.Handle's tx): a handler doing one INSERT per event costs
	// one round trip per pass instead of one per event. Exec then answers
	// an empty command tag; use QueryRow when a result matters. When a
	// queued statement fails, the pass runs again event by event without
	// queueing, so the error names its event.
	Pipelined bool
	// HandleBatch, when set instead of Handle, applies the events of a pass
	// at once under one savepoint.
	HandleBatch func(ctx context.Context, tx pgx.Tx, evs []eventstore.Event) error
	// MaxAttempts before the consumer is dead; default 10.
	MaxAttempts int
	// SkipApplyErrors moves past a failing event (counted as failed)
	// instead of retrying it.
	SkipApplyErrors bool
	// StartFrom is where a consumer without state starts: the beginning of
	// the log or its current end.
	StartFrom feature.StartFrom
	// BatchSize is the most events one pass reads; default 200.
	BatchSize int
	// RearmAfter, when positive, brings a dead consumer back to idle after
	// this cooldown, at most MaxRearms times in a row.
	RearmAfter time.Duration
	MaxRearms  int
	// AsyncCommit lets a pass commit without waiting for its WAL flush
	// (synchronous_commit off for the pass transaction). A database crash
	// can then lose the last passes — their cursor moves and their writes
	// together, never one without the other — and their events are
	// delivered again. For consumers that keep nothing in the database,
	// such as a feed to in-memory subscribers, it takes the pass's flush
	// wait off every commit.
	AsyncCommit bool
	// MinPassInterval, when positive, lets a wake-up start a pass no sooner
	// than this after the previous pass started: commits arriving meanwhile
	// share one pass. It trades that much delivery latency for fewer passes
	// under a steady stream of small commits; a backlog (a full batch) is
	// still read without pause.
	MinPassInterval time.Duration
	// Standby, when set, is asked whenever a commit wakes the consumer:
	// while it reports true the wake-up starts no pass, and the consumer
	// passes only at the dispatcher's poll interval — its cursor keeps
	// following the log, at most that far behind, without a pass per
	// commit. The /api/events feed stands by while no client listens.
	Standby func() bool
	// StuckAfter is how long one handler call (Handle for an event,
	// HandleBatch for a pass) may run before the shard reports
	// StatusStuck; default Config.StuckAfter. The process records it
	// within a quarter of the threshold (and at most a Heartbeat) after it
	// is crossed, on the beat's own connection.
	StuckAfter time.Duration
	// Partitions, above 1, splits a Shared consumer into that many
	// partitions: an event belongs to the partition PartitionOf(its key, N)
	// — the key is PartitionKey's, by default the aggregate id — and each
	// partition has a shard of its own (cursor, status, attempts), so the
	// events of one stream are handled in order while different partitions
	// run in parallel, in one process and across processes. The live
	// processes share the partitions evenly (see docs/dispatcher.md). The
	// count is stored with the shards when they are first created; changing
	// it later is an operation (Ops.Repartition), and until then the
	// stored count holds. 0 or 1: one shared shard, as before.
	Partitions int
	// PartitionKey names an event's stream for partitioning and parking;
	// nil: the aggregate id. It must be a function of the event alone.
	PartitionKey func(ev eventstore.Event) string
	// Park, instead of stopping the shard when an event has failed
	// MaxAttempts times, parks the event's stream (its PartitionKey): the
	// stream's later events are passed over, every other stream goes on,
	// and an operator retries the stream (its events from the failing one,
	// in order) or skips the failing event (Ops.RetryParked,
	// Ops.SkipParked). Not with SkipApplyErrors.
	Park bool
	// HandlerTimeout, when positive, bounds one handler call: past it the
	// handler's context is cancelled, and when the handler then returns an
	// error the pass counts a failed attempt with the last error "handler
	// timeout after …" — retried, dead after MaxAttempts or skipped, as
	// for any failure. The event is not run again in the same pass. A
	// handler that ignores its context is not interrupted (it shows as
	// stuck). Default 0: no bound.
	HandlerTimeout time.Duration
}

// standingBy reports whether c stands by (see Consumer.Standby).
func (c Consumer) standingBy() bool { return c.Standby != nil && c.Standby() }

func (c Consumer) withDefaults() Consumer {
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = feature.DefaultMaxAttempts
	}
	if c.BatchSize <= 0 {
		c.BatchSize = feature.DefaultBatchSize
	}
	return c
}

func (c Consumer) validate() error {
	switch {
	case c.Name == "":
		return errors.New("consumer: Name is required")
	case (c.Handle == nil) == (c.HandleBatch == nil):
		return fmt.Errorf("consumer %s: set exactly one of Handle and HandleBatch", c.Name)
	case c.StuckAfter < 0 || c.HandlerTimeout < 0:
		return fmt.Errorf("consumer %s: StuckAfter and HandlerTimeout must not be negative", c.Name)
	case c.Partitions < 0 || c.Partitions > MaxPartitions:
		return fmt.Errorf("consumer %s: Partitions must be between 0 and %d", c.Name, MaxPartitions)
	case c.Partitions > 1 && c.Delivery == feature.PerInstance:
		return fmt.Errorf("consumer %s: a per-instance consumer cannot be partitioned", c.Name)
	case c.Park && c.SkipApplyErrors:
		return fmt.Errorf("consumer %s: Park and SkipApplyErrors exclude each other", c.Name)
	case c.Park && c.HandleBatch != nil:
		return fmt.Errorf("consumer %s: Park needs Handle: a batch's failure names no stream", c.Name)
	}
	return nil
}

// wants reports whether the consumer handles events of type typ.
func (c Consumer) wants(typ string) bool {
	if c.Types == nil {
		return true
	}
	for _, t := range c.Types {
		if t == typ {
			return true
		}
	}
	return false
}

// key is ev's stream for partitioning and parking.
func (c Consumer) key(ev eventstore.Event) string {
	if c.PartitionKey != nil {
		return c.PartitionKey(ev)
	}
	return ev.AggregateID.String()
}

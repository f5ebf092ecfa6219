package consumer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// DefaultStuckAfter is Config.StuckAfter's default.
const DefaultStuckAfter = 30 * time.Second

// Bounds of how often the beat looks for stuck handler calls (see
// Dispatcher.stuckCheck).
const minStuckCheck = 10 * time.Millisecond

// runningCall is the handler calls a consumer's passes run now in this
// process, by shard: a pass runs its handler calls one after the other, and
// a consumer's partitions pass in parallel. The beat reads it from its own
// goroutine.
type runningCall struct {
	mu    sync.Mutex
	calls map[string]running // by the shard's instance id
}

// running is one handler call: the event handled (the first of a batch)
// and since when.
type running struct {
	eventID int64
	since   time.Time
}

// begin records that a call on eventID of the shard instance starts now.
func (r *runningCall) begin(instance string, eventID int64) {
	r.mu.Lock()
	if r.calls == nil {
		r.calls = map[string]running{}
	}
	r.calls[instance] = running{eventID: eventID, since: time.Now()}
	r.mu.Unlock()
}

// end records that the shard's call has returned.
func (r *runningCall) end(instance string) {
	r.mu.Lock()
	delete(r.calls, instance)
	r.mu.Unlock()
}

// stuckCall is a handler call running past its consumer's StuckAfter, as
// recorded in kumiko_consumer_stuck.
type stuckCall struct {
	name, instance string
	eventID        int64
	since          time.Time
}

// stuckCalls returns this process's handler calls running past their
// consumer's StuckAfter at now, in consumer order, and sets every
// consumer's stuck gauge.
func (e *Dispatcher) stuckCalls(now time.Time) []stuckCall {
	var out []stuckCall
	for _, c := range e.consumers {
		r := e.running[c.Name]
		var calls []stuckCall
		r.mu.Lock()
		for instance, call := range r.calls {
			if now.Sub(call.since) >= c.StuckAfter {
				calls = append(calls, stuckCall{name: c.Name, instance: instance, eventID: call.eventID, since: call.since})
			}
		}
		r.mu.Unlock()
		slices.SortFunc(calls, func(a, b stuckCall) int { return strings.Compare(a.instance, b.instance) })
		e.metrics.stuck(c.Name, len(calls) > 0)
		out = append(out, calls...)
	}
	return out
}

// stuckCheck is how often the beat looks for stuck calls: a quarter of the
// smallest threshold, at least minStuckCheck and at most a Heartbeat.
func (e *Dispatcher) stuckCheck() time.Duration {
	every := e.cfg.Heartbeat
	for _, c := range e.consumers {
		every = min(every, c.StuckAfter/4)
	}
	return max(every, minStuckCheck)
}

// recordStuck replaces this process's rows of kumiko_consumer_stuck with
// calls, in one transaction on the beat's connection: the shards' rows are
// locked by the passes' transactions, and readers on other processes see
// nothing those write before they commit.
func (e *Dispatcher) recordStuck(ctx context.Context, conn *pgx.Conn, calls []stuckCall) error {
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, e.sql.stuckClear, e.cfg.InstanceID); err != nil {
			return err
		}
		if len(calls) == 0 {
			return nil
		}
		names, shards := make([]string, len(calls)), make([]string, len(calls))
		ids, since := make([]int64, len(calls)), make([]time.Time, len(calls))
		for i, c := range calls {
			names[i], shards[i], ids[i], since[i] = c.name, c.instance, c.eventID, c.since
		}
		_, err := tx.Exec(ctx, e.sql.stuckInsert, e.cfg.InstanceID, names, shards, ids, since)
		return err
	})
	if err != nil {
		return fmt.Errorf("record stuck handlers: %w", err)
	}
	return nil
}

// timeoutError is a handler call that ran past its consumer's
// HandlerTimeout and failed once its context was cancelled.
type timeoutError struct {
	eventID int64
	after   time.Duration
	err     error
}

func (t *timeoutError) Error() string {
	return fmt.Sprintf("handler timeout after %s: %v", t.after, t.err)
}

func (t *timeoutError) Unwrap() error { return t.err }

// call runs one handler call of c on eventID (the first event of a batch)
// for the shard instance: it is recorded as running meanwhile (for the
// stuck report), and bounded by c.HandlerTimeout when set. A call that
// fails after its timeout cancelled its context answers a *timeoutError —
// unless ctx itself ended (the dispatcher stops).
func (e *Dispatcher) call(ctx context.Context, c Consumer, instance string, eventID int64, fn func(context.Context) error) error {
	r := e.running[c.Name]
	r.begin(instance, eventID)
	defer r.end(instance)
	if c.HandlerTimeout <= 0 {
		return fn(ctx)
	}
	hctx, cancel := context.WithTimeout(ctx, c.HandlerTimeout)
	defer cancel()
	err := fn(hctx)
	if err != nil && ctx.Err() == nil && errors.Is(hctx.Err(), context.DeadlineExceeded) {
		return &timeoutError{eventID: eventID, after: c.HandlerTimeout, err: err}
	}
	return err
}

// logStuck warns of each call of calls that was not recorded as stuck
// before.
func (e *Dispatcher) logStuck(calls, before []stuckCall) {
	for _, c := range calls {
		if slices.Contains(before, c) {
			continue
		}
		e.cfg.Logger.Warn("event dispatcher: handler stuck", "consumer", c.name, "instance_id", e.cfg.InstanceID,
			"shard", c.instance, "eventId", c.eventID, "running", time.Since(c.since).Round(time.Millisecond))
	}
}

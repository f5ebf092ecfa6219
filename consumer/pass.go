package consumer

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/jackc/pgx/v5"

	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/internal/author"
)

// shard is a consumer's state row as a pass reads and writes it.
type shard struct {
	cursor     int64
	status     string
	attempts   int
	lastError  string
	gapHorizon int64
	gapWriters []string
	// gapWait is how long the shard has waited at its gap, in seconds; nil
	// when it is not waiting (gap_since is NULL).
	gapWait   *float64
	updatedAt time.Time
	// prunedAck is the highest pruned id the shard has accepted; pruned
	// the highest id a prune removed among the consumer's types, as the
	// pass read it; expiredUpTo the one that expired it.
	prunedAck, pruned, expiredUpTo int64
	// head is the newest committed event id the pass's lock saw.
	head int64
	// partition and partitions: the shard is partition `partition` of
	// `partitions` (0: not a partition); fence, when positive, is an id the
	// shard does not pass (a repartition drains the partitions to it).
	partition, partitions int
	fence                 int64
	// parked are the streams parked on the shard; actions reports that an
	// operator asked to retry or skip some of them.
	parked  []string
	actions bool
}

// limit is how many events a pass of the shard reads: a partition reads
// for all of its consumer's partitions (see reads), so that each finds
// about a batch of its own.
func (sh shard) limit(c Consumer) int {
	if sh.partitions > 0 {
		return min(c.BatchSize*sh.partitions, maxPartitionRead)
	}
	return c.BatchSize
}

// maxPartitionRead bounds what a partition's pass reads at once.
const maxPartitionRead = 10000

// taker is what the shard's pass hands to c: events of its types, of its
// partition, of no parked stream.
func (sh shard) taker(c Consumer) func(ev eventstore.Event) bool {
	if sh.partitions == 0 && len(sh.parked) == 0 {
		return func(ev eventstore.Event) bool { return c.wants(ev.Type) }
	}
	return func(ev eventstore.Event) bool {
		if !c.wants(ev.Type) {
			return false
		}
		key := c.key(ev)
		if sh.partitions > 0 && PartitionOf(key, sh.partitions) != sh.partition {
			return false
		}
		return !slices.Contains(sh.parked, key)
	}
}

// expires reports whether a prune removed events of the consumer's types
// after the cursor that the shard has not accepted: delivering on would
// silently miss them.
func (sh shard) expires() bool {
	return sh.pruned > sh.cursor && sh.pruned > sh.prunedAck
}

// unchanged reports whether a pass leaves the row as it found it, so that
// an idle pass writes nothing.
func (sh shard) unchanged(before shard, waiting, newGap bool) bool {
	return sh.cursor == before.cursor && sh.status == before.status && sh.attempts == before.attempts &&
		sh.lastError == before.lastError && sh.gapHorizon == before.gapHorizon && slices.Equal(sh.gapWriters, before.gapWriters) &&
		sh.expiredUpTo == before.expiredUpTo && !newGap && waiting == (before.gapWait != nil)
}

// onlyMoved reports whether a pass that began at before applied nothing
// and changed nothing but where the shard stands in the log: it moved its
// cursor over events that are not its own (another partition's, a parked
// stream's, types it does not take) or recorded a gap. Losing such a
// commit in a crash loses no effect — the events are passed over again —
// so it need not wait for the disk (a partition that others' events move
// along would otherwise flush once per poll). A later synchronous commit
// flushes it with its own.
func (sh shard) onlyMoved(before shard, res PassResult) bool {
	return len(res.applied) == 0 && res.failures == 0 && res.Failed == nil && !before.actions &&
		sh.status == before.status && sh.attempts == before.attempts && len(sh.parked) == len(before.parked)
}

// PassResult says what one pass did.
type PassResult struct {
	// Locked is false when another process held the shard: nothing was
	// done. A shard with nothing to do (caught up, or disabled) counts as
	// locked, though the pass takes no lock on it.
	Locked bool
	// Handled counts the events passed to the handler and applied.
	Handled int
	// Cursor is the shard's cursor after the pass.
	Cursor int64
	// Head is the highest event id allocated when the pass looked.
	Head int64
	// More reports that events may be waiting beyond this pass's batch.
	More bool
	// Failed is the error of an event that failed; the cursor stays
	// before it unless the consumer skips apply errors.
	Failed error
	// Expired reports that the shard is expired (StatusExpired): events
	// after its cursor were pruned, and it delivers nothing until an
	// operator skips it or rebuilds its projection.
	Expired bool
	// GapWait is how long the shard has been waiting at a gap — committed
	// events held back behind an id that a transaction still in flight may
	// commit — as of this pass; 0 when it is not waiting.
	GapWait time.Duration

	// Parked counts the streams parked on the shard after the pass.
	Parked int

	applied  []eventstore.Event // for the metrics, once committed
	failures int
	waiting  bool // committed events are held back behind a gap
}

// add sums b into r: what passes of several shards did.
func (r *PassResult) add(b PassResult) {
	r.Locked = r.Locked || b.Locked
	r.Handled += b.Handled
	r.Cursor = max(r.Cursor, b.Cursor)
	r.Head = max(r.Head, b.Head)
	r.More = r.More || b.More
	if r.Failed == nil {
		r.Failed = b.Failed
	}
	r.Expired = r.Expired || b.Expired
	r.GapWait = max(r.GapWait, b.GapWait)
	r.Parked += b.Parked
}

// pass runs one pass of consumer c on its shard for instance: lock the state
// row (SKIP LOCKED: a locked row is another process's turn), work out how far
// the log is settled, read a batch, apply it, and write the new cursor — all
// in one transaction, so applied effects and the cursor commit together.
//
// No committed event is ever skipped: an event is delivered only when no
// lower id can still appear, that is when it directly follows the cursor or
// lies below a settled horizon (see eventstore.Horizon). A gap is judged once:
// the horizon and the writers in flight when it was seen are stored on the
// row, and the gap is passed as soon as those writers have all ended —
// transactions that start later, or never write events, cannot delay it.
//
// A pass first applies its events without savepoints; only when a handler
// fails is the transaction rolled back and the pass run again with a
// savepoint per event, to apply what precedes the failure and record it.
//
// since is when the events the pass delivers were known to be committed, at
// the latest (see loop): the delivery metric counts from it.
//
// A handler call that ran past the consumer's HandlerTimeout is not run
// again by the careful run: it fails there with the same error.
func (e *Dispatcher) pass(ctx context.Context, c Consumer, instance string, since time.Time) (PassResult, error) {
	res, err := e.passOnce(ctx, c, instance, false, since, nil)
	if errors.Is(err, errHandlerFailed) {
		var timedOut *timeoutError
		errors.As(err, &timedOut)
		return e.passOnce(ctx, c, instance, true, since, timedOut)
	}
	return res, err
}

// errHandlerFailed aborts a pass run without savepoints.
var errHandlerFailed = errors.New("handler failed")

func (e *Dispatcher) passOnce(ctx context.Context, c Consumer, instance string, careful bool, since time.Time, timedOut *timeoutError) (PassResult, error) {
	var res PassResult
	// BEGIN travels with the shard's lock, the state's save with COMMIT.
	err := eventstore.RunTx(ctx, e.pool, func(tx *eventstore.Tx) error {
		sh, ok, err := e.lockShard(ctx, tx, c, instance, &res)
		if !ok {
			return err
		}
		before := sh
		if sh.status == StatusDead && c.RearmAfter > 0 && time.Since(sh.updatedAt) >= c.RearmAfter && sh.attempts < c.MaxAttempts+c.MaxRearms {
			sh.status = StatusIdle // bounded automatic re-arm; attempts keep counting
		}
		var waiting, newGap bool
		switch {
		case sh.status == StatusIdle && sh.expires():
			sh.status, sh.expiredUpTo, sh.lastError = StatusExpired, sh.pruned, expiredError(sh)
			e.cfg.Logger.Error("event dispatcher: consumer expired: events after its cursor were pruned",
				"consumer", c.Name, "instance_id", instance, "cursor", sh.cursor, "pruned_up_to", sh.pruned)
		case sh.status != StatusIdle:
			res.Expired = sh.status == StatusExpired
			return nil
		default:
			if sh.actions {
				if err := e.resolveParked(ctx, tx, c, instance, &sh); err != nil {
					return err
				}
			}
			if waiting, newGap, err = e.deliver(ctx, tx, c, instance, &sh, careful, timedOut, &res); err != nil {
				return err
			}
		}
		res.Parked = len(sh.parked)
		res.Expired, res.waiting = sh.status == StatusExpired, waiting
		if sh.unchanged(before, waiting, newGap) {
			return nil // an idle pass writes nothing
		}
		if c.AsyncCommit || sh.onlyMoved(before, res) {
			tx.Enqueue(nil, `SET LOCAL synchronous_commit TO OFF`)
		}
		tx.Enqueue(func(err error) error {
			return fmt.Errorf("save %s/%s: %w", c.Name, instance, err)
		}, e.sql.save, c.Name, instance, sh.cursor, sh.status, sh.attempts, sh.lastError,
			sh.gapHorizon, sh.gapWriters, waiting, newGap, sh.expiredUpTo)
		return nil
	})
	if err == nil {
		e.metrics.delivered(c.Name, res.applied, since)
		e.metrics.failed(c.Name, res.failures)
	}
	return res, err
}

// deliver reads the batch after the cursor of an idle shard, applies what
// is settled of it and moves sh to where the pass ends — cursor, attempts,
// error, gap bookkeeping — recording in res what it did. waiting reports
// that committed events are held back by a gap (not by a failing handler);
// newGap that the gap was first seen now. Without careful, a failing
// handler ends it with errHandlerFailed, wrapping the handler's error.
// timedOut is the call that timed out in the run before (see apply).
func (e *Dispatcher) deliver(ctx context.Context, tx *eventstore.Tx, c Consumer, instance string, sh *shard, careful bool, timedOut *timeoutError, res *PassResult) (waiting, newGap bool, err error) {
	limit := sh.limit(c)
	h, settled, evs, cut, err := e.readShared(ctx, tx, c, sh, limit)
	if err != nil {
		return false, false, err
	}
	res.Head = max(sh.head, h.LastID)
	deliver := deliverable(evs, sh.cursor, settled)
	if len(evs) > 0 {
		var span trace.Span
		ctx, span = e.startPass(ctx, c.Name, instance, deliver)
		defer func() { endPass(span, res, err) }()
	}
	applied, next, failures, failedEv, failed := e.apply(ctx, tx, c, instance, sh.cursor, deliver, sh.taker(c), careful, timedOut)
	if failed != nil && !careful {
		return false, false, fmt.Errorf("%w: %w", errHandlerFailed, failed)
	}
	res.Handled, res.Failed, res.applied, res.failures = len(applied), failed, applied, failures

	switch {
	case failed != nil && !c.SkipApplyErrors:
		sh.attempts++
		sh.lastError = author.Storable(failed.Error(), 2000)
		if sh.attempts >= c.MaxAttempts && c.Park && failedEv.ID > 0 {
			// Park the event's stream and go on with the others.
			e.park(tx, c, instance, sh, failedEv)
			next, res.Failed, res.More = failedEv.ID, nil, true
		} else if sh.attempts >= c.MaxAttempts {
			sh.status = StatusDead
		}
	case len(deliver) > 0:
		sh.attempts, sh.lastError = 0, ""
	}
	if failed == nil && len(deliver) == len(evs) && len(evs) < limit {
		// Everything visible up to the settled point is done: what is
		// missing below it will never appear.
		next = max(next, min(settled, h.LastID))
	}
	res.More = res.More || len(evs) == limit && (failed == nil || c.SkipApplyErrors)
	if cut && failed == nil && next < sh.head {
		// The window ended short of what had committed when it was read
		// (a backlog): go on rather than wait for a wake-up.
		res.More = true
	}
	waiting = len(deliver) < len(evs) && (failed == nil || c.SkipApplyErrors)
	newGap = len(deliver) < len(evs) && (sh.gapHorizon <= next || overlapsNone(sh.gapWriters, h.Writers))
	if newGap {
		// A new gap: remember what settles it.
		sh.gapHorizon, sh.gapWriters = h.LastID, h.Writers
	}
	if sh.gapHorizon <= next {
		sh.gapHorizon, sh.gapWriters = 0, []string{}
	}
	sh.cursor, res.Cursor = next, next
	if waiting && !newGap && sh.gapWait != nil {
		res.GapWait = time.Duration(*sh.gapWait * float64(time.Second))
	}
	return waiting, newGap, nil
}

// read reads the batch after the shard's cursor and how far the log is
// settled for it, as of the horizon h.
//
// Most batches need no horizon: when the shard has no gap recorded and the
// events read directly follow the cursor and each other, no lower id can be
// missing, and they are delivered as they are — the pass costs one statement
// less, which is most of what separates a wake-up from its handler. Such a
// batch is judged as if the log were settled up to its last event (h.LastID),
// so the cursor never moves past an id that was not read. Otherwise the read
// is done again the safe way: the horizon first, then the events up to its
// LastID, read by a later statement than the one that saw the writers.
func (e *Dispatcher) read(ctx context.Context, tx pgx.Tx, sh *shard, limit int) (h eventstore.Horizon, settled int64, evs []eventstore.Event, err error) {
	upTo := int64(math.MaxInt64)
	if sh.fence > 0 {
		upTo = sh.fence
	}
	if sh.gapHorizon == 0 {
		evs, err = e.store.ReadRangeTx(ctx, tx, sh.cursor, upTo, limit)
		if err != nil {
			return h, 0, nil, err
		}
		if len(evs) > 0 && evs[0].ID == sh.cursor+1 && evs[len(evs)-1].ID == sh.cursor+int64(len(evs)) {
			// Ids are unique and in order: first and last pin every one between.
			last := evs[len(evs)-1].ID
			return eventstore.Horizon{LastID: last}, last, evs, nil
		}
	}
	if h, err = e.store.HorizonTx(ctx, tx); err != nil {
		return h, 0, nil, err
	}
	evs, err = e.store.ReadRangeTx(ctx, tx, sh.cursor, min(h.LastID, upTo), limit)
	if err != nil {
		return h, 0, nil, err
	}
	settled = sh.settled(h)
	if sh.fence > 0 {
		settled = min(settled, sh.fence)
	}
	return h, settled, evs, nil
}

// readShared is read for a partition of a partitioned consumer through its
// reads (see window.go): it takes what another pass of the consumer in this
// process found complete — only the shard's own partition's events, see
// window.take — or reads and shares what it finds complete.
//
// cut reports that the events came from a window that ends short of what
// had committed when it was read (the read's limit, a gap, a fence). A
// window that reached the head may still have been read before the newest
// commit the pass's lock saw; the pass ends with it all the same: that
// commit's notification wakes the consumer's router, whose read begins
// after it and which wakes the partition again if the commit holds events
// of its own (see router.go).
func (e *Dispatcher) readShared(ctx context.Context, tx pgx.Tx, c Consumer, sh *shard, limit int) (h eventstore.Horizon, settled int64, evs []eventstore.Event, cut bool, err error) {
	if sh.partitions == 0 {
		h, settled, evs, err = e.read(ctx, tx, sh, limit)
		return h, settled, evs, false, err
	}
	w, ok, publish := e.reads[c.Name].get(sh.cursor, time.Time{})
	if ok {
		evs, to := w.take(sh.cursor, sh.fence, limit, sh.partition, sh.partitions)
		return eventstore.Horizon{LastID: to}, to, evs, !w.head, nil
	}
	h, settled, evs, err = e.read(ctx, tx, sh, limit)
	if err != nil {
		publish(window{}, false)
		return h, settled, evs, false, err
	}
	publish(completeWindow(sh, evs, h, settled, limit).partitioned(c, sh.partitions), true)
	return h, settled, evs, false, nil
}

// completeWindow is the window a read after sh's cursor found complete:
// up to the settled point when everything read lies below it, else up to the
// last event deliverable.
func completeWindow(sh *shard, evs []eventstore.Event, h eventstore.Horizon, settled int64, limit int) window {
	deliver := deliverable(evs, sh.cursor, settled)
	to := sh.cursor
	switch {
	case len(deliver) == len(evs) && len(evs) < limit:
		to = max(sh.cursor, min(settled, h.LastID))
		if len(evs) > 0 {
			to = max(to, evs[len(evs)-1].ID)
		}
	case len(deliver) > 0:
		to = deliver[len(deliver)-1].ID
	}
	if sh.fence > 0 {
		to = min(to, sh.fence)
	}
	return window{from: sh.cursor, to: to, evs: deliver, head: len(deliver) == len(evs) && len(evs) < limit && (sh.fence == 0 || to < sh.fence)}
}

// settled is how far the log is settled for the shard as of h: every id up
// to it is committed or gone for good. With no event writer in flight that
// is the newest id; past a recorded gap whose writers have all ended, the
// gap's horizon; otherwise only the cursor.
func (sh shard) settled(h eventstore.Horizon) int64 {
	switch {
	case len(h.Writers) == 0:
		return h.LastID
	case sh.gapHorizon > sh.cursor && !overlaps(sh.gapWriters, h.Writers):
		return sh.gapHorizon
	}
	return sh.cursor
}

// deliverable is the prefix of evs (read after cursor) that may be
// delivered: it ends before the first event behind an unsettled gap — an
// event above settled that does not directly follow the one before it.
func deliverable(evs []eventstore.Event, cursor, settled int64) []eventstore.Event {
	for i, ev := range evs {
		prev := cursor
		if i > 0 {
			prev = evs[i-1].ID
		}
		if ev.ID > settled && ev.ID != prev+1 {
			return evs[:i] // an unsettled gap before ev: wait
		}
	}
	return evs
}

// lockShard reads the shard's row for a pass, locked unless the pass has
// nothing to do (see queries.passLock), and records in res what it found.
// ok is false when the pass ends here: the shard has caught up, another
// process has this turn, or the row is gone.
func (e *Dispatcher) lockShard(ctx context.Context, tx pgx.Tx, c Consumer, instance string, res *PassResult) (sh shard, ok bool, err error) {
	var (
		locked bool
		head   int64
	)
	err = tx.QueryRow(ctx, e.sql.passLock, c.Name, instance, c.Types).Scan(&locked, &head, &sh.pruned, &sh.cursor, &sh.status, &sh.attempts, &sh.lastError,
		&sh.gapHorizon, &sh.gapWriters, &sh.gapWait, &sh.updatedAt, &sh.prunedAck, &sh.partition, &sh.partitions, &sh.fence, &sh.parked, &sh.actions)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return sh, false, nil
	case err != nil:
		return sh, false, fmt.Errorf("lock %s/%s: %w", c.Name, instance, err)
	case !locked && sh.status == StatusIdle && sh.gapHorizon == 0 && sh.cursor >= head && !sh.expires() && !sh.actions:
		res.Locked, res.Cursor, res.Head, res.Parked = true, sh.cursor, head, len(sh.parked)
		return sh, false, nil
	case !locked && sh.status != StatusDisabled && sh.status != StatusExpired:
		return sh, false, nil
	}
	// Locked, or disabled or expired: the pass ends at the status check.
	res.Locked, res.Cursor, sh.head = true, sh.cursor, head
	return sh, true, nil
}

// apply hands the events that take accepts to the consumer in order and
// returns the events it applied, the cursor after the last one passed, how
// many applications failed, and the event that stopped it (zero for a batch
// or none) with its error (or the error of the last one skipped past, with
// SkipApplyErrors).
//
// Without careful, handlers run directly in tx and the first failure ends
// the apply (the caller then rolls back); with careful, each runs under a
// savepoint. A handler's panic is a failure like a returned error. Each
// handler call is recorded as running for the stuck report and bounded by
// the consumer's HandlerTimeout (see Dispatcher.call); the call timedOut
// (from the run before, nil if none) is not made again: it fails at once
// with its error.
func (e *Dispatcher) apply(ctx context.Context, tx *eventstore.Tx, c Consumer, instance string, cursor int64, evs []eventstore.Event,
	take func(eventstore.Event) bool, careful bool, timedOut *timeoutError,
) (applied []eventstore.Event, next int64, failures int, failedEv eventstore.Event, failed error) {
	next = cursor
	guard := author.Savepoint
	if !careful {
		guard = func(ctx context.Context, tx pgx.Tx, fn func(pgx.Tx) error) error { return fn(tx) }
	}
	if c.HandleBatch != nil {
		var wanted []eventstore.Event
		for _, ev := range evs {
			if take(ev) {
				wanted = append(wanted, ev)
			}
		}
		if len(wanted) > 0 {
			err := guard(ctx, tx, func(sp pgx.Tx) error {
				if timedOut != nil && timedOut.eventID == wanted[0].ID {
					return timedOut
				}
				return author.Run(e.cfg.Logger, func() error {
					return e.call(ctx, c, instance, wanted[0].ID, func(ctx context.Context) error { return c.HandleBatch(ctx, sp, wanted) })
				}, "consumer", c.Name, "firstEventId", wanted[0].ID, "events", len(wanted))
			})
			if err != nil {
				if !careful || !c.SkipApplyErrors {
					return nil, cursor, len(wanted), eventstore.Event{}, err
				}
				failed, failures = err, len(wanted)
			} else {
				applied = wanted
			}
		}
		if len(evs) > 0 {
			next = evs[len(evs)-1].ID
		}
		return applied, next, failures, eventstore.Event{}, failed
	}
	var db pgx.Tx = tx
	queued := c.Pipelined && !careful
	if queued {
		db = tx.Queued()
	}
	for _, ev := range evs {
		if take(ev) {
			err := guard(ctx, db, func(sp pgx.Tx) error {
				if timedOut != nil && timedOut.eventID == ev.ID {
					return timedOut
				}
				return author.Run(e.cfg.Logger, func() error {
					return e.call(ctx, c, instance, ev.ID, func(ctx context.Context) error { return c.Handle(ctx, sp, ev) })
				}, "consumer", c.Name, "eventId", ev.ID, "eventType", ev.Type)
			})
			if err != nil {
				err = fmt.Errorf("event %d (%s): %w", ev.ID, ev.Type, err)
				failures++
				if !careful || !c.SkipApplyErrors {
					return applied, next, failures, ev, err
				}
				failed = err
			} else {
				applied = append(applied, ev)
			}
		}
		next = ev.ID
	}
	if queued {
		if err := tx.Flush(ctx); err != nil {
			return nil, cursor, 1, eventstore.Event{}, fmt.Errorf("queued statements of the pass: %w", err)
		}
	}
	return applied, next, failures, eventstore.Event{}, failed
}

// startPass starts the span of a pass that has events to look at, linked to
// the spans that appended the events it delivers.
func (e *Dispatcher) startPass(ctx context.Context, name, instance string, deliver []eventstore.Event) (context.Context, trace.Span) {
	var links []trace.Link
	for _, ev := range deliver {
		if len(ev.Metadata.Headers) == 0 {
			continue
		}
		sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier(ev.Metadata.Headers)))
		if sc.IsValid() && (len(links) == 0 || !links[len(links)-1].SpanContext.Equal(sc)) {
			links = append(links, trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{attribute.Int64("kumiko.event_id", ev.ID)}})
		}
	}
	return e.tracer.Start(ctx, "consumer.pass "+name, trace.WithLinks(links...), trace.WithAttributes(
		attribute.String("kumiko.consumer", name), attribute.String("kumiko.instance_id", instance)))
}

// endPass records what the pass did on its span and ends it.
func endPass(span trace.Span, res *PassResult, err error) {
	span.SetAttributes(attribute.Int("kumiko.events", res.Handled), attribute.Float64("kumiko.gap_wait_seconds", res.GapWait.Seconds()))
	switch {
	case err != nil:
		span.SetStatus(codes.Error, err.Error())
	case res.Failed != nil:
		span.SetStatus(codes.Error, res.Failed.Error())
	}
	span.End()
}

func overlaps(a, b []string) bool {
	for _, x := range a {
		if slices.Contains(b, x) {
			return true
		}
	}
	return false
}

func overlapsNone(a, b []string) bool { return len(a) == 0 || !overlaps(a, b) }

// expiredError is the last error of an expired shard: what happened and the
// operator's choices.
func expiredError(sh shard) string {
	return fmt.Sprintf("events up to id %d of the types it consumes were pruned after its cursor %d and are gone; "+
		"it delivers nothing until you decide: skip it to resume with the oldest retained event after its cursor, "+
		"or rebuild its projection from the retained events", sh.pruned, sh.cursor)
}

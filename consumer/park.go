package consumer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/internal/author"
	"github.com/kumiko-go/kumiko/kumikotype"
)

// ParkedStream is a stream parked on a consumer's shard (see Consumer.Park).
type ParkedStream struct {
	// Name is the consumer's name.
	Name string `json:"name"`
	// Shard is the instance id of the shard the stream is parked on.
	Shard string `json:"shard"`
	// Stream is the stream's key (Consumer.PartitionKey; by default the
	// aggregate id).
	Stream string `json:"stream"`
	// EventID and EventType name the event that failed.
	EventID   int64  `json:"eventId"`
	EventType string `json:"eventType"`
	// LastError is its last failure.
	LastError string `json:"lastError"`
	// Attempts counts its failed attempts.
	Attempts int `json:"attempts"`
	// Since is when the stream was parked (or last failed a retry).
	Since time.Time `json:"since"`
	// Action is "retry" or "skip" while an operator's request waits for
	// the shard's next pass; "" otherwise.
	Action string `json:"action"`
}

// park records, in tx, that ev's stream is parked on the shard: the pass
// moves past ev, and the shard's passes pass the stream's later events over
// until an operator retries or skips.
func (e *Dispatcher) park(tx *eventstore.Tx, c Consumer, instance string, sh *shard, ev eventstore.Event) {
	key := c.key(ev)
	tx.Enqueue(func(err error) error { return fmt.Errorf("park %s/%s stream %s: %w", c.Name, instance, key, err) },
		e.sql.park, c.Name, instance, key, ev.ID, ev.Type, sh.lastError, sh.attempts)
	e.cfg.Logger.Error("event dispatcher: parked a stream: its event failed every attempt; the stream's later events wait, the others go on",
		"consumer", c.Name, "instance_id", instance, "stream", key, "eventId", ev.ID, "eventType", ev.Type, "attempts", sh.attempts, "err", sh.lastError)
	sh.parked = append(sh.parked, key)
	sh.attempts, sh.lastError = 0, ""
	e.metrics.parkedOne(c.Name)
}

// resolveParked carries out the operators' requests on the shard's parked
// streams, each under a savepoint: a retry hands the stream's events from
// the failing one up to the cursor to the handler, in order; a skip those
// after it. When they all apply, the stream is no longer parked (its later
// events follow in this pass); when one fails, the stream stays parked with
// that event and its error.
func (e *Dispatcher) resolveParked(ctx context.Context, tx *eventstore.Tx, c Consumer, instance string, sh *shard) error {
	rows, err := tx.Query(ctx, e.sql.parkedActions, c.Name, instance)
	if err != nil {
		return fmt.Errorf("parked streams of %s/%s: %w", c.Name, instance, err)
	}
	type request struct { // exported fields: pgx scans by position into them
		Stream  string
		EventID int64
		Action  string
	}
	reqs, err := pgx.CollectRows(rows, pgx.RowToStructByPos[request])
	if err != nil {
		return fmt.Errorf("parked streams of %s/%s: %w", c.Name, instance, err)
	}
	for _, r := range reqs {
		from := r.EventID - 1
		if r.Action == "skip" {
			from = r.EventID
		}
		var failedEv eventstore.Event
		err := author.Savepoint(ctx, tx, func(sp pgx.Tx) error {
			return e.streamEvents(ctx, tx, c, r.Stream, from, sh.cursor, func(ev eventstore.Event) error {
				err := author.Run(e.cfg.Logger, func() error {
					return e.call(ctx, c, instance, ev.ID, func(ctx context.Context) error { return c.Handle(ctx, sp, ev) })
				}, "consumer", c.Name, "eventId", ev.ID, "eventType", ev.Type)
				if err != nil {
					failedEv = ev
					return fmt.Errorf("event %d (%s): %w", ev.ID, ev.Type, err)
				}
				return nil
			})
		})
		switch {
		case err != nil && failedEv.ID == 0:
			return err // the database, not the handler
		case err != nil:
			e.cfg.Logger.Error("event dispatcher: a parked stream failed again; it stays parked",
				"consumer", c.Name, "instance_id", instance, "stream", r.Stream, "eventId", failedEv.ID, "err", err)
			_, err = tx.Exec(ctx, e.sql.parkFailed, c.Name, instance, r.Stream, failedEv.ID, failedEv.Type, author.Storable(err.Error(), 2000))
		default:
			e.cfg.Logger.Info("event dispatcher: a parked stream goes on", "consumer", c.Name, "instance_id", instance,
				"stream", r.Stream, "action", r.Action)
			_, err = tx.Exec(ctx, e.sql.unpark, c.Name, instance, r.Stream)
			sh.parked = removeString(sh.parked, r.Stream)
		}
		if err != nil {
			return fmt.Errorf("parked stream %s of %s/%s: %w", r.Stream, c.Name, instance, err)
		}
	}
	return nil
}

// streamEvents calls fn for every event of stream (by c's key) that c
// wants, with after < id ≤ upTo, in id order. It reads the log in pages.
func (e *Dispatcher) streamEvents(ctx context.Context, tx pgx.Tx, c Consumer, stream string, after, upTo int64, fn func(eventstore.Event) error) error {
	const page = 1000
	for after < upTo {
		evs, err := e.store.ReadRangeTx(ctx, tx, after, upTo, page)
		if err != nil {
			return err
		}
		for _, ev := range evs {
			if c.wants(ev.Type) && c.key(ev) == stream {
				if err := fn(ev); err != nil {
					return err
				}
			}
		}
		if len(evs) < page {
			return nil
		}
		after = evs[len(evs)-1].ID
	}
	return nil
}

func removeString(list []string, s string) []string {
	out := list[:0:0]
	for _, x := range list {
		if x != s {
			out = append(out, x)
		}
	}
	return out
}

// Parked lists the parked streams of the consumer name ("": of every
// consumer), by consumer and since when; an empty, non-nil slice when there
// is none.
func (o *Ops) Parked(ctx context.Context, name string) ([]ParkedStream, error) {
	rows, err := o.pool.Query(ctx, o.sql.parkedList, name)
	if err != nil {
		return nil, eventstore.TranslateError(fmt.Errorf("parked streams: %w", err))
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[ParkedStream])
	if err != nil {
		return nil, eventstore.TranslateError(fmt.Errorf("parked streams: %w", err))
	}
	if out == nil {
		out = []ParkedStream{}
	}
	return out, nil
}

// RetryParked asks for the parked stream of the consumer name to be
// retried: the next pass of its shard, in whichever process passes it,
// hands the stream's events from the one that failed onwards to the handler,
// in order, and unparks the stream when they all apply (it stays parked,
// with the new error, when one fails). It returns the stream as recorded
// with the request; a stream not parked answers an *Error wrapping
// ErrNotFound.
func (o *Ops) RetryParked(ctx context.Context, name, stream string) (ParkedStream, error) {
	return o.actParked(ctx, name, stream, "retry")
}

// SkipParked asks for the failing event of the parked stream to be
// skipped: the next pass of its shard hands the stream's events after it to
// the handler, in order, and unparks the stream. As RetryParked otherwise.
func (o *Ops) SkipParked(ctx context.Context, name, stream string) (ParkedStream, error) {
	return o.actParked(ctx, name, stream, "skip")
}

func (o *Ops) actParked(ctx context.Context, name, stream, action string) (ParkedStream, error) {
	rows, err := o.pool.Query(ctx, o.sql.parkedAct, name, stream, action)
	if err != nil {
		return ParkedStream{}, eventstore.TranslateError(fmt.Errorf("%s parked stream %s of %s: %w", action, stream, name, err))
	}
	p, err := pgx.CollectOneRow(rows, pgx.RowToStructByPos[ParkedStream])
	if errors.Is(err, pgx.ErrNoRows) {
		return ParkedStream{}, newError(codeNotFound, kumikotype.ReasonStreamNotParked,
			fmt.Sprintf("consumer %s has no parked stream %s", name, stream),
			fmt.Errorf("%s parked %s/%s: %w", action, name, stream, ErrNotFound)).
			With("consumer", name).With("stream", stream)
	}
	if err != nil {
		return ParkedStream{}, eventstore.TranslateError(fmt.Errorf("%s parked stream %s of %s: %w", action, stream, name, err))
	}
	return p, nil
}

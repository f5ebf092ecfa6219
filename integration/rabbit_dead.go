package integration

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"
)

// DeadLetters lists, retries and drops the messages the app's handlers
// failed on every attempt: kept in the database by the in-process
// transport, in <queue>.dead by RabbitMQ. handler "" means every handler;
// over RabbitMQ a message is dead for all of the app's handlers at once.
type DeadLetters interface {
	// List returns up to limit dead messages, oldest first.
	List(ctx context.Context, limit int) ([]DeadMessage, error)
	// Retry hands the message to its handlers once more.
	Retry(ctx context.Context, id uuid.UUID, handler string) error
	// Drop deletes it and returns how many it deleted; ErrDeadNotFound when
	// none matched.
	Drop(ctx context.Context, id uuid.UUID, handler string) (int64, error)
}

// Dead returns the app's dead letters, where its transport keeps them.
func (s *Service) Dead() DeadLetters {
	if r, ok := s.cfg.Transport.(*Rabbit); ok {
		return rabbitDead{r}
	}
	return localDead{s}
}

// localDead are the in-process transport's dead messages.
type localDead struct{ s *Service }

func (d localDead) List(ctx context.Context, limit int) ([]DeadMessage, error) {
	return newDeadStore(d.s.store).List(ctx, limit)
}

func (d localDead) Retry(ctx context.Context, id uuid.UUID, handler string) error {
	return d.s.retry(ctx, id, handler)
}

func (d localDead) Drop(ctx context.Context, id uuid.UUID, handler string) (int64, error) {
	return newDeadStore(d.s.store).Drop(ctx, id, handler)
}

// rabbitDead are the messages in <queue>.dead.
type rabbitDead struct{ r *Rabbit }

// walk takes the dead queue's messages one by one, at most limit (0 = all
// there are now), and calls fn on each; fn acks the deliveries it settles.
// walk puts the others back before it returns and waits until the broker
// has them again, so the next walk sees them.
func (d rabbitDead) walk(limit int, fn func(amqp.Delivery, DeadMessage) (settled bool, err error)) error {
	conn, err := amqp.Dial(d.r.cfg.URL)
	if err != nil {
		return fmt.Errorf("rabbitmq: %w", err)
	}
	defer func() { _ = conn.Close() }()
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("rabbitmq: %w", err)
	}
	depth := func() (int, error) {
		q, err := ch.QueueDeclarePassive(d.r.DeadQueue(), true, false, false, false, amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeQuorum})
		if err != nil {
			return 0, fmt.Errorf("rabbitmq: %s: %w", d.r.DeadQueue(), err)
		}
		return q.Messages, nil
	}
	n, err := depth()
	if err != nil {
		return err
	}
	if limit > 0 {
		n = min(n, limit)
	}
	var kept []amqp.Delivery
	defer func() {
		for _, del := range kept {
			_ = del.Nack(false, true)
		}
	}()
	for range n {
		del, ok, err := ch.Get(d.r.DeadQueue(), false)
		if err != nil || !ok {
			return err
		}
		dm := d.r.deadOf(del)
		settled, err := fn(del, dm)
		if !settled {
			kept = append(kept, del)
		}
		if err != nil {
			return err
		}
	}
	// Put the others back and wait until the queue counts them again.
	want := 0
	if len(kept) > 0 {
		for _, del := range kept {
			if err := del.Nack(false, true); err != nil {
				return err
			}
		}
		want, kept = len(kept), nil
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
			if got, err := depth(); err != nil || got >= want {
				return err
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	return nil
}

// deadOf is what a message in <Queue>.dead tells of itself: its id, type
// and all else it could be read with, its deliveries and its last error.
// The app keeps a message dead with both in its headers; one the broker
// dead-lettered (delivered MaxDeliveries times without being settled: the
// receiver stopped or lost its connection each time) has the failures the
// app recorded before, if any.
func (r *Rabbit) deadOf(del amqp.Delivery) DeadMessage {
	var dm DeadMessage
	dm.Message, _ = message(del) // one that breaks the wire format lists with what it has
	if del.MessageId != dm.Message.ID.String() {
		dm.RawID = del.MessageId
	}
	dm.DeadAt, _ = deathTime(del)
	dm.Attempts = count(del.Headers[headerAttempts])
	last, _ := text(del.Headers[headerError])
	if _, kept := del.Headers[headerDeadAt]; kept {
		dm.LastError = last
		return dm
	}
	dm.Attempts += r.cfg.MaxDeliveries
	dm.LastError = fmt.Sprintf("%s: delivered %d times without being settled (the receiver stopped or lost its connection each time)",
		codeInternal, r.cfg.MaxDeliveries)
	if last != "" {
		dm.LastError += "; the failure before: " + last
	}
	return dm
}

// deathTime is when the broker dead-lettered d, or the app kept it dead.
func deathTime(d amqp.Delivery) (time.Time, bool) {
	if t, ok := d.Headers[headerDeadAt].(time.Time); ok {
		return t, true
	}
	deaths, _ := d.Headers["x-death"].([]any)
	for _, x := range deaths {
		if t, ok := x.(amqp.Table)["time"].(time.Time); ok {
			return t, true
		}
	}
	return time.Time{}, false
}

func (d rabbitDead) List(_ context.Context, limit int) ([]DeadMessage, error) {
	var out []DeadMessage
	err := d.walk(limit, func(_ amqp.Delivery, dm DeadMessage) (bool, error) {
		out = append(out, dm)
		return false, nil
	})
	return out, err
}

func (d rabbitDead) Retry(ctx context.Context, id uuid.UUID, _ string) error {
	found := false
	err := d.walk(0, func(del amqp.Delivery, dm DeadMessage) (bool, error) {
		if dm.Message.ID != id {
			return false, nil
		}
		found = true
		// Back into the app's queue, as a new message with a fresh count.
		if err := d.r.republish(ctx, del); err != nil {
			return false, err
		}
		return true, del.Ack(false)
	})
	if err == nil && !found {
		err = fmt.Errorf("%w: %s", ErrDeadNotFound, id)
	}
	return err
}

func (d rabbitDead) Drop(_ context.Context, id uuid.UUID, _ string) (int64, error) {
	var n int64
	err := d.walk(0, func(del amqp.Delivery, dm DeadMessage) (bool, error) {
		if dm.Message.ID != id {
			return false, nil
		}
		n++
		return true, del.Ack(false)
	})
	if err == nil && n == 0 {
		err = fmt.Errorf("%w: %s", ErrDeadNotFound, id)
	}
	return n, err
}

// republish sends a dead message, as it was published, straight back to
// the app's queue it came from (see originOf, through the default
// exchange) with no deliveries counted, and waits for the broker's
// confirm.
func (r *Rabbit) republish(ctx context.Context, del amqp.Delivery) error {
	p := copyOf(del, nil, 0)
	return r.send(ctx, r.originOf(del), p)
}

// originOf is the queue of the app a dead message came from: the ordered
// queue when the app or the broker dead-lettered it from there, else the
// app's queue.
func (r *Rabbit) originOf(d amqp.Delivery) string {
	q, _ := text(d.Headers[headerQueue])
	if deaths, _ := d.Headers["x-death"].([]any); q == "" && len(deaths) > 0 {
		latest, _ := deaths[0].(amqp.Table)
		q, _ = text(latest["queue"])
	}
	if q == r.OrderedQueue() {
		return q
	}
	return r.cfg.Queue
}

// send publishes p to the queue through the default exchange and waits
// for the broker's confirm.
func (r *Rabbit) send(ctx context.Context, queue string, p amqp.Publishing) error {
	r.pubMu.Lock()
	defer r.pubMu.Unlock()
	if err := r.publishLocked(ctx, nil); err != nil {
		r.dropPublisher()
		return err
	}
	dc, err := r.pubCh.PublishWithDeferredConfirmWithContext(ctx, "", queue, false, false, p)
	if err == nil {
		var ok bool
		if ok, err = dc.WaitContext(ctx); err == nil && !ok {
			err = fmt.Errorf("the broker did not confirm message %s", p.MessageId)
		}
	}
	if err != nil {
		r.dropPublisher()
	}
	return err
}

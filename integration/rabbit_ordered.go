package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/kumiko-go/kumiko/feature"
)

// lanes run the ordered queue's deliveries: one lane per key, which
// handles its deliveries one after the other in the order the queue
// delivered them, while the lanes of other keys run in parallel, at most
// slots handlers at once. A lane whose message fails waits (see
// deliverInOrder) and holds back its key only; the window of
// unacknowledged messages (RabbitConfig.OrderedPrefetch) is what the
// other keys pass it in.
type lanes struct {
	mu sync.Mutex
	// waiting are the deliveries of each key with a running lane, the one
	// being handled first.
	waiting map[string][]amqp.Delivery
	slots   chan struct{}
}

func newLanes(slots int) *lanes {
	return &lanes{waiting: map[string][]amqp.Delivery{}, slots: make(chan struct{}, slots)}
}

// add queues d on key's lane, starting the lane (counted in running) when
// the key has none; run handles one delivery. A lane stops, leaving its
// remaining deliveries unsettled for the broker to return, once ctx ends.
func (l *lanes) add(ctx context.Context, key string, d amqp.Delivery, running *sync.WaitGroup, run func(amqp.Delivery)) {
	l.mu.Lock()
	queued, busy := l.waiting[key]
	l.waiting[key] = append(queued, d)
	l.mu.Unlock()
	if busy {
		return
	}
	running.Add(1)
	go func() {
		defer running.Done()
		for {
			l.mu.Lock()
			next := l.waiting[key]
			if len(next) == 0 || ctx.Err() != nil {
				delete(l.waiting, key)
				l.mu.Unlock()
				return
			}
			d := next[0]
			l.mu.Unlock()
			run(d)
			l.mu.Lock()
			l.waiting[key] = l.waiting[key][1:]
			l.mu.Unlock()
		}
	}()
}

// acquire takes a slot to run a handler in, unless ctx ends first.
func (l *lanes) acquire(ctx context.Context) bool {
	select {
	case l.slots <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

func (l *lanes) release() { <-l.slots }

// deliverInOrder handles one delivery of key's lane, received on queue: ack on success. A failed one is not sent to wait in the broker,
// which would let the later messages of its key pass it: it stays
// unacknowledged — in the broker, which returns it to the queue should
// the process go — while its lane waits (RetryBackoff, doubling, with
// jitter) and runs it again; after MaxDeliveries, or at once for a
// message that breaks the wire format or its contract, it is kept dead
// and the lane goes on with the next message. When ctx ends (a stop or a
// lost connection) a waiting message is left to the broker.
func (r *Rabbit) deliverInOrder(ctx, work context.Context, l *lanes, queue, key string, d amqp.Delivery, handle func(context.Context, feature.Message) error) {
	m, broken := message(d)
	if broken != nil {
		broken = invalid(fmt.Sprintf("message %s of %s", m.ID, m.Type), broken)
	}
	for attempt := failedDeliveries(d) + 1; ; attempt++ {
		if !l.acquire(ctx) {
			return
		}
		end := r.deliveries.Begin("message " + d.Type + " " + d.MessageId)
		err := broken
		if err == nil {
			err = handle(withAttempt(work, attempt), m)
		}
		log := r.cfg.Logger.With("queue", queue, "message_id", m.ID, "type", m.Type, "key", key, "attempt", attempt)
		var settle error
		switch {
		case err == nil:
			settle = d.Ack(false)
		case work.Err() != nil:
			// The stop gave up on it: the broker returns it.
		case final(err) || attempt >= r.cfg.MaxDeliveries:
			log.Warn("rabbitmq: the message is kept dead; its key goes on", "dead_queue", r.DeadQueue(), "err", err)
			if settle = r.keepDead(work, queue, d, err, attempt); settle == nil {
				settle = d.Ack(false)
			}
		}
		end()
		l.release()
		if err == nil || work.Err() != nil || final(err) || attempt >= r.cfg.MaxDeliveries {
			if settle != nil && work.Err() == nil {
				log.Warn("rabbitmq: settling the message failed; the broker returns it when the connection goes", "err", settle)
			}
			return
		}
		pause := r.backoff(attempt)
		pause += rand.N(pause/5 + 1)
		log.Warn("rabbitmq: handling failed; the message is handled again later, its key waits", "wait", pause, "err", err)
		if wait(ctx, pause) != nil {
			return
		}
	}
}

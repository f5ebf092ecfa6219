package integration

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/internal/lifecycle"
)

// Defaults of RabbitConfig.
const (
	DefaultRabbitURL     = "amqp://guest:guest@127.0.0.1:5672/"
	DefaultExchange      = "kumiko.events"
	DefaultMaxDeliveries = 5
	DefaultPrefetch      = 16
	// DefaultOrderedPrefetch is RabbitConfig.OrderedPrefetch's default.
	DefaultOrderedPrefetch = 256
	// DefaultMaxRetryBackoff caps the wait before a redelivery.
	DefaultMaxRetryBackoff = time.Minute
)

// RabbitConfig configures the RabbitMQ transport. Zero values take the
// defaults but for Queue.
type RabbitConfig struct {
	// URL of the broker; default DefaultRabbitURL.
	URL string
	// Exchange is the direct exchange every app publishes to, with the
	// contract as routing key; default "kumiko.events".
	Exchange string
	// Queue is the app's durable quorum queue (the app's name): its
	// instances share it, each other app has its own. It is bound to
	// exactly the contracts the app handles, so the broker drops what no
	// app subscribed to. Required.
	Queue string
	// MaxDeliveries is how often a message is delivered before it moves to
	// <Queue>.dead; default 5.
	MaxDeliveries int
	// RetryBackoff is how long a message whose handling failed waits in the
	// broker before it is delivered again, doubling after each further
	// failure up to MaxRetryBackoff, each wait lengthened by a random part
	// of up to a fifth (jitter); default DefaultRetryBackoff (100ms). The
	// message waits in a queue <Queue>.retry.<wait> of its own, never in a
	// process's memory.
	RetryBackoff time.Duration
	// MaxRetryBackoff caps the wait; default DefaultMaxRetryBackoff (1m).
	MaxRetryBackoff time.Duration
	// Prefetch is the most unacknowledged messages one instance works on
	// at once; default 16. It also bounds how many ordered messages (of
	// different keys) run at once.
	Prefetch int
	// OrderedPrefetch is the most unacknowledged messages of the ordered
	// queue (<Queue>.ordered, see feature.Ordered) the active instance
	// holds: the window in which messages of other keys pass a key that
	// waits for a failing message. Default DefaultOrderedPrefetch (256).
	OrderedPrefetch int
	// Logger default slog.Default().
	Logger *slog.Logger
}

// Rabbit is the RabbitMQ transport. Publishing uses a connection of its
// own with publisher confirms; receiving a second one. Both recover by
// themselves: a failed publish drops its connection and the relay's next
// try opens a new one; the receiver reconnects with backoff.
type Rabbit struct {
	cfg RabbitConfig

	pubMu   sync.Mutex
	pubConn *amqp.Connection
	pubCh   *amqp.Channel

	mu sync.Mutex
	// cancel ends receiving (a stop begins); cancelDeliveries the contexts
	// of the handlers running (the stop gives up on them).
	cancel, cancelDeliveries context.CancelFunc
	recvConn                 *amqp.Connection // the receiver's, while it has one
	wg                       sync.WaitGroup
	deliveries               lifecycle.Work // the deliveries being handled
}

var _ Transport = (*Rabbit)(nil)

// NewRabbit returns the transport; it connects on first use.
func NewRabbit(cfg RabbitConfig) (*Rabbit, error) {
	if cfg.Queue == "" {
		return nil, errors.New("integration: RabbitConfig.Queue is required (the app's name)")
	}
	if cfg.URL == "" {
		cfg.URL = DefaultRabbitURL
	}
	if cfg.Exchange == "" {
		cfg.Exchange = DefaultExchange
	}
	if cfg.MaxDeliveries <= 0 {
		cfg.MaxDeliveries = DefaultMaxDeliveries
	}
	if cfg.Prefetch <= 0 {
		cfg.Prefetch = DefaultPrefetch
	}
	if cfg.OrderedPrefetch <= 0 {
		cfg.OrderedPrefetch = DefaultOrderedPrefetch
	}
	if cfg.RetryBackoff <= 0 {
		cfg.RetryBackoff = DefaultRetryBackoff
	}
	if cfg.MaxRetryBackoff <= 0 {
		cfg.MaxRetryBackoff = DefaultMaxRetryBackoff
	}
	cfg.MaxRetryBackoff = max(cfg.MaxRetryBackoff, cfg.RetryBackoff)
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Rabbit{cfg: cfg}, nil
}

// DeadQueue is where messages go after MaxDeliveries: <Queue>.dead.
func (r *Rabbit) DeadQueue() string { return r.cfg.Queue + ".dead" }

// OrderedQueue is the queue of the app's ordered handlers (see
// feature.Ordered): <Queue>.ordered, a single-active-consumer quorum queue.
func (r *Rabbit) OrderedQueue() string { return r.cfg.Queue + ".ordered" }

// route is what one of the app's queues receives and how: the contracts
// bound to it and the handling of their messages.
type route struct {
	queue  string
	types  []string
	handle func(context.Context, feature.Message) error
	// key, set on the ordered queue's route, is the ordering key of a
	// message; messages of one key are handled one after the other, in
	// the order the queue delivers them.
	key func(feature.Message) string
}

// routes are the queues an app receives on: the app's queue for its
// handlers, and the ordered queue for its ordered ones; a queue with no
// contracts is left out.
type routes []route

func (rs routes) empty() bool {
	for _, rt := range rs {
		if len(rt.types) > 0 {
			return false
		}
	}
	return true
}

// Publish sends msgs persistently to the exchange, routed by type, and
// waits for the broker to confirm every one.
func (r *Rabbit) Publish(ctx context.Context, msgs []feature.Message) error {
	r.pubMu.Lock()
	defer r.pubMu.Unlock()
	if err := r.publishLocked(ctx, msgs); err != nil {
		r.dropPublisher()
		return fmt.Errorf("rabbitmq publish: %w", err)
	}
	return nil
}

func (r *Rabbit) publishLocked(ctx context.Context, msgs []feature.Message) error {
	if r.pubCh == nil || r.pubCh.IsClosed() {
		r.dropPublisher()
		conn, err := amqp.Dial(r.cfg.URL)
		if err != nil {
			return err
		}
		ch, err := conn.Channel()
		if err == nil {
			err = ch.Confirm(false)
		}
		if err == nil {
			err = r.declareExchange(ch)
		}
		if err != nil {
			_ = conn.Close()
			return err
		}
		r.pubConn, r.pubCh = conn, ch
	}
	pending := make([]*amqp.DeferredConfirmation, 0, len(msgs))
	for _, m := range msgs {
		dc, err := r.pubCh.PublishWithDeferredConfirmWithContext(ctx, r.cfg.Exchange, m.Type, false, false, publishing(m))
		if err != nil {
			return err
		}
		pending = append(pending, dc)
	}
	for i, dc := range pending {
		ok, err := dc.WaitContext(ctx)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("the broker did not confirm message %s", msgs[i].ID)
		}
	}
	return nil
}

func (r *Rabbit) dropPublisher() {
	if r.pubConn != nil {
		_ = r.pubConn.Close()
	}
	r.pubConn, r.pubCh = nil, nil
}

func (r *Rabbit) declareExchange(ch *amqp.Channel) error {
	return ch.ExchangeDeclare(r.cfg.Exchange, amqp.ExchangeDirect, true, false, false, false, nil)
}

// Start declares the exchange, the app's quorum queue with its dead-letter
// queue and bindings for types, then consumes it until Stop, reconnecting
// whenever the connection or channel is lost. With no types it only
// publishes. It returns the error of the first declaration, so a broker
// that is not there fails the app's start. ctx bounds only the start:
// receiving, and the handlers' contexts, last until Stop.
func (r *Rabbit) Start(ctx context.Context, types []string, handle func(context.Context, feature.Message) error) error {
	return r.start(ctx, routes{{queue: r.cfg.Queue, types: types, handle: handle}})
}

// start receives on rs (see Start).
func (r *Rabbit) start(ctx context.Context, rs routes) error {
	if rs.empty() {
		return nil
	}
	conn, chs, err := r.openReceiver(rs)
	if err != nil {
		return fmt.Errorf("rabbitmq: %w", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cancel != nil {
		_ = conn.Close()
		return errors.New("rabbitmq: already started")
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	workCtx, cancelDeliveries := context.WithCancel(context.WithoutCancel(ctx))
	r.cancel, r.cancelDeliveries = cancel, cancelDeliveries
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		r.receive(runCtx, workCtx, rs, conn, chs)
	}()
	return nil
}

// openReceiver connects, declares the topology and opens a channel for
// each route (nil for one with no contracts).
func (r *Rabbit) openReceiver(rs routes) (*amqp.Connection, []*amqp.Channel, error) {
	conn, err := amqp.Dial(r.cfg.URL)
	if err != nil {
		return nil, nil, err
	}
	chs := make([]*amqp.Channel, len(rs))
	err = r.declare(conn, rs)
	for i := 0; i < len(rs) && err == nil; i++ {
		if len(rs[i].types) == 0 {
			continue
		}
		if chs[i], err = conn.Channel(); err == nil {
			err = chs[i].Qos(r.prefetch(rs[i]), 0, false)
		}
	}
	if err != nil {
		_ = conn.Close()
		return nil, nil, err
	}
	return conn, chs, nil
}

func (r *Rabbit) prefetch(rt route) int {
	if rt.key != nil {
		return r.cfg.OrderedPrefetch
	}
	return r.cfg.Prefetch
}

// declare sets up, on a channel of its own, the exchange, <Queue>.dead,
// the retry queues, and each route's queue with its bindings.
func (r *Rabbit) declare(conn *amqp.Connection, rs routes) error {
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	defer func() { _ = ch.Close() }()
	if err := r.declareExchange(ch); err != nil {
		return err
	}
	quorum := amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeQuorum}
	if _, err := ch.QueueDeclare(r.DeadQueue(), true, false, false, false, quorum); err != nil {
		return err
	}
	for _, rt := range rs {
		if len(rt.types) == 0 {
			continue
		}
		args := amqp.Table{
			amqp.QueueTypeArg: amqp.QueueTypeQuorum,
			// The broker counts returns: after MaxDeliveries-1 of them, the
			// MaxDeliveries-th failure dead-letters the message.
			"x-delivery-limit":          int32(r.cfg.MaxDeliveries - 1),
			"x-dead-letter-exchange":    "",
			"x-dead-letter-routing-key": r.DeadQueue(),
		}
		if rt.key != nil {
			// One instance at a time consumes it, in queue order; the
			// broker hands it to a standing-by one when that one goes.
			args["x-single-active-consumer"] = true
		}
		if _, err := ch.QueueDeclare(rt.queue, true, false, false, false, args); err != nil {
			return err
		}
		for _, q := range r.retryQueues() {
			if rt.key != nil {
				break // ordered messages wait in their queue, not in a retry queue
			}
			if err := r.declareRetryQueue(ch, q); err != nil {
				return err
			}
		}
		for _, t := range rt.types {
			if err := ch.QueueBind(rt.queue, t, r.cfg.Exchange, false, nil); err != nil {
				return err
			}
		}
	}
	return nil
}

// unbind removes queue's bindings of types, on a connection of its own.
func (r *Rabbit) unbind(queue string, types []string) error {
	if len(types) == 0 {
		return nil
	}
	conn, err := amqp.Dial(r.cfg.URL)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	for _, t := range types {
		var aerr *amqp.Error
		if err := ch.QueueUnbind(queue, t, r.cfg.Exchange, nil); errors.As(err, &aerr) && aerr.Code == amqp.NotFound {
			return nil // the queue or exchange is gone, and its bindings with it
		} else if err != nil {
			return err
		}
	}
	return nil
}

// receive consumes until ctx ends, reopening the connection after a loss;
// handlers run on work. When ctx ends it leaves the connection open for
// Stop, which closes it once the handlers running have settled their
// messages.
func (r *Rabbit) receive(ctx, work context.Context, rs routes, conn *amqp.Connection, chs []*amqp.Channel) {
	var ceiling time.Duration
	for {
		if conn != nil {
			r.setReceiver(conn)
			if err := r.consume(ctx, work, conn, chs, rs); err != nil && ctx.Err() == nil {
				r.cfg.Logger.Warn("rabbitmq: receiving stopped; reconnecting", "queue", r.cfg.Queue, "err", err)
			}
			if ctx.Err() != nil {
				return
			}
			r.setReceiver(nil)
			_ = conn.Close()
			conn = nil
		}
		if ctx.Err() != nil {
			return
		}
		ceiling = min(max(2*ceiling, 100*time.Millisecond), 5*time.Second)
		if wait(ctx, ceiling/2) != nil {
			return
		}
		var err error
		if conn, chs, err = r.openReceiver(rs); err != nil {
			r.cfg.Logger.Warn("rabbitmq: reconnect failed", "queue", r.cfg.Queue, "err", err)
			continue
		}
		if ctx.Err() != nil { // stopped while connecting
			_ = conn.Close()
			return
		}
		ceiling = 0
	}
}

// setReceiver records the receiver's connection for Stop to close.
func (r *Rabbit) setReceiver(conn *amqp.Connection) {
	r.mu.Lock()
	r.recvConn = conn
	r.mu.Unlock()
}

// consume handles the routes' deliveries on work until a channel or the
// connection closes or ctx ends: the app queue's up to Prefetch at once,
// the ordered queue's one key after the other (see lanes). After a loss it
// waits for the handlers it started (or for ctx) before it returns, so that
// a new connection never runs more than Prefetch at once nor one key twice;
// when ctx ends it returns at once, and Stop waits for them.
func (r *Rabbit) consume(ctx, work context.Context, conn *amqp.Connection, chs []*amqp.Channel, rs routes) error {
	var plain, ordered <-chan amqp.Delivery
	var plainRoute, orderedRoute route
	for i, rt := range rs {
		if chs[i] == nil {
			continue
		}
		consumeCtx := ctx
		if rt.key != nil {
			// The ordered queue's consumer stays registered until the
			// connection closes: cancelling it at a stop would hand the
			// queue to a standing-by instance while this one still holds
			// earlier messages of some keys, which the broker returns only
			// when the connection goes — after the other instance took
			// later ones.
			consumeCtx = context.WithoutCancel(ctx)
		}
		deliveries, err := chs[i].ConsumeWithContext(consumeCtx, rt.queue, "", false, false, false, false, nil)
		if err != nil {
			return err
		}
		if rt.key != nil {
			ordered, orderedRoute = deliveries, rt
		} else {
			plain, plainRoute = deliveries, rt
		}
	}
	closed := conn.NotifyClose(make(chan *amqp.Error, 1))
	var inflight sync.WaitGroup
	laneCtx, stopLanes := context.WithCancel(ctx)
	defer stopLanes()
	lanes := newLanes(r.cfg.Prefetch)
	lost := func(err error) error {
		stopLanes()
		select {
		case <-lifecycle.Done(&inflight):
		case <-ctx.Done():
		}
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-closed:
			if err == nil {
				return lost(errors.New("connection closed"))
			}
			return lost(err)
		case d, ok := <-plain:
			if !ok {
				if ctx.Err() != nil {
					return nil
				}
				return lost(errors.New("delivery channel closed"))
			}
			inflight.Add(1)
			end := r.deliveries.Begin("message " + d.Type + " " + d.MessageId)
			go func() {
				defer inflight.Done()
				defer end()
				// Stop lets a started handler finish and settle its message
				// until its deadline, and cancels work only then.
				r.deliver(work, plainRoute.queue, d, plainRoute.handle)
			}()
		case d, ok := <-ordered:
			if !ok {
				if ctx.Err() != nil {
					return nil
				}
				return lost(errors.New("delivery channel closed"))
			}
			m, _ := message(d)
			key := orderedRoute.key(m)
			if key == "" {
				key = "message " + m.ID.String() // ordered with no other
			}
			lanes.add(laneCtx, key, d, &inflight, func(d amqp.Delivery) {
				r.deliverInOrder(laneCtx, work, lanes, orderedRoute.queue, key, d, orderedRoute.handle)
			})
		}
	}
}

// deliver handles one delivery: ack on success. A failed one is sent to
// wait in the broker (see RabbitConfig.RetryBackoff) and acked, and after
// MaxDeliveries it is kept dead in <Queue>.dead with its last error. A
// message that breaks the wire format or its contract, or one of a
// contract version the app does not know, is kept dead at once. When the
// message cannot be settled either way, it goes back to the queue (the
// broker counts it and dead-letters it at MaxDeliveries).
func (r *Rabbit) deliver(ctx context.Context, queue string, d amqp.Delivery, handle func(context.Context, feature.Message) error) {
	attempt := failedDeliveries(d) + 1
	m, err := message(d)
	if err != nil {
		err = invalid(fmt.Sprintf("message %s of %s", m.ID, m.Type), err)
	} else {
		err = handle(withAttempt(ctx, attempt), m)
	}
	log := r.cfg.Logger.With("queue", r.cfg.Queue, "message_id", m.ID, "type", m.Type, "attempt", attempt)
	var settle error
	switch {
	case err == nil:
		_ = d.Ack(false)
		return
	case ctx.Err() != nil:
		settle = ctx.Err() // the stop gave up on it: not the handler's failure
	case final(err) || attempt >= r.cfg.MaxDeliveries:
		log.Warn("rabbitmq: the message is kept dead", "dead_queue", r.DeadQueue(), "err", err)
		settle = r.keepDead(ctx, queue, d, err, attempt)
	default:
		wait := r.backoff(attempt)
		log.Warn("rabbitmq: handling failed; the message is delivered again later", "wait", wait, "err", err)
		settle = r.retryLater(ctx, d, err, attempt, wait)
	}
	if settle != nil {
		if ctx.Err() == nil {
			log.Warn("rabbitmq: settling the message failed; it goes back to the queue", "err", settle)
		}
		_ = d.Nack(false, true)
		return
	}
	_ = d.Ack(false)
}

// failedDeliveries is how often d was delivered before: the failures the
// app recorded (kumiko-attempts) plus the broker's returns since (quorum
// queues count them in x-delivery-count).
func failedDeliveries(d amqp.Delivery) int {
	n := count(d.Headers[headerAttempts]) + count(d.Headers["x-delivery-count"])
	if n == 0 && d.Redelivered {
		return 1
	}
	return n
}

// backoff is the wait after the attempt-th failed delivery: RetryBackoff,
// doubling, at most MaxRetryBackoff.
func (r *Rabbit) backoff(attempt int) time.Duration {
	d := r.cfg.RetryBackoff
	for i := 1; i < attempt && d < r.cfg.MaxRetryBackoff; i++ {
		d *= 2
	}
	return min(d, r.cfg.MaxRetryBackoff)
}

// retryQueues are the queues failed messages wait in, one per distinct
// wait of the deliveries 1 to MaxDeliveries-1.
func (r *Rabbit) retryQueues() []string {
	var out []string
	for a := 1; a < r.cfg.MaxDeliveries; a++ {
		if q := r.retryQueue(r.backoff(a)); !slices.Contains(out, q) {
			out = append(out, q)
		}
	}
	return out
}

// retryQueue is where a message waits for wait: <Queue>.retry.<wait>.
func (r *Rabbit) retryQueue(wait time.Duration) string {
	return r.cfg.Queue + ".retry." + wait.String()
}

// declareRetryQueue declares a durable queue without consumers whose
// messages, when their expiration passes, the broker dead-letters back
// into the app's queue.
func (r *Rabbit) declareRetryQueue(ch *amqp.Channel, name string) error {
	_, err := ch.QueueDeclare(name, true, false, false, false, amqp.Table{
		amqp.QueueTypeArg:           amqp.QueueTypeClassic,
		"x-dead-letter-exchange":    "",
		"x-dead-letter-routing-key": r.cfg.Queue,
	})
	return err
}

// retryLater sends d to wait in its retry queue for wait plus jitter, with
// the failures so far and the error in its headers, and waits for the
// broker's confirm; the caller then acks d.
func (r *Rabbit) retryLater(ctx context.Context, d amqp.Delivery, cause error, attempt int, wait time.Duration) error {
	p := copyOf(d, cause, attempt)
	wait += rand.N(wait/5 + 1)
	p.Expiration = strconv.FormatInt(max(wait.Milliseconds(), 1), 10)
	return r.send(ctx, r.retryQueue(r.backoff(attempt)), p)
}

// keepDead puts d, received on queue, into <Queue>.dead with cause, the
// deliveries and queue in its headers, through the default exchange, and waits for the broker's
// confirm; the caller then acks d.
func (r *Rabbit) keepDead(ctx context.Context, queue string, d amqp.Delivery, cause error, attempt int) error {
	p := copyOf(d, cause, attempt)
	p.Headers[headerDeadAt] = time.Now().UTC()
	p.Headers[headerQueue] = queue
	return r.send(ctx, r.DeadQueue(), p)
}

// copyOf is d as published, without the broker's headers, with the
// deliveries so far and the last error (none when cause is nil: a fresh
// start).
func copyOf(d amqp.Delivery, cause error, attempts int) amqp.Publishing {
	h := amqp.Table{}
	for k, v := range d.Headers {
		if !strings.HasPrefix(k, "x-") && k != headerDeadAt && k != headerAttempts && k != headerError && k != headerQueue {
			h[k] = v
		}
	}
	if cause != nil {
		h[headerAttempts], h[headerError] = int32(min(attempts, math.MaxInt32)), cause.Error()
	}
	return amqp.Publishing{
		Headers: h, ContentType: d.ContentType, ContentEncoding: d.ContentEncoding, DeliveryMode: amqp.Persistent,
		CorrelationId: d.CorrelationId, MessageId: d.MessageId, Timestamp: d.Timestamp, Type: contractOf(d), Body: d.Body,
	}
}

// Stop stops receiving at once and waits until ctx ends for the handlers
// running to settle their messages. When ctx ends first it cancels their
// contexts, waits until lifecycle.GiveUp(ctx), and returns an error
// wrapping ctx's that names the messages it gave up on. Either way it then
// closes the connections: the broker returns a message whose handler did
// not settle it to the queue, to be delivered again (the inbox skips the
// handlers that had committed).
func (r *Rabbit) Stop(ctx context.Context) error {
	r.mu.Lock()
	cancel, cancelDeliveries := r.cancel, r.cancelDeliveries
	r.cancel = nil
	r.mu.Unlock()
	var err error
	if cancel != nil {
		cancel()
		err = r.deliveries.Drain(ctx, "rabbitmq: abandoned the handling of", cancelDeliveries)
		if !lifecycle.Await(ctx, lifecycle.Done(&r.wg), cancelDeliveries) {
			err = errors.Join(err, fmt.Errorf("rabbitmq: the receiver did not stop: %w", ctx.Err()))
		}
		cancelDeliveries()
		r.mu.Lock()
		if r.recvConn != nil {
			_ = r.recvConn.Close()
			r.recvConn = nil
		}
		r.mu.Unlock()
	}
	r.pubMu.Lock()
	r.dropPublisher()
	r.pubMu.Unlock()
	return err
}

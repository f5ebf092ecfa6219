package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/kumiko-go/kumiko/consumer"
	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/integration"
	"github.com/kumiko-go/kumiko/pipeline"
	"github.com/kumiko-go/kumiko/registry"
)

const (
	relayBacklog = 5_000 // messages per relay drain round
	benchType    = "bench.sent"
)

// sent is the bench contract's payload.
type sent struct {
	N int `json:"n"`
}

// integrationRows measures integration events over RabbitMQ (RABBITMQ_URL,
// default the local broker), on an exchange and queues of this run that it
// deletes on exit:
//
//   - the relay draining a backlog of published messages (batch 200, each
//     batch confirmed by the broker before the cursor moves) against a raw
//     amqp091 publisher with confirms sending the same messages in the same
//     batches; a bound quorum queue keeps both sides' messages;
//   - handling with an ordered handler against the same handler unordered
//     (orderedRow);
//   - commit→remote handler latency at 200 messages/s: a command publishes,
//     the relay sends through the broker, a second app (its own schema and
//     queue, in this process) handles; the time is taken when the command
//     returned and when the handler is called.
func (b *bench) integrationRows(ctx context.Context) ([]row, error) {
	url := os.Getenv("RABBITMQ_URL")
	if url == "" {
		url = integration.DefaultRabbitURL
	}
	prefix := "bench-" + randomHex(4)
	exchange := prefix + ".events"
	conn, err := amqp.Dial(url)
	if err != nil {
		return nil, fmt.Errorf("RabbitMQ at %s: %w (start it with `make services`)", url, err)
	}
	defer func() { _ = conn.Close() }()
	ch, err := conn.Channel()
	if err != nil {
		return nil, err
	}
	sink := prefix + "-sink"
	defer func() {
		for _, q := range []string{sink, prefix + "-recv", prefix + "-recv.dead"} {
			_, _ = ch.QueueDelete(q, false, false, false)
		}
		_ = ch.ExchangeDelete(exchange, false, false)
	}()
	if err := ch.ExchangeDeclare(exchange, amqp.ExchangeDirect, true, false, false, false, nil); err != nil {
		return nil, err
	}
	if _, err := ch.QueueDeclare(sink, true, false, false, false, amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeQuorum}); err != nil {
		return nil, err
	}
	if err := ch.QueueBind(sink, benchType, exchange, false, nil); err != nil {
		return nil, err
	}
	rabbit := func(queue string) (*integration.Rabbit, error) {
		return integration.NewRabbit(integration.RabbitConfig{URL: url, Exchange: exchange, Queue: queue})
	}

	throughput, err := b.relayThroughput(ctx, ch, url, exchange, sink, rabbit)
	if err != nil {
		return nil, err
	}
	rows := []row{throughput}
	lat, err := b.integrationLatency(ctx, prefix+"-recv", rabbit)
	if err != nil {
		return nil, err
	}
	ordered, err := b.orderedRow(ctx, url, exchange, prefix, ch)
	return append(append(rows, lat...), ordered), err
}

// contractFeature declares the bench contract; publish adds the command
// that publishes it, handle a handler calling seen.
func contractFeature(name string, publish bool, seen func(feature.Message)) *feature.Feature {
	return feature.Define(name, func(r *feature.Registrar) {
		r.IntegrationEvent(benchType, sent{})
		if publish {
			feature.HandleCommand(r, "bench.publish", feature.AnyUser(), func(ctx feature.CommandContext, in sent) (any, error) {
				return nil, ctx.Publish(benchType, in)
			})
		}
		if seen != nil {
			r.OnIntegrationEvent(benchType, "bench-seen", func(_ feature.CommandContext, m feature.Message) error {
				seen(m)
				return nil
			})
		}
	})
}

// integrationApp is an executor on a fresh schema of its own.
func (b *bench) integrationApp(ctx context.Context, schema string, f *feature.Feature) (*pipeline.Executor, *eventstore.Store, error) {
	reg, err := registry.Build(f)
	if err != nil {
		return nil, nil, err
	}
	store, err := eventstore.New(b.pool, eventstore.Config{Schema: schema, Upcaster: reg})
	if err != nil {
		return nil, nil, err
	}
	if err := migrateAll(ctx, store); err != nil {
		return nil, nil, err
	}
	exec, err := pipeline.New(reg, store, pipeline.Config{})
	return exec, store, err
}

func (b *bench) relayThroughput(ctx context.Context, ch *amqp.Channel, url, exchange, sink string, rabbit func(string) (*integration.Rabbit, error)) (row, error) {
	name := fmt.Sprintf("integration relay → RabbitMQ, %s messages, batch %d, confirms", formatValue(float64(b.n.relay), ""), passBatch)
	fmt.Fprintf(os.Stderr, "  %s …\n", name)
	schema := b.store.Schema() + "_relay"
	exec, store, err := b.integrationApp(ctx, schema, contractFeature("bench-pub", false, nil))
	if err != nil {
		return row{}, err
	}
	defer dropSchemas(b.pool, store, schema)
	tr, err := rabbit(schema)
	if err != nil {
		return row{}, err
	}
	defer func() { _ = tr.Stop(context.Background()) }()
	svc, err := integration.New(exec, store, integration.Config{Transport: tr})
	if err != nil {
		return row{}, err
	}
	relay, _ := svc.Relay()
	d, err := consumer.New(store, consumer.Config{InstanceID: benchInstance}, relay)
	if err != nil {
		return row{}, err
	}
	if err := d.Register(ctx); err != nil {
		return row{}, err
	}
	raw, err := newRawPublisher(url, exchange)
	if err != nil {
		return row{}, err
	}
	defer raw.close()

	var total [2]measured
	for round := range b.cfg.rounds + 1 { // round 0 warms up
		last, err := b.seedMessages(ctx, store, b.n.relay)
		if err != nil {
			return row{}, err
		}
		for i := range 2 {
			side := (i + round) % 2
			start := time.Now()
			if side == 0 {
				err = drainRelay(ctx, d, last)
			} else {
				err = raw.publish(ctx, b.n.relay, 0)
			}
			if err != nil {
				return row{}, fmt.Errorf("%s: %w", name, err)
			}
			if round > 0 {
				total[side].units += int64(b.n.relay)
				total[side].elapsed += time.Since(start)
			}
		}
		if _, err := ch.QueuePurge(sink, false); err != nil {
			return row{}, err
		}
	}
	return row{name: name, unit: "msg/s", fw: total[0].rate(), raw: total[1].rate(), goal: atLeastOfRaw(0.5)}, nil
}

// seedMessages appends n published messages (as Publish stores them) and
// returns the highest id.
func (b *bench) seedMessages(ctx context.Context, store *eventstore.Store, n int) (int64, error) {
	var last int64
	for done := 0; done < n; {
		batch := make([]eventstore.StreamAppend, min(1000, n-done))
		for i := range batch {
			batch[i] = eventstore.StreamAppend{
				Stream: eventstore.Stream{TenantID: b.tenant, AggregateType: pipeline.MessageStream, AggregateID: uuid.Must(uuid.NewV7())},
				Events: []eventstore.NewEvent{{Type: benchType, Payload: json.RawMessage(`{"n":` + strconv.Itoa(done+i) + `}`),
					Metadata: eventstore.Metadata{UserID: "bench", CorrelationID: "bench"}}},
			}
		}
		res, err := store.AppendBatch(ctx, batch)
		if err != nil {
			return 0, err
		}
		last = res[len(res)-1].Events[0].ID
		done += len(batch)
	}
	return last, nil
}

// drainRelay runs relay passes until its cursor reached last.
func drainRelay(ctx context.Context, d *consumer.Dispatcher, last int64) error {
	for {
		res, err := d.RunPass(ctx, integration.RelayName)
		if err != nil {
			return err
		}
		if res.Failed != nil {
			return res.Failed
		}
		if res.Cursor >= last {
			return nil
		}
	}
}

// rawPublisher is the baseline: amqp091 with publisher confirms, the same
// messages (body, properties, headers) in batches of passBatch, each batch
// confirmed before the next.
type rawPublisher struct {
	conn     *amqp.Connection
	ch       *amqp.Channel
	exchange string
}

func newRawPublisher(url, exchange string) (*rawPublisher, error) {
	conn, err := amqp.Dial(url)
	if err != nil {
		return nil, err
	}
	ch, err := conn.Channel()
	if err == nil {
		err = ch.Confirm(false)
	}
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	return &rawPublisher{conn: conn, ch: ch, exchange: exchange}, nil
}

func (p *rawPublisher) close() { _ = p.conn.Close() }

// publish sends n bench messages; with keys > 0 their kumiko-key headers
// go round robin over that many keys.
func (p *rawPublisher) publish(ctx context.Context, n, keys int) error {
	pending := make([]*amqp.DeferredConfirmation, 0, passBatch)
	for i := range n {
		h := amqp.Table{"kumiko-tenant": "0190a000-0000-7000-8000-0000000be7c0", "kumiko-user": "bench", "kumiko-event-version": int32(1)}
		if keys > 0 {
			h["kumiko-key"] = "stream-" + strconv.Itoa(i%keys)
		}
		dc, err := p.ch.PublishWithDeferredConfirmWithContext(ctx, p.exchange, benchType, false, false, amqp.Publishing{
			Headers:     h,
			ContentType: "application/json", DeliveryMode: amqp.Persistent, CorrelationId: "bench",
			MessageId: uuid.Must(uuid.NewV7()).String(), Timestamp: time.Now(), Type: benchType,
			Body: []byte(`{"n":` + strconv.Itoa(i) + `}`),
		})
		if err != nil {
			return err
		}
		pending = append(pending, dc)
		if len(pending) == passBatch || i == n-1 {
			for _, dc := range pending {
				if ok, err := dc.WaitContext(ctx); err != nil || !ok {
					return errors.Join(err, errors.New("not confirmed"))
				}
			}
			pending = pending[:0]
		}
	}
	return nil
}

// integrationLatency publishes paceRate messages/s through commands of one
// app and measures until a handler of a second app (queue recvQueue) sees
// each.
func (b *bench) integrationLatency(ctx context.Context, recvQueue string, rabbit func(string) (*integration.Rabbit, error)) ([]row, error) {
	fmt.Fprintf(os.Stderr, "  integration commit→remote handler latency, RabbitMQ, %d messages/s …\n", paceRate)
	var (
		mu        sync.Mutex
		committed = map[int]time.Time{}
		seen      = map[int]time.Time{}
	)
	recvSchema := b.store.Schema() + "_recv"
	rexec, rstore, err := b.integrationApp(ctx, recvSchema, contractFeature("bench-recv", false, func(m feature.Message) {
		var s sent
		_ = m.Decode(&s)
		mu.Lock()
		if _, dup := seen[s.N]; !dup {
			seen[s.N] = time.Now()
		}
		mu.Unlock()
	}))
	if err != nil {
		return nil, err
	}
	defer dropSchemas(b.pool, rstore, recvSchema)
	pubSchema := b.store.Schema() + "_pub"
	pexec, pstore, err := b.integrationApp(ctx, pubSchema, contractFeature("bench-pub", true, nil))
	if err != nil {
		return nil, err
	}
	defer dropSchemas(b.pool, pstore, pubSchema)

	stop := func(ctx context.Context, fns ...func(context.Context) error) {
		for _, fn := range fns {
			_ = fn(ctx)
		}
	}
	rtr, err := rabbit(recvQueue)
	if err != nil {
		return nil, err
	}
	recv, err := integration.New(rexec, rstore, integration.Config{Transport: rtr})
	if err != nil {
		return nil, err
	}
	if err := recv.Start(ctx); err != nil {
		return nil, err
	}
	defer stop(context.Background(), recv.Stop)
	ptr, err := rabbit(pubSchema)
	if err != nil {
		return nil, err
	}
	pub, err := integration.New(pexec, pstore, integration.Config{Transport: ptr})
	if err != nil {
		return nil, err
	}
	relay, _ := pub.Relay()
	d, err := consumer.New(pstore, consumer.Config{InstanceID: benchInstance}, relay)
	if err != nil {
		return nil, err
	}
	if err := d.Start(ctx); err != nil {
		return nil, err
	}
	defer stop(context.Background(), d.Stop, pub.Stop)

	caller := pipeline.Caller{User: feature.User{ID: "bench", TenantID: b.tenant, Authenticated: true}}
	n := 0
	phase := func(dur time.Duration, record bool) error {
		from := n
		tick := time.NewTicker(time.Second / paceRate)
		defer tick.Stop()
		for end := time.Now().Add(dur); time.Now().Before(end); {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-tick.C:
			}
			if _, err := pexec.Command(ctx, caller, pipeline.Request{Type: "bench.publish", Payload: json.RawMessage(`{"n":` + strconv.Itoa(n) + `}`)}); err != nil {
				return err
			}
			mu.Lock()
			committed[n] = time.Now()
			mu.Unlock()
			n++
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			mu.Lock()
			missing := 0
			for i := from; i < n; i++ {
				if _, ok := seen[i]; !ok {
					missing++
				}
			}
			mu.Unlock()
			if missing == 0 {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%d messages not handled within 30 s", missing)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(10 * time.Millisecond):
			}
		}
		if !record {
			for i := from; i < n; i++ {
				delete(committed, i)
			}
		}
		return nil
	}
	if err := phase(b.cfg.warmup, false); err != nil {
		return nil, err
	}
	if err := phase(b.cfg.duration, true); err != nil {
		return nil, err
	}
	lat := newLatencies(1)
	for i, at := range committed {
		lat.workers[0] = append(lat.workers[0], max(seen[i].Sub(at), 0))
	}
	var rows []row
	for _, q := range []struct {
		q     float64
		limit float64 // µs
	}{{0.50, 10_000}, {0.99, 50_000}} {
		limit := q.limit
		rows = append(rows, row{
			name: fmt.Sprintf("integration commit→remote handler p%.0f, RabbitMQ, %d messages/s", q.q*100, paceRate),
			unit: "µs", fw: micros(lat.quantile(q.q)),
			goal: goal{text: fmt.Sprintf("≤ %.0f ms", limit/1000), met: func(fw, _ float64) bool { return fw <= limit }},
		})
	}
	return rows, nil
}

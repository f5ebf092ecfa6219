package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/integration"
)

// orderedStreams is how many keys the ordered-handling row spreads its
// messages over.
const orderedStreams = 8

// orderedRow measures handling over RabbitMQ with the handler declared
// feature.Ordered (one lane per key on the single-active-consumer queue)
// against the same handler unordered, on the same messages: n messages
// spread round robin over orderedStreams keys wait in each app's queue,
// then the app starts and the time until its handler saw all is taken.
// Both sides alternate in rounds; the goal is the ordered side keeping at
// least half the unordered throughput.
func (b *bench) orderedRow(ctx context.Context, url, exchange, prefix string, ch *amqp.Channel) (row, error) {
	n := b.n.relay / 2
	name := fmt.Sprintf("integration ordered vs unordered handling, %s messages, %d keys", formatValue(float64(n), ""), orderedStreams)
	fmt.Fprintf(os.Stderr, "  %s …\n", name)
	type side struct {
		queue string
		svc   *integration.Service
		seen  atomic.Int64
		all   chan struct{} // closed when the handler has seen n messages
	}
	sides := [2]*side{{queue: prefix + "-ordered"}, {queue: prefix + "-unordered"}}
	defer func() {
		for _, s := range sides {
			for _, q := range []string{s.queue, s.queue + ".ordered", s.queue + ".dead"} {
				_, _ = ch.QueueDelete(q, false, false, false)
			}
			for d := integration.DefaultRetryBackoff; d <= 8*integration.DefaultRetryBackoff; d *= 2 {
				_, _ = ch.QueueDelete(s.queue+".retry."+d.String(), false, false, false)
			}
		}
	}()
	for i, s := range sides {
		var opts []feature.IntegrationOption
		if i == 0 {
			opts = append(opts, feature.Ordered())
		}
		f := feature.Define("bench-"+strconv.Itoa(i), func(r *feature.Registrar) {
			r.IntegrationEvent(benchType, sent{})
			r.OnIntegrationEvent(benchType, "bench-seen", func(feature.CommandContext, feature.Message) error {
				if s.seen.Add(1) == int64(n) {
					close(s.all)
				}
				return nil
			}, opts...)
		})
		schema := b.store.Schema() + "_ord" + strconv.Itoa(i)
		exec, store, err := b.integrationApp(ctx, schema, f)
		if err != nil {
			return row{}, err
		}
		defer dropSchemas(b.pool, store, schema)
		tr, err := integration.NewRabbit(integration.RabbitConfig{URL: url, Exchange: exchange, Queue: s.queue})
		if err != nil {
			return row{}, err
		}
		if s.svc, err = integration.New(exec, store, integration.Config{Transport: tr}); err != nil {
			return row{}, err
		}
		// A first start declares and binds the app's queue; the rounds
		// start it again on a filled queue.
		if err := s.svc.Start(ctx); err != nil {
			return row{}, err
		}
		if err := s.svc.Stop(ctx); err != nil {
			return row{}, err
		}
	}
	raw, err := newRawPublisher(url, exchange)
	if err != nil {
		return row{}, err
	}
	defer raw.close()

	var total [2]measured
	for round := range b.cfg.rounds + 1 { // round 0 warms up
		if err := raw.publish(ctx, n, orderedStreams); err != nil {
			return row{}, err
		}
		for i := range 2 {
			s := sides[(i+round)%2]
			s.seen.Store(0)
			s.all = make(chan struct{})
			start := time.Now()
			if err := s.svc.Start(ctx); err != nil {
				return row{}, err
			}
			select {
			case <-s.all:
			case <-ctx.Done():
				return row{}, ctx.Err()
			}
			elapsed := time.Since(start)
			if err := s.svc.Stop(ctx); err != nil {
				return row{}, err
			}
			if round > 0 {
				total[(i+round)%2].units += int64(n)
				total[(i+round)%2].elapsed += elapsed
			}
		}
	}
	return row{name: name, unit: "msg/s", fw: total[0].rate(), raw: total[1].rate(), goal: atLeastOfRaw(0.5)}, nil
}

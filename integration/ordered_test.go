package integration_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/integration"
	"github.com/kumiko-go/kumiko/kumikotest"
	"github.com/kumiko-go/kumiko/pipeline"
)

// Step is the contract of the ordering tests: the seq-th message of a
// stream, ordered by its stream field.
type Step struct {
	Stream string `json:"stream" validate:"required"`
	Seq    int    `json:"seq" validate:"gte=0"`
}

func stepContract(r *feature.Registrar) {
	r.IntegrationEvent("stream.step", Step{}, feature.MessageKey("stream"))
}

var stepper = feature.Define("stepper", func(r *feature.Registrar) {
	stepContract(r)
	feature.HandleCommand(r, "step.publish", feature.AnyUser(), func(ctx feature.CommandContext, in Step) (any, error) {
		return nil, ctx.Publish("stream.step", in)
	})
})

// ledger records, per instance, the steps its ordered handler sees, in
// steps (n orders the rows as the handler's transactions wrote them: one
// stream's handler calls never overlap, so n is their order); while a
// stream is held, the handler fails on its messages.
type ledger struct {
	mu   sync.Mutex
	held map[string]bool
}

func (l *ledger) hold(stream string, on bool) {
	l.mu.Lock()
	l.held[stream] = on
	l.mu.Unlock()
}

func (l *ledger) feature() *feature.Feature {
	return feature.Define("ledger", func(r *feature.Registrar) {
		stepContract(r)
		r.OnIntegrationEvent("stream.step", "ledger", func(ctx feature.CommandContext, m feature.Message) error {
			var s Step
			if err := m.Decode(&s); err != nil {
				return err
			}
			l.mu.Lock()
			held := l.held[s.Stream]
			l.mu.Unlock()
			if held {
				return fmt.Errorf("stream %s is held", s.Stream)
			}
			_, err := ctx.DB().Exec(ctx.Context(), `INSERT INTO steps (stream, seq, key) VALUES ($1, $2, $3)`, s.Stream, s.Seq, m.Key)
			return err
		}, feature.Ordered())
	})
}

const stepsTable = `CREATE TABLE steps (n bigserial PRIMARY KEY, stream text NOT NULL, seq int NOT NULL, key text NOT NULL)`

// interleaved are the steps of streams (name → length) in one order that
// mixes the streams at random and keeps each stream's seqs ascending.
func interleaved(streams map[string]int) []Step {
	next := map[string]int{}
	var out []Step
	for {
		var open []string
		for s, n := range streams {
			if next[s] < n {
				open = append(open, s)
			}
		}
		if len(open) == 0 {
			return out
		}
		s := open[rand.N(len(open))]
		out = append(out, Step{Stream: s, Seq: next[s]})
		next[s]++
	}
}

// requireInOrder fails unless the steps the app recorded are each
// stream's seqs, once each, in order.
func requireInOrder(t *testing.T, app *kumikotest.App, streams map[string]int) {
	t.Helper()
	rows, err := app.Pool.Query(ctx, `SELECT stream, seq FROM steps ORDER BY n`)
	require.NoError(t, err)
	defer rows.Close()
	seen := map[string][]int{}
	for rows.Next() {
		var s Step
		require.NoError(t, rows.Scan(&s.Stream, &s.Seq))
		seen[s.Stream] = append(seen[s.Stream], s.Seq)
	}
	require.NoError(t, rows.Err())
	for s, n := range streams {
		want := make([]int, n)
		for i := range want {
			want[i] = i
		}
		require.Equal(t, want, seen[s], "stream %s handled in publish order, each message once", s)
	}
}

// An ordered handler on two instances of an app: a stream of 500 messages
// interleaved with seven others, published by a kumiko app, is handled in
// publish order per stream, the instance that receives stopping on the way
// and the other taking over; each message once.
func TestRabbitOrderedHandlingAcrossInstances(t *testing.T) {
	t.Parallel()
	br := newBroker(t, rabbitURL())
	l := &ledger{held: map[string]bool{}}
	reg := kumikotest.NewApp(t, []*feature.Feature{l.feature()})
	reg.Exec(t, stepsTable)
	// Two instances of the app, each counting what it handled.
	metricsA, metricsB := prometheus.NewRegistry(), prometheus.NewRegistry()
	a, err := integration.New(reg.Executor, reg.Store, integration.Config{Transport: br.transport(t, "ledger", 0), Metrics: metricsA})
	require.NoError(t, err)
	require.NoError(t, a.Start(ctx))
	instanceWith(t, reg, integration.Config{Transport: br.transport(t, "ledger", 0), Metrics: metricsB})

	pub := publisherOf(t, kumikotest.NewApp(t, []*feature.Feature{stepper}), integration.Config{Transport: br.transport(t, "orders", 0)})
	streams := map[string]int{"long": 500}
	for i := range 7 {
		streams[fmt.Sprintf("s%d", i)] = 60
	}
	steps := interleaved(streams)
	send := func(steps []Step) {
		for i, s := range steps {
			raw, err := json.Marshal(s)
			require.NoError(t, err)
			_, err = pub.Executor.Command(ctx, []pipeline.Caller{alice, bob}[i%2], pipeline.Request{Type: "step.publish", Payload: raw})
			require.NoError(t, err)
		}
	}
	send(steps[:len(steps)*3/4])
	require.Eventually(t, func() bool { return reg.Count(t, "SELECT count(*) FROM steps") >= len(steps)/4 }, time.Minute, 5*time.Millisecond)
	require.NoError(t, a.Stop(context.Background()), "instance a stops; b takes over")
	send(steps[len(steps)*3/4:])
	waitRows(t, reg, len(steps), "SELECT count(*) FROM steps")

	requireInOrder(t, reg, streams)
	handledA, handledB := handled(t, metricsA), handled(t, metricsB)
	require.Positive(t, handledA)
	require.Positive(t, handledB, "b handled the rest")
	require.Equal(t, len(steps), handledA+handledB)
	require.Zero(t, reg.Count(t, "SELECT count(*) FROM steps WHERE key <> stream"), "the message key is the contract's key field")
}

// A stream whose message keeps failing holds back that stream only: the
// other streams' messages, published after it, are all handled while it
// waits; once it passes, its stream goes on in order. A message that
// breaks the contract goes dead at once, and its stream goes on. The
// messages come from a foreign publisher, keyed by the contract's key
// field alone.
func TestRabbitOrderedPoisonHoldsBackItsStreamOnly(t *testing.T) {
	t.Parallel()
	br := newBroker(t, rabbitURL())
	l := &ledger{held: map[string]bool{"held": true}}
	app := kumikotest.NewApp(t, []*feature.Feature{l.feature()})
	app.Exec(t, stepsTable)
	tr, err := integration.NewRabbit(integration.RabbitConfig{URL: br.url, Exchange: br.exchange, Queue: br.prefix + "-ledger",
		MaxDeliveries: 1000, RetryBackoff: 20 * time.Millisecond, MaxRetryBackoff: 100 * time.Millisecond})
	require.NoError(t, err)
	svc := instance(t, app, tr)

	streams := map[string]int{"held": 10, "broken": 5}
	for i := range 7 {
		streams[fmt.Sprintf("s%d", i)] = 60
	}
	ch := br.channel(t)
	require.NoError(t, ch.Confirm(false))
	var broken uuid.UUID
	for i, s := range interleaved(streams) {
		body, err := json.Marshal(s)
		require.NoError(t, err)
		id := uuid.New()
		if s.Stream == "broken" && s.Seq == 2 {
			body, broken = []byte(`{"stream":"broken","seq":-1}`), id // breaks validate:"gte=0"
		}
		p := foreign([]uuid.UUID{tenantA, tenantB}[i%2], id.String(), nil, string(body))
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, br.exchange, "stream.step", false, false, p)
		require.NoError(t, err)
		ok, err := dc.WaitContext(ctx)
		require.NoError(t, err)
		require.True(t, ok)
	}

	others := 7 * 60
	waitRows(t, app, others+4, "SELECT count(*) FROM steps WHERE stream <> 'held'")
	require.Equal(t, 0, app.Count(t, "SELECT count(*) FROM steps WHERE stream = 'held'"),
		"the held stream's first message keeps failing, and its later ones wait")
	dead, err := svc.Dead().List(ctx, 10)
	require.NoError(t, err)
	require.Len(t, dead, 1)
	require.Equal(t, broken, dead[0].Message.ID)
	require.True(t, strings.HasPrefix(dead[0].LastError, "validation_error"), dead[0].LastError)
	require.Contains(t, dead[0].LastError, "seq")

	l.hold("held", false)
	waitRows(t, app, others+4+10, "SELECT count(*) FROM steps")
	requireInOrder(t, app, map[string]int{"held": 10})
	require.Equal(t, []int{0, 1, 3, 4}, brokenSeqs(t, app), "the broken stream went on past its dead message, in order")
	delete(streams, "broken")
	delete(streams, "held")
	requireInOrder(t, app, streams)
	require.Zero(t, br.depth(t, br.prefix+"-ledger.ordered"))
}

func brokenSeqs(t *testing.T, app *kumikotest.App) []int {
	t.Helper()
	rows, err := app.Pool.Query(ctx, `SELECT seq FROM steps WHERE stream = 'broken' ORDER BY n`)
	require.NoError(t, err)
	seqs, err := pgx.CollectRows(rows, pgx.RowTo[int])
	require.NoError(t, err)
	return seqs
}

// handled is what an instance's kumiko_integration_handled_total counts.
func handled(t *testing.T, reg *prometheus.Registry) int {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	n := 0.0
	for _, mf := range mfs {
		if mf.GetName() == "kumiko_integration_handled_total" {
			for _, m := range mf.GetMetric() {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return int(n)
}

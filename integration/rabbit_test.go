package integration_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/consumer"
	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/integration"
	"github.com/kumiko-go/kumiko/kumikotest"
	"github.com/kumiko-go/kumiko/pipeline"
	"github.com/kumiko-go/kumiko/registry"
)

// rabbitURL is the broker the tests use: RABBITMQ_URL, else the local one.
func rabbitURL() string {
	if u := os.Getenv("RABBITMQ_URL"); u != "" {
		return u
	}
	return integration.DefaultRabbitURL
}

// Shipped and Cancelled are the contracts the test apps share, as a
// contracts package would hold them.
type Shipped struct {
	OrderID string `json:"orderId" validate:"required"`
	Poison  bool   `json:"poison,omitempty"`
}

type Cancelled struct {
	OrderID string `json:"orderId" validate:"required"`
}

func contracts(r *feature.Registrar) {
	r.IntegrationEvent("order.shipped", Shipped{})
	r.IntegrationEvent("order.cancelled", Cancelled{})
}

// Publish is the orders app's command: it publishes Type with the order id.
type Publish struct {
	Type    string `json:"type" validate:"required"`
	OrderID string `json:"orderId" validate:"required"`
	Poison  bool   `json:"poison,omitempty"`
}

var orders = feature.Define("orders", func(r *feature.Registrar) {
	contracts(r)
	feature.HandleCommand(r, "order.publish", feature.AnyUser(), func(ctx feature.CommandContext, in Publish) (any, error) {
		if in.Type == "order.cancelled" {
			return nil, ctx.Publish(in.Type, Cancelled{OrderID: in.OrderID})
		}
		return nil, ctx.Publish(in.Type, Shipped{OrderID: in.OrderID, Poison: in.Poison})
	})
})

// receiver is an app receiving the contracts: billing handles shipped
// orders (two handlers), audit cancelled ones. Each handler records what it
// saw in received, keyed by (message, handler).
type receiver struct {
	mu    sync.Mutex
	calls map[string]int // by handler and type: "invoice order.shipped"
	// poison, while set, fails invoice on poisoned orders.
	poison bool
}

func (rc *receiver) called(handler string, m feature.Message) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.calls[handler+" "+m.Type]++
}

func (rc *receiver) callsOf(key string) int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.calls[key]
}

func (rc *receiver) setPoison(on bool) { rc.mu.Lock(); rc.poison = on; rc.mu.Unlock() }

func (rc *receiver) handler(name string) func(feature.CommandContext, feature.Message) error {
	return func(ctx feature.CommandContext, m feature.Message) error {
		rc.called(name, m)
		var p Shipped
		if err := m.Decode(&p); err != nil {
			return err
		}
		rc.mu.Lock()
		poisoned := p.Poison && rc.poison && name == "invoice"
		rc.mu.Unlock()
		if poisoned {
			return errors.New("poisoned")
		}
		_, err := ctx.DB().Exec(ctx.Context(), `INSERT INTO received (message_id, handler, order_id, tenant_id, user_id)
VALUES ($1, $2, $3, $4, $5)`, m.ID, name, p.OrderID, ctx.Tenant(), ctx.User().ID)
		return err
	}
}

func billingFeature(rc *receiver) *feature.Feature {
	return feature.Define("billing", func(r *feature.Registrar) {
		contracts(r)
		r.OnIntegrationEvent("order.shipped", "invoice", rc.handler("invoice"))
		r.OnIntegrationEvent("order.shipped", "notify", rc.handler("notify"))
	})
}

func auditFeature(rc *receiver) *feature.Feature {
	return feature.Define("audit", func(r *feature.Registrar) {
		contracts(r)
		r.OnIntegrationEvent("order.cancelled", "audit", rc.handler("audit"))
	})
}

const receivedTable = `CREATE TABLE received (message_id uuid, handler text, order_id text, tenant_id uuid, user_id text,
PRIMARY KEY (message_id, handler))`

// broker names what one test declares on the broker, unique to it, and
// deletes it when the test ends.
type broker struct {
	url, exchange, prefix string
}

func newBroker(t *testing.T, url string) broker {
	t.Helper()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	prefix := "t-" + hex.EncodeToString(b)
	br := broker{url: url, exchange: prefix + ".events", prefix: prefix}
	conn, err := amqp.Dial(rabbitURL())
	require.NoError(t, err, "RabbitMQ at %s is not usable; start it with `make services` (or `make test`)", rabbitURL())
	require.NoError(t, conn.Close())
	t.Cleanup(func() {
		conn, err := amqp.Dial(rabbitURL())
		if err != nil {
			t.Errorf("clean up the broker: %v", err)
			return
		}
		defer func() { _ = conn.Close() }()
		ch, err := conn.Channel()
		if err != nil {
			t.Errorf("clean up the broker: %v", err)
			return
		}
		for _, app := range []string{"billing", "audit", "orders", "ledger", "node"} {
			_, _ = ch.QueueDelete(prefix+"-"+app, false, false, false)
			_, _ = ch.QueueDelete(prefix+"-"+app+".ordered", false, false, false)
			_, _ = ch.QueueDelete(prefix+"-"+app+".dead", false, false, false)
			for d := 50 * time.Millisecond; d <= time.Minute; d *= 2 {
				_, _ = ch.QueueDelete(prefix+"-"+app+".retry."+d.String(), false, false, false)
			}
			for d := 100 * time.Millisecond; d <= time.Minute; d *= 2 {
				_, _ = ch.QueueDelete(prefix+"-"+app+".retry."+d.String(), false, false, false)
			}
		}
		_ = ch.ExchangeDelete(br.exchange, false, false)
	})
	return br
}

func (b broker) transport(t *testing.T, app string, maxDeliveries int) *integration.Rabbit {
	t.Helper()
	r, err := integration.NewRabbit(integration.RabbitConfig{URL: b.url, Exchange: b.exchange, Queue: b.prefix + "-" + app, MaxDeliveries: maxDeliveries})
	require.NoError(t, err)
	return r
}

// instance starts one process's worth of an app's integration service on
// the transport, stopped when the test ends.
func instance(t *testing.T, app *kumikotest.App, tr integration.Transport) *integration.Service {
	t.Helper()
	return instanceWith(t, app, integration.Config{Transport: tr})
}

// instanceWith is instance with a config of the test's.
func instanceWith(t *testing.T, app *kumikotest.App, cfg integration.Config) *integration.Service {
	t.Helper()
	svc, err := integration.New(app.Executor, app.Store, cfg)
	require.NoError(t, err)
	require.NoError(t, svc.Start(ctx))
	t.Cleanup(func() { require.NoError(t, svc.Stop(context.Background())) })
	return svc
}

// publisher is the orders app with its relay on tr, run by a started
// dispatcher.
func publisher(t *testing.T, tr integration.Transport) *kumikotest.App {
	t.Helper()
	return publisherOf(t, kumikotest.NewApp(t, []*feature.Feature{orders}), integration.Config{Transport: tr})
}

// publisherOf runs app's relay with cfg on a started dispatcher.
func publisherOf(t *testing.T, app *kumikotest.App, cfg integration.Config) *kumikotest.App {
	t.Helper()
	svc := instanceWith(t, app, cfg)
	relay, ok := svc.Relay()
	require.True(t, ok)
	d, err := consumer.New(app.Store, consumer.Config{InstanceID: "orders-1", PollInterval: 50 * time.Millisecond}, relay)
	require.NoError(t, err)
	require.NoError(t, d.Start(ctx))
	t.Cleanup(func() { require.NoError(t, d.Stop(context.Background())) })
	return app
}

func publish(t *testing.T, app *kumikotest.App, c pipeline.Caller, typ, orderID string, poison bool) {
	t.Helper()
	raw, err := json.Marshal(Publish{Type: typ, OrderID: orderID, Poison: poison})
	require.NoError(t, err)
	_, err = app.Executor.Command(ctx, c, pipeline.Request{Type: "order.publish", Payload: raw})
	require.NoError(t, err)
}

func receiverApp(t *testing.T, f *feature.Feature) *kumikotest.App {
	t.Helper()
	app := kumikotest.NewApp(t, []*feature.Feature{f})
	app.Exec(t, receivedTable)
	return app
}

func waitRows(t *testing.T, app *kumikotest.App, want int, query string, args ...any) {
	t.Helper()
	require.Eventually(t, func() bool { return app.Count(t, query, args...) >= want }, 60*time.Second, 10*time.Millisecond,
		"waiting for %d rows of %s", want, query)
	require.Equal(t, want, app.Count(t, query, args...))
}

// Two instances of billing share its queue, audit has its own: every
// message is handled exactly once per handler per app, as the publisher's
// tenant and user, and no app gets a type it did not bind.
func TestRabbitDeliversOncePerHandlerPerApp(t *testing.T) {
	t.Parallel()
	br := newBroker(t, rabbitURL())
	billRC, auditRC := &receiver{calls: map[string]int{}}, &receiver{calls: map[string]int{}}
	billing, audit := receiverApp(t, billingFeature(billRC)), receiverApp(t, auditFeature(auditRC))
	instance(t, billing, br.transport(t, "billing", 0))
	instance(t, billing, br.transport(t, "billing", 0))
	instance(t, audit, br.transport(t, "audit", 0))
	orders := publisher(t, br.transport(t, "orders", 0))

	const n = 40
	for i := range n {
		c := []pipeline.Caller{alice, bob}[i%2]
		publish(t, orders, c, "order.shipped", fmt.Sprintf("%s-%d", c.User.ID, i), false)
		if i%4 == 0 {
			publish(t, orders, c, "order.cancelled", fmt.Sprintf("%s-%d", c.User.ID, i), false)
		}
	}
	waitRows(t, billing, 2*n, "SELECT count(*) FROM received")
	waitRows(t, audit, n/4, "SELECT count(*) FROM received")
	for _, app := range []*kumikotest.App{billing, audit} {
		require.Zero(t, app.Count(t, `SELECT count(*) FROM received
WHERE order_id NOT LIKE user_id || '-%' OR tenant_id <> CASE user_id WHEN 'alice' THEN $1::uuid ELSE $2::uuid END`,
			alice.User.TenantID, bob.User.TenantID), "handlers run as the publisher")
	}
	require.Zero(t, billRC.callsOf("invoice order.cancelled")+billRC.callsOf("notify order.cancelled"), "billing did not bind order.cancelled")
	require.Zero(t, auditRC.callsOf("audit order.shipped"), "audit did not bind order.shipped")
	require.Equal(t, 2*n, billing.Count(t, "SELECT count(*) FROM kumiko_inbox"))
}

// A message that fails every delivery lands in <queue>.dead after
// MaxDeliveries; the others keep flowing; the dead one can be listed and
// retried.
func TestRabbitPoisonMessageGoesDeadAndCanBeRetried(t *testing.T) {
	t.Parallel()
	br := newBroker(t, rabbitURL())
	rc := &receiver{calls: map[string]int{}, poison: true}
	billing := receiverApp(t, billingFeature(rc))
	svc := instance(t, billing, br.transport(t, "billing", 5))
	orders := publisher(t, br.transport(t, "orders", 0))

	publish(t, orders, alice, "order.shipped", "alice-poison", true)
	for i := range 5 {
		publish(t, orders, alice, "order.shipped", fmt.Sprintf("alice-%d", i), false)
	}
	waitRows(t, billing, 11, "SELECT count(*) FROM received") // all but the poisoned invoice
	var dead []integration.DeadMessage
	require.Eventually(t, func() bool {
		var err error
		dead, err = svc.Dead().List(ctx, 10)
		require.NoError(t, err)
		return len(dead) == 1
	}, 30*time.Second, 20*time.Millisecond)
	require.Equal(t, 5+5, rc.callsOf("invoice order.shipped"), "five good messages once, the poisoned one MaxDeliveries times")
	require.Equal(t, alice.User.TenantID, dead[0].Message.TenantID)
	require.Equal(t, "order.shipped", dead[0].Message.Type)
	require.False(t, dead[0].DeadAt.IsZero())

	rc.setPoison(false)
	require.NoError(t, svc.Dead().Retry(ctx, dead[0].Message.ID, ""))
	waitRows(t, billing, 12, "SELECT count(*) FROM received")
	dead, err := svc.Dead().List(ctx, 10)
	require.NoError(t, err)
	require.Empty(t, dead)
	require.Equal(t, 1, billing.Count(t, "SELECT count(*) FROM received WHERE handler = 'notify' AND order_id = 'alice-poison'"),
		"the handler that had succeeded did not run again")
}

// The broker connections of publisher and receivers are cut again and
// again during a burst (through a proxy of this test, the way
// `rabbitmqctl close_all_connections` would, without touching other
// tests' connections): every message is still handled exactly once per
// handler.
func TestRabbitSurvivesDroppedConnectionsDuringABurst(t *testing.T) {
	t.Parallel()
	proxy := kumikotest.NewProxy(t, rabbitURL())
	br := newBroker(t, proxy.URL(rabbitURL()))
	rc := &receiver{calls: map[string]int{}}
	billing := receiverApp(t, billingFeature(rc))
	svc := instance(t, billing, br.transport(t, "billing", 0))
	instance(t, billing, br.transport(t, "billing", 0))
	orders := publisher(t, br.transport(t, "orders", 0))

	const n = 120
	for i := range n {
		publish(t, orders, alice, "order.shipped", fmt.Sprintf("alice-%d", i), false)
		if i%30 == 29 {
			// Cut once messages are on their way.
			require.Eventually(t, func() bool { return billing.Count(t, "SELECT count(*) FROM received") > 0 }, 30*time.Second, 5*time.Millisecond)
			require.Positive(t, proxy.Cut())
		}
	}
	waitRows(t, billing, 2*n, "SELECT count(*) FROM received")
	require.Equal(t, 2*n, billing.Count(t, "SELECT count(*) FROM kumiko_inbox"))
	dead, err := svc.Dead().List(ctx, 10)
	require.NoError(t, err)
	require.Empty(t, dead, "no handler ran twice (it would fail on received's key)")
}

const childReceiverEnv = "KUMIKO_TEST_RABBIT_CHILD"

// childConfig is what a receiver subprocess needs.
type childConfig struct {
	DBURL, Schema, RabbitURL, Exchange, Queue string
}

// runChildReceiver is a billing instance in a process of its own whose
// invoice handler records that it started, then hangs until the process is
// killed.
func runChildReceiver(raw string) {
	var cc childConfig
	if err := json.Unmarshal([]byte(raw), &cc); err != nil {
		panic(err)
	}
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, cc.DBURL)
	if err != nil {
		panic(err)
	}
	// The marker has connections of its own: the hanging handlers hold the
	// store's.
	marker, err := pgxpool.New(ctx, cc.DBURL)
	if err != nil {
		panic(err)
	}
	hang := feature.Define("billing", func(r *feature.Registrar) {
		contracts(r)
		r.OnIntegrationEvent("order.shipped", "invoice", func(ctx feature.CommandContext, m feature.Message) error {
			if _, err := ctx.DB().Exec(ctx.Context(), `INSERT INTO received (message_id, handler) VALUES ($1, 'invoice')`, m.ID); err != nil {
				return err
			}
			if _, err := marker.Exec(ctx.Context(), `INSERT INTO entered (message_id) VALUES ($1)`, m.ID); err != nil {
				return err
			}
			select {} // mid-handler, its transaction open, until SIGKILL
		})
	})
	reg, err := registry.Build(hang)
	if err != nil {
		panic(err)
	}
	store, err := eventstore.New(pool, eventstore.Config{Schema: cc.Schema, Upcaster: reg})
	if err != nil {
		panic(err)
	}
	exec, err := pipeline.New(reg, store, pipeline.Config{})
	if err != nil {
		panic(err)
	}
	tr, err := integration.NewRabbit(integration.RabbitConfig{URL: cc.RabbitURL, Exchange: cc.Exchange, Queue: cc.Queue})
	if err != nil {
		panic(err)
	}
	svc, err := integration.New(exec, store, integration.Config{Transport: tr})
	if err != nil {
		panic(err)
	}
	if err := svc.Start(ctx); err != nil {
		panic(err)
	}
	select {}
}

// Two instances of billing share its queue; one, a process of its own,
// hangs in every handler it starts and is killed with SIGKILL there: its
// transactions never commit, the broker hands its messages to the other
// instance, and every message is handled exactly once per handler.
func TestRabbitReceiverKilledMidHandler(t *testing.T) {
	t.Parallel()
	br := newBroker(t, rabbitURL())
	rc := &receiver{calls: map[string]int{}}
	billing := receiverApp(t, billingFeature(rc))
	billing.Exec(t, "CREATE TABLE entered (message_id uuid)")
	instance(t, billing, br.transport(t, "billing", 0))
	raw, err := json.Marshal(childConfig{DBURL: billing.URL, Schema: billing.Schema, RabbitURL: br.url, Exchange: br.exchange, Queue: br.prefix + "-billing"})
	require.NoError(t, err)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childReceiverEnv+"="+string(raw))
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	// Publish once both instances consume, so the broker shares the messages.
	require.Eventually(t, func() bool { return queueConsumers(br.prefix+"-billing") == 2 }, 30*time.Second, 10*time.Millisecond)
	orders := publisher(t, br.transport(t, "orders", 0))
	const n = 20
	for i := range n {
		publish(t, orders, alice, "order.shipped", fmt.Sprintf("alice-%d", i), false)
	}

	waitRows(t, billing, 1, "SELECT least(count(*), 1) FROM entered")
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	_ = cmd.Wait()
	waitRows(t, billing, 2*n, "SELECT count(*) FROM received")
	require.Equal(t, n, billing.Count(t, "SELECT count(DISTINCT order_id) FROM received WHERE handler = 'invoice'"))
	require.Zero(t, billing.Count(t, "SELECT count(*) FROM received WHERE order_id IS NULL"), "no write of the killed handlers committed")
}

// queueConsumers is how many consumers the queue has (-1 when it is not
// there).
func queueConsumers(name string) int {
	conn, err := amqp.Dial(rabbitURL())
	if err != nil {
		return -1
	}
	defer func() { _ = conn.Close() }()
	ch, err := conn.Channel()
	if err != nil {
		return -1
	}
	q, err := ch.QueueDeclarePassive(name, true, false, false, false, amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeQuorum})
	if err != nil {
		return -1
	}
	return q.Consumers
}

// A new version of billing that no longer handles order.shipped unbinds it
// at start: the broker drops the contract for billing's queue from then on.
func TestRabbitStartUnbindsContractsNoLongerHandled(t *testing.T) {
	t.Parallel()
	br := newBroker(t, rabbitURL())
	billing := receiverApp(t, billingFeature(&receiver{calls: map[string]int{}}))
	v1, err := integration.New(billing.Executor, billing.Store, integration.Config{Transport: br.transport(t, "billing", 0)})
	require.NoError(t, err)
	require.NoError(t, v1.Start(ctx))
	require.NoError(t, v1.Stop(ctx))

	// v2: the same app and queue, handling order.cancelled only.
	reg, err := registry.Build(auditFeature(&receiver{calls: map[string]int{}}))
	require.NoError(t, err)
	exec, err := pipeline.New(reg, billing.Store, pipeline.Config{})
	require.NoError(t, err)
	v2, err := integration.New(exec, billing.Store, integration.Config{Transport: br.transport(t, "billing", 0)})
	require.NoError(t, err)
	require.NoError(t, v2.Start(ctx))
	require.NoError(t, v2.Stop(ctx)) // nobody consumes: the queue keeps what is routed to it

	pub := br.transport(t, "orders", 0)
	t.Cleanup(func() { _ = pub.Stop(context.Background()) })
	for _, typ := range []string{"order.shipped", "order.cancelled"} {
		// Publish returns once the broker confirmed, which it does after routing.
		require.NoError(t, pub.Publish(ctx, []feature.Message{{ID: uuid.Must(uuid.NewV7()), Type: typ, Version: 1,
			Payload: json.RawMessage(`{"orderId":"x"}`), TenantID: tenantA}}))
	}
	require.Equal(t, 1, queueDepth(t, br.prefix+"-billing"), "only order.cancelled reached billing's queue")
	require.Equal(t, []string{"order.cancelled"}, boundTypes(t, billing))
}

func queueDepth(t *testing.T, name string) int {
	t.Helper()
	conn, err := amqp.Dial(rabbitURL())
	require.NoError(t, err)
	defer func() { _ = conn.Close() }()
	ch, err := conn.Channel()
	require.NoError(t, err)
	q, err := ch.QueueDeclarePassive(name, true, false, false, false, amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeQuorum})
	require.NoError(t, err)
	return q.Messages
}

func boundTypes(t *testing.T, app *kumikotest.App) []string {
	t.Helper()
	rows, err := app.Pool.Query(ctx, "SELECT type FROM kumiko_integration_bindings ORDER BY type")
	require.NoError(t, err)
	types, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return types
}

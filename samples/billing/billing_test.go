package billing_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/consumer"
	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/integration"
	"github.com/kumiko-go/kumiko/kumikotest"
	"github.com/kumiko-go/kumiko/pipeline"
	"github.com/kumiko-go/kumiko/samples/billing"
	"github.com/kumiko-go/kumiko/samples/orders"
)

var (
	ctx    = context.Background()
	tenant = uuid.MustParse("0190a000-0000-7000-8000-00000000000a")
	clerk  = kumikotest.User(tenant, "clerk", "User")
)

func call(t *testing.T, run func(context.Context, pipeline.Caller, pipeline.Request) (any, error), typ, payload string) map[string]any {
	t.Helper()
	out, err := run(ctx, clerk, pipeline.Request{Type: typ, Payload: json.RawMessage(payload)})
	require.NoError(t, err)
	raw, err := json.Marshal(out)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(raw, &m))
	return m
}

// shipOrder creates an order and ships it; it returns the order id.
func shipOrder(t *testing.T, app *kumikotest.App) string {
	t.Helper()
	order := call(t, app.Executor.Write, "order.create", `{"customer":"ACME","total":120.5}`)
	id := order["id"].(string)
	call(t, app.Executor.Command, "order.ship", `{"id":"`+id+`","version":1}`)
	_, err := app.Executor.Command(ctx, clerk, pipeline.Request{Type: "order.ship", Payload: json.RawMessage(`{"id":"` + id + `","version":2}`)})
	require.Error(t, err, "an order ships once")
	return id
}

// relay runs the app's relay on tr (nil: in process) under a started
// dispatcher.
func relay(t *testing.T, app *kumikotest.App, tr integration.Transport) {
	t.Helper()
	svc, err := integration.New(app.Executor, app.Store, integration.Config{Transport: tr})
	require.NoError(t, err)
	require.NoError(t, svc.Start(ctx))
	t.Cleanup(func() { require.NoError(t, svc.Stop(context.Background())) })
	r, ok := svc.Relay()
	require.True(t, ok)
	d, err := consumer.New(app.Store, consumer.Config{InstanceID: "sample", PollInterval: 50 * time.Millisecond}, r)
	require.NoError(t, err)
	require.NoError(t, d.Start(ctx))
	t.Cleanup(func() { require.NoError(t, d.Stop(context.Background())) })
}

func invoiceOf(t *testing.T, app *kumikotest.App, orderID string) {
	t.Helper()
	require.Eventually(t, func() bool {
		return app.Count(t, "SELECT count(*) FROM read_invoice WHERE order_id = $1 AND tenant_id = $2", orderID, tenant) == 1
	}, 30*time.Second, 10*time.Millisecond)
	list := call(t, app.Executor.Query, "invoice.list", `{}`)
	rows := list["rows"].([]any)
	require.Len(t, rows, 1)
	require.Equal(t, "ACME", rows[0].(map[string]any)["customer"])
	require.EqualValues(t, 120.5, rows[0].(map[string]any)["amount"])
}

// Without a broker: orders and billing as one app, delivered in process.
func TestShippedOrderIsInvoicedInProcess(t *testing.T) {
	t.Parallel()
	app := kumikotest.NewApp(t, []*feature.Feature{orders.Feature, billing.Feature})
	relay(t, app, nil)
	invoiceOf(t, app, shipOrder(t, app))
}

// With RabbitMQ: two apps, each with its own database and queue.
func TestShippedOrderIsInvoicedByAnotherAppOverRabbitMQ(t *testing.T) {
	t.Parallel()
	url := os.Getenv("RABBITMQ_URL")
	if url == "" {
		url = integration.DefaultRabbitURL
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	prefix := "sample-" + hex.EncodeToString(b)
	transport := func(app string) integration.Transport {
		tr, err := integration.NewRabbit(integration.RabbitConfig{URL: url, Exchange: prefix + ".events", Queue: prefix + "-" + app})
		require.NoError(t, err)
		return tr
	}
	t.Cleanup(func() {
		conn, err := amqp.Dial(url)
		require.NoError(t, err)
		defer func() { _ = conn.Close() }()
		ch, err := conn.Channel()
		require.NoError(t, err)
		for _, q := range []string{prefix + "-billing", prefix + "-billing.dead"} {
			_, err := ch.QueueDelete(q, false, false, false)
			require.NoError(t, err)
		}
		require.NoError(t, ch.ExchangeDelete(prefix+".events", false, false))
	})

	billingApp := kumikotest.NewApp(t, []*feature.Feature{billing.Feature})
	b1, err := integration.New(billingApp.Executor, billingApp.Store, integration.Config{Transport: transport("billing")})
	require.NoError(t, err)
	require.NoError(t, b1.Start(ctx), "RabbitMQ at %s must be running (make services)", url)
	t.Cleanup(func() { require.NoError(t, b1.Stop(context.Background())) })

	ordersApp := kumikotest.NewApp(t, []*feature.Feature{orders.Feature})
	relay(t, ordersApp, transport("orders"))
	invoiceOf(t, billingApp, shipOrder(t, ordersApp))
}

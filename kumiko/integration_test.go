package kumiko_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	khttp "github.com/kumiko-go/kumiko/http"
	"github.com/kumiko-go/kumiko/kumiko"
	"github.com/kumiko-go/kumiko/kumikotest"
	"github.com/kumiko-go/kumiko/samples/billing"
	"github.com/kumiko-go/kumiko/samples/orders"
)

// Without RabbitMQURL the app relays its integration events in process: an
// order shipped through the API is invoiced by the billing feature, and
// the relay's shard shows in the consumers.
func TestAppDeliversIntegrationEventsInProcess(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	ctx := context.Background()
	app, err := kumiko.New(ctx, kumiko.Config{DatabaseURL: db.URL, Schema: db.Schema, JWTSecret: secret,
		Addr: "127.0.0.1:0", InstanceID: "shop-1"}, orders.Feature, billing.Feature)
	require.NoError(t, err)
	require.NoError(t, app.Start(ctx))
	t.Cleanup(func() { _ = app.Stop(context.Background()) })

	token, err := khttp.IssueToken([]byte(secret), "u-1", "01900000-0000-7000-8000-000000000001", []string{"User"}, time.Minute)
	require.NoError(t, err)
	base := "http://" + app.Addr()
	created := post(t, base+"/api/write", token, `{"type":"order.create","payload":{"customer":"ACME","total":10}}`, http.StatusOK)
	var res struct{ Data struct{ ID string } }
	require.NoError(t, json.Unmarshal([]byte(created), &res))
	id := res.Data.ID
	post(t, base+"/api/command", token, `{"type":"order.ship","payload":{"id":"`+id+`","version":1}}`, http.StatusOK)
	require.Eventually(t, func() bool {
		return db.Count(t, "SELECT count(*) FROM read_invoice WHERE order_id = $1", id) == 1
	}, 30*time.Second, 10*time.Millisecond)
	require.Equal(t, 1, db.Count(t, "SELECT count(*) FROM kumiko_event_consumers WHERE name = 'kumiko.integration-relay'"))

	// The relay counts a message published once its batch is settled.
	counter := func(name string) float64 {
		families, err := app.Parts().Metrics.Gather()
		require.NoError(t, err)
		total := 0.0
		for _, f := range families {
			for _, m := range f.GetMetric() {
				if f.GetName() == name {
					total += m.GetCounter().GetValue()
				}
			}
		}
		return total
	}
	require.Eventually(t, func() bool { return counter("kumiko_integration_published_total") == 1 }, 30*time.Second, 10*time.Millisecond)
	require.Equal(t, 1.0, counter("kumiko_integration_handled_total"))
	require.Zero(t, counter("kumiko_integration_failed_total"))
}

// One HTTP command publishes order.shipped, in process: the relay's
// publish span is a child of the command's span, and the billing handler's
// span a child of the publish span, all in the request's trace.
func TestTraceOfAPublishAndItsHandler(t *testing.T) {
	t.Parallel()
	tp, _, byName := recordSpans(t)
	db := kumikotest.NewDB(t)
	ctx := context.Background()
	app, err := kumiko.New(ctx, kumiko.Config{DatabaseURL: db.URL, Schema: db.Schema, JWTSecret: secret,
		Addr: "127.0.0.1:0", InstanceID: "shop-trace", TracerProvider: tp}, orders.Feature, billing.Feature)
	require.NoError(t, err)
	require.NoError(t, app.Start(ctx))
	t.Cleanup(func() { _ = app.Stop(context.Background()) })

	token := issue(t, []string{"User"})
	base := "http://" + app.Addr()
	var res struct{ Data struct{ ID string } }
	require.NoError(t, json.Unmarshal([]byte(post(t, base+"/api/write", token, `{"type":"order.create","payload":{"customer":"ACME","total":10}}`, http.StatusOK)), &res))
	post(t, base+"/api/command", token, `{"type":"order.ship","payload":{"id":"`+res.Data.ID+`","version":1}}`, http.StatusOK)

	awaitSpan(t, byName, "integration.handle order.shipped create-invoice")
	cmd := byName("cmd.order.ship")
	require.Len(t, cmd, 1)
	publish := byName("integration.publish order.shipped")
	require.Len(t, publish, 1)
	handle := byName("integration.handle order.shipped create-invoice")[0]
	require.Equal(t, cmd[0].SpanContext.TraceID(), publish[0].SpanContext.TraceID())
	require.Equal(t, cmd[0].SpanContext.SpanID(), publish[0].Parent.SpanID(), "publish is a child of the command")
	require.Equal(t, cmd[0].SpanContext.TraceID(), handle.SpanContext.TraceID(), "the handler runs in the request's trace")
	require.Equal(t, publish[0].SpanContext.SpanID(), handle.Parent.SpanID(), "the handler's span is a child of publish")
}

package integration_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/integration"
	"github.com/kumiko-go/kumiko/kumikotest"
	"github.com/kumiko-go/kumiko/pipeline"
)

// recorder is a tracer provider that keeps every span in memory.
type recorder struct {
	tp  *sdktrace.TracerProvider
	exp *tracetest.InMemoryExporter
}

func newRecorder(t *testing.T) recorder {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return recorder{tp: tp, exp: exp}
}

func (r recorder) named(name string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range r.exp.GetSpans() {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// request starts the span of a request the test makes.
func (r recorder) request(name string) (context.Context, trace.Span) {
	return r.tp.Tracer("test").Start(ctx, name)
}

func attr(s tracetest.SpanStub, key string) attribute.Value {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

// requirePublishedUnder checks that the message's publish span is a
// producer child of the request's span and handle the consumer child of
// the publish span, in the request's trace.
func requirePublishedUnder(t *testing.T, req trace.Span, publish, handle tracetest.SpanStub) {
	t.Helper()
	rsc := req.SpanContext()
	require.Equal(t, trace.SpanKindProducer, publish.SpanKind)
	require.Equal(t, rsc.TraceID(), publish.SpanContext.TraceID(), "the publish span is in the request's trace")
	require.Equal(t, rsc.SpanID(), publish.Parent.SpanID(), "the publish span is the publishing request's child")
	require.Equal(t, trace.SpanKindConsumer, handle.SpanKind)
	require.Equal(t, rsc.TraceID(), handle.SpanContext.TraceID(), "the handler's span is in the request's trace")
	require.Equal(t, publish.SpanContext.SpanID(), handle.Parent.SpanID(), "the handler's span is the publish span's child")
	require.Equal(t, attr(publish, "messaging.message.id"), attr(handle, "messaging.message.id"))
}

// One command publishes, in process: the relay's publish span is a child
// of the command's request, each handler run a child of the publish span;
// a failing handler's runs carry the error and their attempt.
func TestSpansOfPublishAndHandleInProcess(t *testing.T) {
	t.Parallel()
	rec := newRecorder(t)
	e := newEnv(t, integration.Config{TracerProvider: rec.tp})
	e.shop.poison.Store(true)

	rctx, req := rec.request("POST /api/write")
	_, err := e.Executor.Command(rctx, alice, pipeline.Request{Type: "order.ship", Payload: []byte(`{"orderId":"t-1","poison":true}`)})
	require.NoError(t, err)
	req.End()
	e.relay(t)

	publish := rec.named("integration.publish order.shipped")
	require.Len(t, publish, 1)
	record := rec.named("integration.handle order.shipped record")
	require.Len(t, record, 1)
	requirePublishedUnder(t, req, publish[0], record[0])
	require.Equal(t, e.message(t).ID.String(), attr(record[0], "messaging.message.id").AsString())
	require.Equal(t, "record", attr(record[0], "kumiko.handler").AsString())
	require.Equal(t, alice.User.TenantID.String(), attr(record[0], "kumiko.tenant_id").AsString())
	require.Equal(t, int64(1), attr(record[0], "kumiko.attempt").AsInt64())
	require.Equal(t, codes.Unset, record[0].Status.Code)

	flaky := rec.named("integration.handle order.shipped flaky")
	require.Len(t, flaky, integration.DefaultMaxAttempts)
	for i, s := range flaky {
		require.Equal(t, codes.Error, s.Status.Code)
		require.Contains(t, s.Status.Description, "poisoned")
		require.Equal(t, int64(i+1), attr(s, "kumiko.attempt").AsInt64())
		require.Equal(t, i > 0, attr(s, "kumiko.redelivered").AsBool())
		require.Equal(t, publish[0].SpanContext.SpanID(), s.Parent.SpanID())
	}
}

// The same over RabbitMQ: the trace context crosses the broker in the AMQP
// headers, so the receiving app's handler spans are children of the
// publishing app's publish span, in the request's trace.
func TestSpansOfPublishAndHandleOverRabbit(t *testing.T) {
	t.Parallel()
	br := newBroker(t, rabbitURL())
	pubRec, recvRec := newRecorder(t), newRecorder(t)
	rc := &receiver{calls: map[string]int{}}
	billing := receiverApp(t, billingFeature(rc))
	instanceWith(t, billing, integration.Config{Transport: br.transport(t, "billing", 0), TracerProvider: recvRec.tp})
	orders := publisherOf(t, kumikotest.NewApp(t, []*feature.Feature{orders}),
		integration.Config{Transport: br.transport(t, "orders", 0), TracerProvider: pubRec.tp})

	rctx, req := pubRec.request("POST /api/write")
	_, err := orders.Executor.Command(rctx, alice, pipeline.Request{Type: "order.publish", Payload: []byte(`{"type":"order.shipped","orderId":"t-2"}`)})
	require.NoError(t, err)
	req.End()
	waitRows(t, billing, 2, "SELECT count(*) FROM received")
	require.Eventually(t, func() bool {
		return len(recvRec.named("integration.handle order.shipped invoice")) == 1 &&
			len(recvRec.named("integration.handle order.shipped notify")) == 1
	}, 10*time.Second, 5*time.Millisecond, "the handler spans end after their transactions committed")
	require.Eventually(t, func() bool { return len(pubRec.named("integration.publish order.shipped")) == 1 },
		10*time.Second, 5*time.Millisecond, "the publish span ends once the broker confirmed")

	publish := pubRec.named("integration.publish order.shipped")[0]
	for _, h := range []string{"invoice", "notify"} {
		handle := recvRec.named("integration.handle order.shipped " + h)[0]
		requirePublishedUnder(t, req, publish, handle)
		require.Equal(t, h, attr(handle, "kumiko.handler").AsString())
		require.Equal(t, alice.User.TenantID.String(), attr(handle, "kumiko.tenant_id").AsString())
		require.Equal(t, int64(1), attr(handle, "kumiko.attempt").AsInt64())
		require.False(t, attr(handle, "kumiko.redelivered").AsBool())
	}
}

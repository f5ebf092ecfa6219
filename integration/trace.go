package integration

import (
	"context"
	"maps"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/kumiko-go/kumiko/feature"
)

// TracerName is the instrumentation scope of the package's spans: a
// producer span "integration.publish <type>" per message the relay hands to
// the transport, a child of the publishing request's span, and a consumer
// span "integration.handle <type> <handler>" per handler run, a child of
// the publish span. The trace context travels in the message's headers
// (traceparent; AMQP headers over RabbitMQ).
const TracerName = "github.com/kumiko-go/kumiko/integration"

// publisherContext is ctx with the span that published m (the trace
// context in its headers) as the current span; ctx when m carries none.
func publisherContext(ctx context.Context, m feature.Message) context.Context {
	if len(m.Headers) == 0 {
		return ctx
	}
	return propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier(m.Headers))
}

// withSpan returns m's headers with the trace context of span in place of
// the publisher's (a copy), so what follows m links to span; the headers as
// they are when span records nothing.
func withSpan(ctx context.Context, span trace.Span, headers map[string]string) map[string]string {
	if !span.IsRecording() {
		return headers
	}
	out := make(map[string]string, len(headers)+2)
	maps.Copy(out, headers)
	propagation.TraceContext{}.Inject(ctx, propagation.MapCarrier(out))
	return out
}

// startPublish starts the producer span of m, a child of the request that
// published it and linked to the relay's pass, and returns m with the
// span's trace context in its headers.
func (s *Service) startPublish(ctx context.Context, m feature.Message) (context.Context, feature.Message, trace.Span) {
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(
		attribute.String("messaging.message.id", m.ID.String()), attribute.String("kumiko.type", m.Type),
		attribute.Int("kumiko.event_version", m.Version), attribute.String("kumiko.tenant_id", m.TenantID.String()))}
	if pass := trace.SpanContextFromContext(ctx); pass.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: pass}))
	}
	ctx, span := s.tracer.Start(publisherContext(ctx, m), "integration.publish "+m.Type, opts...)
	m.Headers = withSpan(ctx, span, m.Headers)
	return ctx, m, span
}

// startHandle starts the consumer span of handler's run on m, a child of
// the span that published m.
func (s *Service) startHandle(ctx context.Context, handler string, m feature.Message) (context.Context, trace.Span) {
	attempt := attemptOf(ctx)
	return s.tracer.Start(publisherContext(ctx, m), "integration.handle "+m.Type+" "+handler,
		trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(
			attribute.String("messaging.message.id", m.ID.String()), attribute.String("kumiko.type", m.Type),
			attribute.String("kumiko.handler", handler), attribute.String("kumiko.tenant_id", m.TenantID.String()),
			attribute.Int("kumiko.event_version", m.Version), attribute.Int("kumiko.published_version", publishedVersion(m)),
			attribute.Int("kumiko.attempt", attempt), attribute.Bool("kumiko.redelivered", attempt > 1)))
}

// endSpan records err on span, if any, and ends it.
func endSpan(span trace.Span, err error) {
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// attemptKey carries the delivery attempt of a message (1 for the first)
// from the transport to the handler spans.
type attemptKey struct{}

func withAttempt(ctx context.Context, attempt int) context.Context {
	return context.WithValue(ctx, attemptKey{}, attempt)
}

func attemptOf(ctx context.Context) int {
	if n, ok := ctx.Value(attemptKey{}).(int); ok && n > 0 {
		return n
	}
	return 1
}

// publishedVersion is the contract version m was published with.
func publishedVersion(m feature.Message) int {
	if m.PublishedVersion != 0 {
		return m.PublishedVersion
	}
	return m.Version
}

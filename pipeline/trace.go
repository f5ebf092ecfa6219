package pipeline

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// TracerName is the instrumentation scope of the executor's spans:
// "cmd.<type>" (a write or command), "query.<type>" and "batch", each with
// the children "validate", "load", "event.append" (one per event) and
// "project".
const TracerName = "github.com/kumiko-go/kumiko/pipeline"

// HeaderTraceparent is the metadata header that carries the W3C trace
// context of the request that appended an event, so the consumers, jobs and
// integration handlers that react to it link back to that request.
const HeaderTraceparent = "traceparent"

// endSpan records err on span, if any, and ends it.
func endSpan(span trace.Span, err error) {
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
		if e := AsError(err); e != nil {
			span.SetAttributes(attribute.String("kumiko.error_code", e.Code()))
		}
	}
	span.End()
}

// withTraceparent returns headers with the trace context of ctx added (a
// copy; headers is not changed); headers itself when ctx carries none.
func withTraceparent(ctx context.Context, headers map[string]string) map[string]string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return headers
	}
	out := make(map[string]string, len(headers)+2)
	for k, v := range headers {
		out[k] = v
	}
	propagation.TraceContext{}.Inject(ctx, propagation.MapCarrier(out))
	return out
}

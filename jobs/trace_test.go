package jobs_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/kumiko-go/kumiko/jobs"
	"github.com/kumiko-go/kumiko/kumikotest"
)

// spanNames is a tracer provider that records the names of the spans
// started through it; the spans themselves are no-ops.
type spanNames struct {
	tracenoop.TracerProvider
	mu    sync.Mutex
	names []string
}

type namingTracer struct {
	tracenoop.Tracer
	p *spanNames
}

func (p *spanNames) Tracer(string, ...trace.TracerOption) trace.Tracer { return namingTracer{p: p} }

func (t namingTracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	t.p.mu.Lock()
	t.p.names = append(t.p.names, name)
	t.p.mu.Unlock()
	return t.Tracer.Start(ctx, name, opts...)
}

func (p *spanNames) has(name string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, n := range p.names {
		if n == name {
			return true
		}
	}
	return false
}

// An enqueue and an attempt each get a span.
func TestSpans(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	tp := &spanNames{}
	r := newRunner(t, db, jobs.Config{TracerProvider: tp}, true, jobs.Job{Name: "traced", Work: noop})
	e, err := r.Enqueue(t.Context(), "traced", nil, jobs.Options{})
	require.NoError(t, err)
	waitState(t, r, e.ID, "completed")
	require.True(t, tp.has("river.work/traced"), "spans: %v", tp.names)
	require.True(t, tp.has("river.insert_many"), "spans: %v", tp.names)
}

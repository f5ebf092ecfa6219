package kumiko_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/kumiko"
	"github.com/kumiko-go/kumiko/kumikotest"
	"github.com/kumiko-go/kumiko/pipeline"
	"github.com/kumiko-go/kumiko/samples/tasks"
)

// One HTTP write that a multi-stream projection then handles: the server
// span is the root, cmd.task.create its child, validate, load-free
// event.append and project the command's children; the event carries the
// command's trace context, and the projection's consumer pass links to it.
func TestTraceOfAWriteAndItsConsumer(t *testing.T) {
	t.Parallel()
	tp, exp, byName := recordSpans(t)
	db := kumikotest.NewDB(t)
	ctx := context.Background()
	app, err := kumiko.New(ctx, kumiko.Config{DatabaseURL: db.URL, Schema: db.Schema, JWTSecret: secret,
		Addr: "127.0.0.1:0", InstanceID: "trace-1", TracerProvider: tp}, tasks.Feature, counter)
	require.NoError(t, err)
	require.NoError(t, app.Start(ctx))
	t.Cleanup(func() { _ = app.Stop(context.Background()) })

	post(t, "http://"+app.Addr()+"/api/write", issue(t, []string{"User"}), `{"type":"task.create","payload":{"title":"traced"}}`, http.StatusOK)

	// The counter's pass ends after the write answered: wait for it.
	awaitSpan(t, byName, "consumer.pass task-counter")

	server := byName("POST /api/write")
	require.Len(t, server, 1)
	require.False(t, server[0].Parent.IsValid(), "the server span is the root")
	cmd := byName("cmd.task.create")
	require.Len(t, cmd, 1)
	require.Equal(t, server[0].SpanContext.SpanID(), cmd[0].Parent.SpanID(), "cmd is the server span's child")
	require.Equal(t, server[0].SpanContext.TraceID(), cmd[0].SpanContext.TraceID())
	for _, name := range []string{"validate", "event.append", "project"} {
		var children []tracetest.SpanStub
		for _, s := range byName(name) {
			if s.Parent.SpanID() == cmd[0].SpanContext.SpanID() {
				children = append(children, s)
			}
		}
		require.Len(t, children, 1, "%s is a child of cmd.task.create", name)
	}

	// The stored event carries the command's trace context.
	var stored eventstore.Event
	for e, err := range app.Parts().Store.ReadAll(ctx, 0, eventstore.ReadFilter{Types: []string{"task.created"}}) {
		require.NoError(t, err)
		stored = e
	}
	tp0 := stored.Metadata.Headers[pipeline.HeaderTraceparent]
	require.Contains(t, tp0, cmd[0].SpanContext.TraceID().String())
	require.True(t, strings.Contains(tp0, cmd[0].SpanContext.SpanID().String()), tp0)

	// The consumer's pass links to that request.
	var linked bool
	for _, pass := range byName("consumer.pass task-counter") {
		for _, l := range pass.Links {
			if l.SpanContext.TraceID() == server[0].SpanContext.TraceID() && l.SpanContext.SpanID() == cmd[0].SpanContext.SpanID() {
				linked = true
			}
		}
	}
	require.True(t, linked, "a pass of task-counter links to cmd.task.create")

	for _, s := range exp.GetSpans() {
		_, isDB := dbQueryText(s)
		require.False(t, isDB, "no database spans unless Config.TraceDatabase: %s", s.Name)
	}
}

// With TraceDatabase the statements of a write are spans inside the
// request's trace, below the command; without it (the test above) there
// are none.
func TestDatabaseSpans(t *testing.T) {
	t.Parallel()
	tp, exp, _ := recordSpans(t)
	db := kumikotest.NewDB(t)
	ctx := context.Background()
	app, err := kumiko.New(ctx, kumiko.Config{DatabaseURL: db.URL, Schema: db.Schema, JWTSecret: secret,
		Addr: "127.0.0.1:0", InstanceID: "trace-db", TracerProvider: tp, TraceDatabase: true}, tasks.Feature)
	require.NoError(t, err)
	require.NoError(t, app.Start(ctx))
	t.Cleanup(func() { _ = app.Stop(context.Background()) })

	post(t, "http://"+app.Addr()+"/api/write", issue(t, []string{"User"}), `{"type":"task.create","payload":{"title":"traced"}}`, http.StatusOK)

	spans := exp.GetSpans()
	byID := map[trace.SpanID]tracetest.SpanStub{}
	var cmd tracetest.SpanStub
	for _, s := range spans {
		byID[s.SpanContext.SpanID()] = s
		if s.Name == "cmd.task.create" {
			cmd = s
		}
	}
	require.True(t, cmd.SpanContext.IsValid(), "the command was traced")
	below := func(s tracetest.SpanStub, ancestor trace.SpanID) bool {
		for p := s.Parent.SpanID(); p.IsValid(); p = byID[p].Parent.SpanID() {
			if p == ancestor {
				return true
			}
		}
		return false
	}
	var appendSQL bool
	for _, s := range spans {
		sql, ok := dbQueryText(s)
		if !ok || !strings.Contains(sql, "kumiko_events") || !strings.Contains(strings.ToUpper(sql), "INSERT") {
			continue
		}
		require.Equal(t, cmd.SpanContext.TraceID(), s.SpanContext.TraceID(), "the insert is in the request's trace")
		require.True(t, below(s, cmd.SpanContext.SpanID()), "the insert %q is below cmd.task.create", s.Name)
		appendSQL = true
	}
	require.True(t, appendSQL, "the event's INSERT was traced")
}

// dbQueryText is a database span's statement.
func dbQueryText(s tracetest.SpanStub) (string, bool) {
	for _, a := range s.Attributes {
		if a.Key == "db.query.text" {
			return a.Value.AsString(), true
		}
	}
	return "", false
}

// recordSpans returns a tracer provider that keeps every span in memory
// (exp), and a function that returns those called name.
func recordSpans(t *testing.T) (*sdktrace.TracerProvider, *tracetest.InMemoryExporter, func(name string) []tracetest.SpanStub) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp, exp, func(name string) []tracetest.SpanStub {
		var out []tracetest.SpanStub
		for _, s := range exp.GetSpans() {
			if s.Name == name {
				out = append(out, s)
			}
		}
		return out
	}
}

// awaitSpan waits until a span called name has ended.
func awaitSpan(t *testing.T, byName func(string) []tracetest.SpanStub, name string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for len(byName(name)) == 0 {
		require.True(t, time.Now().Before(deadline), "no span %s was recorded", name)
		time.Sleep(10 * time.Millisecond) // polling a condition with a deadline
	}
}

package kumikotest

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/pipeline"
	"github.com/kumiko-go/kumiko/registry"
)

// Given is an event a test appends directly to the event store as setup,
// without a handler: the history the test starts from. Read tables are not
// touched; a test that needs them rebuilt calls Executor.RebuildProjection.
type Given struct {
	// Stream is the aggregate the event belongs to; the tenant of Given's
	// call owns it.
	Stream uuid.UUID
	// AggregateType is the entity or aggregate name ("task").
	AggregateType string
	// Type is the event type ("task.created").
	Type string
	// EventVersion is the payload generation it is stored as; 0 means 1.
	// An older version is read through the registry's migrations.
	EventVersion int
	// Payload encodes to a JSON object (a struct, a map, json.RawMessage).
	Payload any
}

// Given appends events to tenant's streams in order, each at the next
// version of its stream, and fails the test on error.
func (a *App) Given(t testing.TB, tenant uuid.UUID, events ...Given) {
	t.Helper()
	ctx := context.Background()
	for _, g := range events {
		info, err := a.Store.StreamInfo(ctx, tenant, g.Stream)
		if err != nil && !errors.Is(err, eventstore.ErrAggregateNotFound) {
			t.Fatalf("kumikotest: given %s: %v", g.Type, err)
		}
		stream := eventstore.Stream{TenantID: tenant, AggregateType: g.AggregateType, AggregateID: g.Stream}
		ev := eventstore.NewEvent{Type: g.Type, EventVersion: g.EventVersion, Payload: g.Payload,
			Metadata: eventstore.Metadata{UserID: "kumikotest"}}
		if _, err := a.Store.Append(ctx, stream, info.Version, ev); err != nil {
			t.Fatalf("kumikotest: given %s: %v", g.Type, err)
		}
	}
}

// Outcome is what one request of When did: its result or its error, and the
// events it appended.
type Outcome struct {
	t      testing.TB
	Result any
	Err    error
	// Events are the events the request appended, in order.
	Events []eventstore.Event
}

// When runs one request as caller: a command, or a CRUD write when typ names
// one (task.create, task.update, …). payload is marshalled to JSON (a
// json.RawMessage or string is used as is). The outcome is checked with its
// Then methods.
func (a *App) When(t testing.TB, caller pipeline.Caller, typ string, payload any) *Outcome {
	t.Helper()
	ctx := context.Background()
	before := a.head(t)
	req := pipeline.Request{Type: typ, Payload: rawJSON(t, payload)}
	run := a.Executor.Command
	if h, ok := a.Registry.Handler(typ); ok && h.Kind == registry.KindWrite {
		run = a.Executor.Write
	}
	o := &Outcome{t: t}
	o.Result, o.Err = run(ctx, caller, req)
	for e, err := range a.Store.ReadAll(ctx, before, eventstore.ReadFilter{}) {
		if err != nil {
			t.Fatalf("kumikotest: read events: %v", err)
		}
		o.Events = append(o.Events, e)
	}
	return o
}

// ThenEvents fails the test unless the request succeeded and appended exactly
// these event types, in this order. It returns the outcome for more checks.
func (o *Outcome) ThenEvents(types ...string) *Outcome {
	o.t.Helper()
	if o.Err != nil {
		o.t.Fatalf("kumikotest: want events %v, got error %v", types, o.Err)
	}
	got := make([]string, len(o.Events))
	for i, e := range o.Events {
		got[i] = e.Type
	}
	if !slices.Equal(got, types) {
		o.t.Fatalf("kumikotest: want events %v, got %v", types, got)
	}
	return o
}

// ThenError fails the test unless the request failed with this error code
// (and, when given, this reason) and appended nothing.
func (o *Outcome) ThenError(code string, reason ...string) *Outcome {
	o.t.Helper()
	if o.Err == nil {
		o.t.Fatalf("kumikotest: want error %s, got success %v", code, o.Result)
	}
	e := pipeline.AsError(o.Err)
	if e.Code() != code || (len(reason) > 0 && e.Reason() != reason[0]) {
		o.t.Fatalf("kumikotest: want error %s %v, got %s (%s): %v", code, reason, e.Code(), e.Reason(), o.Err)
	}
	if len(o.Events) > 0 {
		o.t.Fatalf("kumikotest: a failed request appended %d events", len(o.Events))
	}
	return o
}

// Payload decodes the payload of the i-th appended event into T, failing the
// test when there is no such event or it does not decode.
func Payload[T any](o *Outcome, i int) T {
	o.t.Helper()
	var v T
	if i >= len(o.Events) {
		o.t.Fatalf("kumikotest: no event %d among %d", i, len(o.Events))
	}
	if err := json.Unmarshal(o.Events[i].Payload, &v); err != nil {
		o.t.Fatalf("kumikotest: event %d: %v", i, err)
	}
	return v
}

// Result is the result of a successful request as a T: the handler's own
// value when it returned a T (a handler declared with feature.Command or
// feature.Query, or a read with feature.RowsAs), else decoded through its
// JSON form, as a client would see it.
func Result[T any](o *Outcome) T {
	o.t.Helper()
	if o.Err != nil {
		o.t.Fatalf("kumikotest: the request failed: %v", o.Err)
	}
	if v, ok := o.Result.(T); ok {
		return v
	}
	return convert[T](o.t, o.Result)
}

// convert re-decodes v into T through JSON.
func convert[T any](t testing.TB, v any) T {
	t.Helper()
	var out T
	raw, err := json.Marshal(v)
	if err == nil {
		err = json.Unmarshal(raw, &out)
	}
	if err != nil {
		t.Fatalf("kumikotest: decode %T: %v", out, err)
	}
	return out
}

// rawJSON is payload as JSON: raw bytes and strings as they are.
func rawJSON(t testing.TB, payload any) json.RawMessage {
	t.Helper()
	switch p := payload.(type) {
	case json.RawMessage:
		return p
	case string:
		return json.RawMessage(p)
	case []byte:
		return json.RawMessage(p)
	}
	raw, err := json.Marshal(payload)
	if err != nil {
		t.Fatalf("kumikotest: payload: %v", err)
	}
	return raw
}

// head is the id of the newest event.
func (a *App) head(t testing.TB) int64 {
	t.Helper()
	var id int64
	err := a.Store.WithTx(context.Background(), func(ctx context.Context, tx pgx.Tx) (err error) {
		id, err = a.Store.HeadTx(ctx, tx, eventstore.ReadFilter{})
		return err
	})
	if err != nil {
		t.Fatalf("kumikotest: head: %v", err)
	}
	return id
}

package eventstore_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/kumikotest"
)

// renameUpcaster brings task.renamed from v1 {"name"} to v2 {"title"} and
// knows no version beyond 2.
var renameUpcaster = eventstore.UpcasterFunc(func(typ string, v int, p json.RawMessage) (int, json.RawMessage, error) {
	if typ != "task.renamed" || v == 2 {
		return v, p, nil
	}
	if v != 1 {
		return 0, nil, &eventstore.UnknownEventVersionError{Type: typ, Version: v, Current: 2}
	}
	var m map[string]any
	if err := json.Unmarshal(p, &m); err != nil {
		return 0, nil, err
	}
	m["title"] = m["name"]
	delete(m, "name")
	out, err := json.Marshal(m)
	return 2, out, err
})

// The upcaster runs on every read path; the stored row is never rewritten.
func TestUpcastOnEveryRead(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t, kumikotest.StoreConfig(eventstore.Config{Upcaster: renameUpcaster}))
	ctx := context.Background()
	s := db.Store
	res, err := s.Append(ctx, eventstore.Stream{TenantID: tenantA, AggregateType: "task"}, 0,
		eventstore.NewEvent{Type: "task.renamed", EventVersion: 1, Payload: json.RawMessage(`{"name":"old"}`)},
		eventstore.NewEvent{Type: "task.renamed", EventVersion: 2, Payload: json.RawMessage(`{"title":"new"}`)},
		eventstore.NewEvent{Type: "task.touched", Payload: json.RawMessage(`{}`)})
	require.NoError(t, err)
	require.NoError(t, s.SaveSnapshot(ctx, eventstore.Snapshot{TenantID: tenantA, AggregateID: res.AggregateID, Version: 0 + 1, State: json.RawMessage(`{}`)}))

	check := func(e eventstore.Event) {
		t.Helper()
		switch e.Version {
		case 1:
			require.Equal(t, 2, e.EventVersion)
			require.JSONEq(t, `{"title":"old"}`, string(e.Payload))
			require.Equal(t, 1, e.StoredEventVersion)
			require.JSONEq(t, `{"name":"old"}`, string(e.StoredPayload))
			require.True(t, e.Upcasted())
		default:
			require.False(t, e.Upcasted())
			require.Equal(t, e.StoredPayload, e.Payload)
		}
	}
	evs, err := s.Load(ctx, tenantA, res.AggregateID, eventstore.LoadOptions{})
	require.NoError(t, err)
	require.Len(t, evs, 3)
	for _, e := range evs {
		check(e)
	}
	for e, err := range s.ReadAll(ctx, 0, eventstore.ReadFilter{}) {
		require.NoError(t, err)
		check(e)
	}
	// The snapshot is at version 1, so the delta holds the v1 event only when read without it.
	_, delta, err := s.LoadWithSnapshot(ctx, tenantA, res.AggregateID, 2, eventstore.LoadOptions{})
	require.NoError(t, err)
	require.Len(t, delta, 3)
	check(delta[0])

	require.Equal(t, `{"name": "old"}`, queryString(t, db, "SELECT payload::text FROM kumiko_events WHERE version = 1"))
	require.Equal(t, 1, db.Count(t, "SELECT event_version FROM kumiko_events WHERE version = 1"))
}

func TestUnknownEventVersionFailsTheRead(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t, kumikotest.StoreConfig(eventstore.Config{Upcaster: renameUpcaster}))
	ctx := context.Background()
	s := db.Store
	res, err := s.Append(ctx, eventstore.Stream{TenantID: tenantA, AggregateType: "task"}, 0,
		eventstore.NewEvent{Type: "task.renamed", EventVersion: 7, Payload: json.RawMessage(`{}`)})
	require.NoError(t, err)

	_, err = s.Load(ctx, tenantA, res.AggregateID, eventstore.LoadOptions{})
	require.ErrorIs(t, err, eventstore.ErrUnknownEventVersion)
	var uv *eventstore.UnknownEventVersionError
	require.ErrorAs(t, err, &uv)
	require.Equal(t, 7, uv.Version)
	require.Equal(t, "event_schema_unknown_version", eventstore.Code(err))
	for _, err := range s.ReadAll(ctx, 0, eventstore.ReadFilter{}) {
		require.ErrorIs(t, err, eventstore.ErrUnknownEventVersion)
	}
}

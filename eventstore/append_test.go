package eventstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/kumikotest"
)

var (
	tenantA = uuid.MustParse("0190a000-0000-7000-8000-00000000000a")
	tenantB = uuid.MustParse("0190b000-0000-7000-8000-00000000000b")
)

func ev(typ string, payload string) eventstore.NewEvent {
	return eventstore.NewEvent{Type: typ, Payload: json.RawMessage(payload)}
}

func newStream(t *testing.T, s *eventstore.Store, tenant uuid.UUID, n int) eventstore.AppendResult {
	t.Helper()
	evs := make([]eventstore.NewEvent, n)
	for i := range evs {
		evs[i] = ev("task.updated", fmt.Sprintf(`{"n":%d}`, i+1))
	}
	res, err := s.Append(context.Background(), eventstore.Stream{TenantID: tenant, AggregateType: "task"}, 0, evs...)
	require.NoError(t, err)
	return res
}

func TestAppendAndLoad(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	ctx := context.Background()
	s := db.Store

	res, err := s.Append(ctx, eventstore.Stream{TenantID: tenantA, AggregateType: "task"}, 0,
		ev("task.created", `{"title":"a"}`), ev("task.updated", `{"title":"b"}`))
	require.NoError(t, err)
	require.Equal(t, 2, res.Version)
	require.Equal(t, uuid.Version(7), res.AggregateID.Version(), "minted ids are UUIDv7")
	require.Len(t, res.Events, 2)
	require.Less(t, res.Events[0].ID, res.Events[1].ID)

	evs, err := s.Load(ctx, tenantA, res.AggregateID, eventstore.LoadOptions{})
	require.NoError(t, err)
	require.Len(t, evs, 2)
	require.Equal(t, res.Events[0].ID, evs[0].ID)
	require.Equal(t, "task.created", evs[0].Type)
	require.Equal(t, "task", evs[0].AggregateType)
	require.Equal(t, tenantA, evs[0].TenantID)
	require.JSONEq(t, `{"title":"b"}`, string(evs[1].Payload))
	require.Equal(t, []int{1, 2}, []int{evs[0].Version, evs[1].Version})
	require.Equal(t, res.Events[1].CreatedAt, evs[1].CreatedAt)

	// Appending with the right expected version continues the line.
	res2, err := s.Append(ctx, eventstore.Stream{TenantID: tenantA, AggregateType: "task", AggregateID: res.AggregateID}, 2,
		ev("task.completed", `{}`))
	require.NoError(t, err)
	require.Equal(t, 3, res2.Version)

	info, err := s.StreamInfo(ctx, tenantA, res.AggregateID)
	require.NoError(t, err)
	require.Equal(t, eventstore.StreamInfo{AggregateID: res.AggregateID, AggregateType: "task", Version: 3}, info)

	// A client-chosen id is kept.
	own := uuid.New()
	res3, err := s.Append(ctx, eventstore.Stream{TenantID: tenantA, AggregateType: "task", AggregateID: own}, 0, ev("task.created", `{}`))
	require.NoError(t, err)
	require.Equal(t, own, res3.AggregateID)

	// AnyVersion appends after whatever is there.
	res4, err := s.Append(ctx, eventstore.Stream{TenantID: tenantA, AggregateType: "task", AggregateID: own}, eventstore.AnyVersion, ev("task.updated", `{}`))
	require.NoError(t, err)
	require.Equal(t, 2, res4.Version)
}

func TestAppendRefusals(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	ctx := context.Background()
	s := db.Store
	res := newStream(t, s, tenantA, 2)
	st := eventstore.Stream{TenantID: tenantA, AggregateType: "task", AggregateID: res.AggregateID}

	_, err := s.Append(ctx, st, 1, ev("task.updated", `{}`))
	var vc *eventstore.VersionConflictError
	require.ErrorAs(t, err, &vc)
	require.ErrorIs(t, err, eventstore.ErrVersionConflict)
	require.Equal(t, 1, vc.Expected)
	require.Equal(t, 2, vc.Current)
	require.Equal(t, "version_conflict", eventstore.Code(err))

	_, err = s.Append(ctx, st, 0, ev("task.created", `{}`))
	require.ErrorAs(t, err, &vc)
	require.Equal(t, 2, vc.Current)

	missing := eventstore.Stream{TenantID: tenantA, AggregateType: "task", AggregateID: uuid.New()}
	_, err = s.Append(ctx, missing, 3, ev("task.updated", `{}`))
	require.ErrorIs(t, err, eventstore.ErrAggregateNotFound)

	for name, payload := range map[string]any{
		"array":   json.RawMessage(`[1,2]`),
		"string":  json.RawMessage(`"x"`),
		"broken":  json.RawMessage(`{"a":`),
		"nil":     nil,
		"number":  42,
		"garbage": []byte("not json"),
	} {
		_, err = s.Append(ctx, st, 2, eventstore.NewEvent{Type: "task.updated", Payload: payload})
		require.ErrorIs(t, err, eventstore.ErrInvalidEvent, name)
	}
	_, err = s.Append(ctx, st, 2, eventstore.NewEvent{Payload: json.RawMessage(`{}`)})
	require.ErrorIs(t, err, eventstore.ErrInvalidEvent)
	_, err = s.Append(ctx, eventstore.Stream{AggregateType: "task"}, 0, ev("task.created", `{}`))
	require.ErrorIs(t, err, eventstore.ErrInvalidEvent, "tenant is required")
	_, err = s.Append(ctx, st, 2)
	require.ErrorIs(t, err, eventstore.ErrInvalidEvent, "no events")

	require.Equal(t, 2, db.Count(t, "SELECT count(*) FROM kumiko_events"), "refusals wrote nothing")
}

// Many writers race for the same version: exactly one wins each round and the
// version line stays contiguous.
func TestConcurrentAppendsOneWinner(t *testing.T) {
	t.Parallel()
	const writers, rounds = 32, 20
	db := kumikotest.NewDB(t, kumikotest.MaxConns(writers+2))
	ctx := context.Background()
	s := db.Store
	res := newStream(t, s, tenantA, 1)
	st := eventstore.Stream{TenantID: tenantA, AggregateType: "task", AggregateID: res.AggregateID}

	for round := 1; round <= rounds; round++ {
		var (
			wg        sync.WaitGroup
			start     = make(chan struct{})
			mu        sync.Mutex
			wins      int
			conflicts int
		)
		for w := range writers {
			wg.Go(func() {
				<-start
				_, err := s.Append(ctx, st, round, ev("task.updated", fmt.Sprintf(`{"writer":%d}`, w)))
				mu.Lock()
				defer mu.Unlock()
				var vc *eventstore.VersionConflictError
				switch {
				case err == nil:
					wins++
				case errors.As(err, &vc):
					conflicts++
					require.Equal(t, round, vc.Expected)
					require.Equal(t, round+1, vc.Current, "the loser sees the winner's version")
				default:
					t.Errorf("round %d writer %d: unexpected error %v", round, w, err)
				}
			})
		}
		close(start)
		wg.Wait()
		require.Equal(t, 1, wins, "round %d", round)
		require.Equal(t, writers-1, conflicts, "round %d", round)
	}
	var versions []int
	rows, err := db.Pool.Query(ctx, "SELECT version FROM kumiko_events WHERE aggregate_id = $1 ORDER BY id", res.AggregateID)
	require.NoError(t, err)
	for rows.Next() {
		var v int
		require.NoError(t, rows.Scan(&v))
		versions = append(versions, v)
	}
	require.NoError(t, rows.Err())
	require.Len(t, versions, rounds+1)
	for i, v := range versions {
		require.Equal(t, i+1, v)
	}
}

func TestBatchAppendAllOrNothing(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	ctx := context.Background()
	s := db.Store
	existing := newStream(t, s, tenantA, 1)

	batch := []eventstore.StreamAppend{
		{Stream: eventstore.Stream{TenantID: tenantA, AggregateType: "task"}, Events: []eventstore.NewEvent{ev("task.created", `{"n":1}`), ev("task.updated", `{"n":2}`)}},
		{Stream: eventstore.Stream{TenantID: tenantA, AggregateType: "task", AggregateID: existing.AggregateID}, Expected: 1, Events: []eventstore.NewEvent{ev("task.updated", `{"n":3}`)}},
		{Stream: eventstore.Stream{TenantID: tenantB, AggregateType: "note"}, Events: []eventstore.NewEvent{ev("note.created", `{"n":4}`)}},
	}
	res, err := s.AppendBatch(ctx, batch)
	require.NoError(t, err)
	require.Len(t, res, 3)
	require.Equal(t, 2, res[0].Version)
	require.Equal(t, 2, res[1].Version)
	require.Equal(t, existing.AggregateID, res[1].AggregateID)
	require.Equal(t, 1, res[2].Version)
	require.Equal(t, "note", res[2].Events[0].AggregateType)
	require.JSONEq(t, `{"n":2}`, string(res[0].Events[1].Payload))
	require.Equal(t, 5, db.Count(t, "SELECT count(*) FROM kumiko_events"))

	// One stale stream in the middle refuses the whole batch.
	before := db.Count(t, "SELECT count(*) FROM kumiko_events")
	_, err = s.AppendBatch(ctx, []eventstore.StreamAppend{
		{Stream: eventstore.Stream{TenantID: tenantA, AggregateType: "task"}, Events: []eventstore.NewEvent{ev("task.created", `{}`)}},
		{Stream: eventstore.Stream{TenantID: tenantA, AggregateType: "task", AggregateID: existing.AggregateID}, Expected: 1, Events: []eventstore.NewEvent{ev("task.updated", `{}`)}},
	})
	var be *eventstore.BatchError
	require.ErrorAs(t, err, &be)
	require.Equal(t, 1, be.Index)
	require.ErrorIs(t, err, eventstore.ErrVersionConflict)
	require.Equal(t, before, db.Count(t, "SELECT count(*) FROM kumiko_events"))

	_, err = s.AppendBatch(ctx, []eventstore.StreamAppend{
		{Stream: eventstore.Stream{TenantID: tenantA, AggregateType: "task", AggregateID: existing.AggregateID}, Expected: 2, Events: []eventstore.NewEvent{ev("task.updated", `{}`)}},
		{Stream: eventstore.Stream{TenantID: tenantA, AggregateType: "task", AggregateID: existing.AggregateID}, Expected: 2, Events: []eventstore.NewEvent{ev("task.updated", `{}`)}},
	})
	require.ErrorIs(t, err, eventstore.ErrInvalidEvent, "a stream twice in one batch")
}

func TestMetadataRoundTripAndJSONBPayloads(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	ctx := context.Background()
	s := db.Store
	meta := eventstore.Metadata{
		UserID: "user-1", RequestID: "req-1", CorrelationID: "corr-1", CausationID: "42",
		IdempotencyKey: "key-1", Headers: map[string]string{"X-Client": "cli", "X-Empty": ""},
	}
	type payload struct {
		Title string   `json:"title"`
		Tags  []string `json:"tags"`
	}
	res, err := s.Append(ctx, eventstore.Stream{TenantID: tenantA, AggregateType: "task"}, 0,
		eventstore.NewEvent{Type: "task.created", EventVersion: 2, Payload: payload{Title: "ü \"quoted\"", Tags: []string{"a"}}, Metadata: meta},
		eventstore.NewEvent{Type: "task.updated", Payload: json.RawMessage(`{}`)})
	require.NoError(t, err)
	require.Equal(t, meta, res.Events[0].Metadata)

	evs, err := s.Load(ctx, tenantA, res.AggregateID, eventstore.LoadOptions{})
	require.NoError(t, err)
	require.Equal(t, meta, evs[0].Metadata)
	require.Equal(t, eventstore.Metadata{}, evs[1].Metadata)
	require.Equal(t, "user-1", evs[0].CreatedBy)
	require.Equal(t, 2, evs[0].EventVersion)
	require.Equal(t, 1, evs[1].EventVersion)
	var got payload
	require.NoError(t, json.Unmarshal(evs[0].Payload, &got))
	require.Equal(t, payload{Title: "ü \"quoted\"", Tags: []string{"a"}}, got)

	require.Equal(t, 2, db.Count(t, "SELECT count(*) FROM kumiko_events WHERE jsonb_typeof(payload) = 'object'"))
	require.Equal(t, "corr-1", queryString(t, db, "SELECT metadata->>'correlationId' FROM kumiko_events WHERE version = 1"))
	require.Equal(t, "{}", queryString(t, db, "SELECT metadata::text FROM kumiko_events WHERE version = 2"), "empty metadata is stored as {}")

	// The table itself refuses non-object payloads, whoever writes.
	_, err = db.Pool.Exec(ctx, `INSERT INTO kumiko_events (aggregate_id, aggregate_type, tenant_id, version, type, payload)
		VALUES ($1, 'task', $2, 1, 'task.created', '[1]')`, uuid.New(), tenantA)
	require.ErrorContains(t, err, "check constraint")
}

func queryString(t *testing.T, db *kumikotest.DB, sql string, args ...any) string {
	t.Helper()
	var s string
	require.NoError(t, db.Pool.QueryRow(context.Background(), sql, args...).Scan(&s))
	return s
}

// Losers of a version race inside their own transactions are told so without
// a second connection: more racing transactions than pool connections finish
// (the pool would otherwise starve), for single events and for batches.
func TestConflictsInTransactionsNeedNoSecondConnection(t *testing.T) {
	t.Parallel()
	const writers = 12
	db := kumikotest.NewDB(t, kumikotest.MaxConns(3))
	s := db.Store
	for _, events := range []int{1, 3} {
		res := newStream(t, s, tenantA, 1)
		st := eventstore.Stream{TenantID: tenantA, AggregateType: "task", AggregateID: res.AggregateID}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		var (
			wg    sync.WaitGroup
			mu    sync.Mutex
			wins  int
			start = make(chan struct{})
		)
		for range writers {
			wg.Go(func() {
				<-start
				err := s.WithTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
					evs := make([]eventstore.NewEvent, events)
					for i := range evs {
						evs[i] = ev("task.updated", `{}`)
					}
					_, err := s.AppendTx(ctx, tx, st, 1, evs...)
					if err != nil {
						// The transaction is still usable after losing.
						var one int
						require.NoError(t, tx.QueryRow(ctx, "SELECT 1").Scan(&one))
					}
					return err
				})
				mu.Lock()
				defer mu.Unlock()
				if err == nil {
					wins++
				} else {
					require.ErrorIs(t, err, eventstore.ErrVersionConflict)
				}
			})
		}
		close(start)
		wg.Wait()
		require.NoError(t, ctx.Err(), "the writers finished before the deadline")
		cancel()
		require.Equal(t, 1, wins, "%d events per append", events)
	}
}

// Events of one append keep their own metadata, whether it repeats the
// event's before it (encoded once) or not; a batch of new streams and one
// extending a stream both store every event as sent.
func TestAppendKeepsEachEventsMetadata(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	ctx := context.Background()
	s := db.Store
	a := eventstore.Metadata{UserID: "u1", RequestID: "r1", Headers: map[string]string{"traceparent": "00-a"}}
	b := eventstore.Metadata{UserID: "u1", RequestID: "r1", Headers: map[string]string{"traceparent": "00-b"}}
	with := func(m eventstore.Metadata) eventstore.NewEvent {
		e := ev("task.updated", `{}`)
		e.Metadata = m
		return e
	}
	sent := []eventstore.Metadata{a, a, b, {UserID: "u2"}, {UserID: "u2"}, a}
	evs := make([]eventstore.NewEvent, len(sent))
	for i, m := range sent {
		evs[i] = with(m)
	}
	res, err := s.Append(ctx, eventstore.Stream{TenantID: tenantA, AggregateType: "task"}, 0, evs...)
	require.NoError(t, err)
	_, err = s.Append(ctx, eventstore.Stream{TenantID: tenantA, AggregateType: "task", AggregateID: res.AggregateID}, res.Version, evs...)
	require.NoError(t, err)
	loaded, err := s.Load(ctx, tenantA, res.AggregateID, eventstore.LoadOptions{})
	require.NoError(t, err)
	require.Len(t, loaded, 2*len(sent))
	for i, e := range loaded {
		require.Equal(t, sent[i%len(sent)], e.Metadata, "event %d", i+1)
	}
}

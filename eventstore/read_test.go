package eventstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/kumikotest"
)

// Another tenant's stream behaves exactly like a missing one, for reads and
// writes, and nothing about it changes.
func TestTenantGuard(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	ctx := context.Background()
	s := db.Store
	a := newStream(t, s, tenantA, 3)
	require.NoError(t, s.SaveSnapshot(ctx, eventstore.Snapshot{TenantID: tenantA, AggregateID: a.AggregateID, Version: 2, State: json.RawMessage(`{"secret":true}`)}))
	missing := uuid.New()
	before := db.Count(t, "SELECT count(*) FROM kumiko_events")

	for _, id := range []uuid.UUID{a.AggregateID, missing} {
		evs, err := s.Load(ctx, tenantB, id, eventstore.LoadOptions{})
		require.NoError(t, err)
		require.Empty(t, evs)
		snap, evs, err := s.LoadWithSnapshot(ctx, tenantB, id, 1, eventstore.LoadOptions{})
		require.NoError(t, err)
		require.Nil(t, snap)
		require.Empty(t, evs)
		_, err = s.StreamInfo(ctx, tenantB, id)
		require.ErrorIs(t, err, eventstore.ErrAggregateNotFound)
		archived, err := s.IsArchived(ctx, tenantB, id)
		require.NoError(t, err)
		require.False(t, archived)

		st := eventstore.Stream{TenantID: tenantB, AggregateType: "task", AggregateID: id}
		_, err = s.Append(ctx, st, 3, ev("task.updated", `{"evil":true}`))
		require.ErrorIs(t, err, eventstore.ErrAggregateNotFound, "an append with a version sees a missing stream")
		require.ErrorIs(t, s.Archive(ctx, tenantB, id, "mallory", ""), eventstore.ErrAggregateNotFound)
		require.ErrorIs(t, s.Restore(ctx, tenantB, id), eventstore.ErrAggregateNotFound)
		require.ErrorIs(t, s.SaveSnapshot(ctx, eventstore.Snapshot{TenantID: tenantB, AggregateID: id, Version: 1, State: json.RawMessage(`{}`)}), eventstore.ErrAggregateNotFound)
	}
	for _, expected := range []int{0, eventstore.AnyVersion} {
		_, err := s.Append(ctx, eventstore.Stream{TenantID: tenantB, AggregateType: "task", AggregateID: a.AggregateID}, expected, ev("task.created", `{}`))
		var vc *eventstore.VersionConflictError
		require.ErrorAs(t, err, &vc, "creating a stream whose id another tenant holds is refused")
		require.Equal(t, -1, vc.Current, "the foreign stream's version is not disclosed")
	}
	for ev, err := range s.ReadAll(ctx, 0, eventstore.ReadFilter{TenantID: tenantB}) {
		require.NoError(t, err)
		t.Fatalf("tenant B reads tenant A's event %d", ev.ID)
	}

	require.Equal(t, before, db.Count(t, "SELECT count(*) FROM kumiko_events"))
	require.Equal(t, 0, db.Count(t, "SELECT count(*) FROM kumiko_events WHERE tenant_id = $1", tenantB))
	require.Equal(t, 0, db.Count(t, "SELECT count(*) FROM kumiko_archived_streams"))
	require.Equal(t, 1, db.Count(t, "SELECT count(*) FROM kumiko_snapshots"))
	evs, err := s.Load(ctx, tenantA, a.AggregateID, eventstore.LoadOptions{})
	require.NoError(t, err)
	require.Len(t, evs, 3)
}

func TestAsOf(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	ctx := context.Background()
	s := db.Store
	first := newStream(t, s, tenantA, 2)
	st := eventstore.Stream{TenantID: tenantA, AggregateType: "task", AggregateID: first.AggregateID}
	// Each append is its own transaction, so its timestamp is strictly later.
	var stamps []time.Time
	stamps = append(stamps, first.Events[1].CreatedAt)
	for v := 2; v < 5; v++ {
		res, err := s.Append(ctx, st, v, ev("task.updated", fmt.Sprintf(`{"n":%d}`, v+1)))
		require.NoError(t, err)
		require.True(t, res.Events[0].CreatedAt.After(stamps[len(stamps)-1]))
		stamps = append(stamps, res.Events[0].CreatedAt)
	}

	for i, at := range stamps {
		evs, err := s.Load(ctx, tenantA, st.AggregateID, eventstore.LoadOptions{AsOf: at})
		require.NoError(t, err)
		require.Len(t, evs, i+2, "as of the time of version %d", i+2)
	}
	before, err := s.Load(ctx, tenantA, st.AggregateID, eventstore.LoadOptions{AsOf: first.Events[0].CreatedAt.Add(-time.Millisecond)})
	require.NoError(t, err)
	require.Empty(t, before)

	for v := 1; v <= 5; v++ {
		evs, err := s.Load(ctx, tenantA, st.AggregateID, eventstore.LoadOptions{UpToVersion: v})
		require.NoError(t, err)
		require.Len(t, evs, v)
		require.Equal(t, v, evs[len(evs)-1].Version)
	}
	tail, err := s.Load(ctx, tenantA, st.AggregateID, eventstore.LoadOptions{AfterVersion: 3})
	require.NoError(t, err)
	require.Equal(t, []int{4, 5}, versionsOf(tail))
	mid, err := s.Load(ctx, tenantA, st.AggregateID, eventstore.LoadOptions{AfterVersion: 1, UpToVersion: 3})
	require.NoError(t, err)
	require.Equal(t, []int{2, 3}, versionsOf(mid))
}

func TestArchiveRestoreKeepsVersionLine(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	ctx := context.Background()
	s := db.Store
	res := newStream(t, s, tenantA, 3)
	st := eventstore.Stream{TenantID: tenantA, AggregateType: "task", AggregateID: res.AggregateID}

	require.NoError(t, s.Archive(ctx, tenantA, st.AggregateID, "admin", "closed"))
	require.NoError(t, s.Archive(ctx, tenantA, st.AggregateID, "admin", "again"), "archiving twice is a no-op")
	archived, err := s.IsArchived(ctx, tenantA, st.AggregateID)
	require.NoError(t, err)
	require.True(t, archived)
	require.Equal(t, "closed", queryString(t, db, "SELECT reason FROM kumiko_archived_streams WHERE aggregate_id = $1", st.AggregateID))

	evs, err := s.Load(ctx, tenantA, st.AggregateID, eventstore.LoadOptions{})
	require.NoError(t, err)
	require.Empty(t, evs, "an archived stream reads as empty")
	all, err := s.Load(ctx, tenantA, st.AggregateID, eventstore.LoadOptions{IncludeArchived: true})
	require.NoError(t, err)
	require.Len(t, all, 3, "its events are kept")
	info, err := s.StreamInfo(ctx, tenantA, st.AggregateID)
	require.NoError(t, err)
	require.True(t, info.Archived)

	_, err = s.Append(ctx, st, 3, ev("task.updated", `{}`))
	require.ErrorIs(t, err, eventstore.ErrStreamArchived)
	require.Equal(t, "stream_archived", eventstore.Code(err))
	_, err = s.Append(ctx, st, eventstore.AnyVersion, ev("task.updated", `{}`))
	require.ErrorIs(t, err, eventstore.ErrStreamArchived)

	require.NoError(t, s.Restore(ctx, tenantA, st.AggregateID))
	require.NoError(t, s.Restore(ctx, tenantA, st.AggregateID), "restoring twice is a no-op")
	next, err := s.Append(ctx, st, 3, ev("task.updated", `{}`))
	require.NoError(t, err)
	require.Equal(t, 4, next.Version, "restore continues the version line")
	evs, err = s.Load(ctx, tenantA, st.AggregateID, eventstore.LoadOptions{})
	require.NoError(t, err)
	require.Equal(t, []int{1, 2, 3, 4}, versionsOf(evs))

	// Inside a transaction, and rolled back: nothing stays archived.
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, s.ArchiveTx(ctx, tx, tenantA, st.AggregateID, "admin", ""))
	inTx, err := s.IsArchivedTx(ctx, tx, tenantA, st.AggregateID)
	require.NoError(t, err)
	require.True(t, inTx)
	require.NoError(t, tx.Rollback(ctx))
	archived, err = s.IsArchived(ctx, tenantA, st.AggregateID)
	require.NoError(t, err)
	require.False(t, archived)
}

// state is a test reducer's state: order-sensitive, so a wrong or missing
// event changes it.
type state struct {
	Version int   `json:"version"`
	Sum     int   `json:"sum"`
	Hash    int64 `json:"hash"`
}

func fold(st state, evs []eventstore.Event) state {
	for _, e := range evs {
		var p struct{ N int }
		if err := json.Unmarshal(e.Payload, &p); err != nil {
			panic(err)
		}
		st.Version = e.Version
		st.Sum += p.N
		st.Hash = st.Hash*31 + int64(p.N) + int64(e.Version)
	}
	return st
}

// Snapshot + delta equals the full fold for random streams and random
// snapshot points; a bumped snapshot version forces a full fold.
func TestSnapshotPlusDeltaEqualsFullFold(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	ctx := context.Background()
	s := db.Store
	rng := rand.New(rand.NewPCG(7, uint64(time.Now().UnixNano())))

	for range 25 {
		n := 1 + rng.IntN(300)
		evs := make([]eventstore.NewEvent, n)
		for i := range evs {
			evs[i] = ev("counter.added", fmt.Sprintf(`{"n":%d}`, rng.IntN(1000)-500))
		}
		res, err := s.Append(ctx, eventstore.Stream{TenantID: tenantA, AggregateType: "counter"}, 0, evs...)
		require.NoError(t, err)
		full, err := s.Load(ctx, tenantA, res.AggregateID, eventstore.LoadOptions{})
		require.NoError(t, err)
		want := fold(state{}, full)

		// Snapshots at random points, some of an older reducer generation.
		for range rng.IntN(4) {
			v := 1 + rng.IntN(n)
			gen := 1 + rng.IntN(2)
			st := fold(state{}, full[:v])
			if gen == 1 {
				st.Sum += 1_000_000 // a stale generation's state must never be used
			}
			raw, _ := json.Marshal(st)
			require.NoError(t, s.SaveSnapshot(ctx, eventstore.Snapshot{TenantID: tenantA, AggregateID: res.AggregateID, Version: v, State: raw, SnapshotVersion: gen}))
		}

		snap, delta, err := s.LoadWithSnapshot(ctx, tenantA, res.AggregateID, 2, eventstore.LoadOptions{})
		require.NoError(t, err)
		got := state{}
		if snap != nil {
			require.NoError(t, json.Unmarshal(snap.State, &got))
			require.Equal(t, 2, snap.SnapshotVersion)
			require.Equal(t, snap.Version, got.Version)
			if len(delta) > 0 {
				require.Equal(t, snap.Version+1, delta[0].Version, "the delta starts right after the snapshot")
			}
		} else {
			require.Len(t, delta, n)
		}
		require.Equal(t, want, fold(got, delta))

		// Bounded by version: the snapshot at or below the bound, then the delta up to it.
		upTo := 1 + rng.IntN(n)
		snap, delta, err = s.LoadWithSnapshot(ctx, tenantA, res.AggregateID, 2, eventstore.LoadOptions{UpToVersion: upTo})
		require.NoError(t, err)
		got = state{}
		if snap != nil {
			require.LessOrEqual(t, snap.Version, upTo)
			require.NoError(t, json.Unmarshal(snap.State, &got))
		}
		require.Equal(t, fold(state{}, full[:upTo]), fold(got, delta))

		// A generation nobody wrote: no snapshot, the full stream.
		snap, delta, err = s.LoadWithSnapshot(ctx, tenantA, res.AggregateID, 3, eventstore.LoadOptions{})
		require.NoError(t, err)
		require.Nil(t, snap)
		require.Equal(t, want, fold(state{}, delta))
	}
}

func TestSnapshotOfArchivedStreamIsNotRead(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	ctx := context.Background()
	s := db.Store
	res := newStream(t, s, tenantA, 3)
	require.NoError(t, s.SaveSnapshot(ctx, eventstore.Snapshot{TenantID: tenantA, AggregateID: res.AggregateID, Version: 3, State: json.RawMessage(`{}`)}))
	require.ErrorIs(t, s.SaveSnapshot(ctx, eventstore.Snapshot{TenantID: tenantA, AggregateID: res.AggregateID, Version: 4, State: json.RawMessage(`{}`)}),
		eventstore.ErrAggregateNotFound, "no snapshot beyond the stream head")
	require.ErrorIs(t, s.SaveSnapshot(ctx, eventstore.Snapshot{TenantID: tenantA, AggregateID: res.AggregateID, Version: 3, State: json.RawMessage(`{`)}),
		eventstore.ErrInvalidEvent)
	require.NoError(t, s.Archive(ctx, tenantA, res.AggregateID, "", ""))
	snap, evs, err := s.LoadWithSnapshot(ctx, tenantA, res.AggregateID, 1, eventstore.LoadOptions{})
	require.NoError(t, err)
	require.Nil(t, snap)
	require.Empty(t, evs)
}

func TestReadAllPagesAndFilters(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	ctx := context.Background()
	s := db.Store
	for i := range 7 {
		newStream(t, s, tenantA, i+1) // 28 task events of tenant A
	}
	_, err := s.Append(ctx, eventstore.Stream{TenantID: tenantB, AggregateType: "note"}, 0, ev("note.created", `{}`), ev("note.pinned", `{}`))
	require.NoError(t, err)

	var ids []int64
	for e, err := range s.ReadAll(ctx, 0, eventstore.ReadFilter{PageSize: 5}) {
		require.NoError(t, err)
		ids = append(ids, e.ID)
	}
	require.Len(t, ids, 30)
	for i := 1; i < len(ids); i++ {
		require.Less(t, ids[i-1], ids[i], "global order")
	}

	count := func(after int64, f eventstore.ReadFilter) int {
		n := 0
		for _, err := range s.ReadAll(ctx, after, f) {
			require.NoError(t, err)
			n++
		}
		return n
	}
	require.Equal(t, 20, count(ids[9], eventstore.ReadFilter{PageSize: 3}))
	require.Equal(t, 28, count(0, eventstore.ReadFilter{TenantID: tenantA}))
	require.Equal(t, 2, count(0, eventstore.ReadFilter{AggregateTypes: []string{"note"}}))
	require.Equal(t, 1, count(0, eventstore.ReadFilter{Types: []string{"note.pinned"}}))
	require.Equal(t, 0, count(ids[len(ids)-1], eventstore.ReadFilter{}))

	// Stopping early stops fetching.
	n := 0
	for range s.ReadAll(ctx, 0, eventstore.ReadFilter{PageSize: 2}) {
		n++
		if n == 3 {
			break
		}
	}
	require.Equal(t, 3, n)

	// A cancelled context is reported as an error, once.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	errs := 0
	for _, err := range s.ReadAll(cctx, 0, eventstore.ReadFilter{}) {
		require.Error(t, err)
		errs++
	}
	require.Equal(t, 1, errs)
}

func versionsOf(evs []eventstore.Event) []int {
	vs := make([]int, len(evs))
	for i, e := range evs {
		vs[i] = e.Version
	}
	return vs
}

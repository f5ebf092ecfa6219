package consumer_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/consumer"
	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/kumikotest"
)

func appendOfType(t *testing.T, s *eventstore.Store, aggType string) eventstore.Event {
	t.Helper()
	res, err := s.Append(context.Background(), eventstore.Stream{TenantID: tenantA, AggregateType: aggType}, 0,
		eventstore.NewEvent{Type: aggType + ".made", Payload: json.RawMessage(`{}`)})
	require.NoError(t, err)
	return res.Events[0]
}

// dbNow is the database's clock, so cut-offs never depend on the client's.
func dbNow(t *testing.T, db *kumikotest.DB) time.Time {
	t.Helper()
	var now time.Time
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&now))
	return now
}

func eventIDs(t *testing.T, db *kumikotest.DB) []int64 {
	t.Helper()
	rows, err := db.Pool.Query(ctx, "SELECT id FROM kumiko_events ORDER BY id")
	require.NoError(t, err)
	var ids []int64
	for rows.Next() {
		var id int64
		require.NoError(t, rows.Scan(&id))
		ids = append(ids, id)
	}
	require.NoError(t, rows.Err())
	return ids
}

func requireLagging(t *testing.T, err error, name, instance string, cursor, needed int64) {
	t.Helper()
	pe := requireOpsError(t, err, "unprocessable", consumer.ReasonLagging, consumer.ErrLagging)
	require.Equal(t, name, pe.Details()["consumer"])
	require.Equal(t, instance, pe.Details()["instanceId"])
	require.Equal(t, cursor, pe.Details()["cursor"])
	require.Equal(t, needed, pe.Details()["needed"])
	require.Contains(t, pe.Detail(), name)
	require.Contains(t, pe.Detail(), "skip")
	require.Contains(t, pe.Detail(), "disable")
}

func TestPruneValidates(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	ops := consumer.NewOps(db.Store)
	for _, opts := range []eventstore.PruneOptions{
		{AggregateTypes: []string{"thing"}},
		{OlderThan: time.Now()},
		{OlderThan: time.Now(), AggregateTypes: []string{}},
		{OlderThan: time.Now(), AggregateTypes: []string{"thing", ""}},
	} {
		_, err := ops.PruneEvents(ctx, opts)
		var ce *consumer.Error
		require.ErrorAs(t, err, &ce)
		require.Equal(t, "validation_error", ce.Code(), "%+v", opts)
	}
}

// A shared consumer that has not caught up holds the prune back and is named;
// once it catches up the prune goes through. A dead consumer counts too; a
// disabled one does not. The dry run reports without removing, and events of
// other aggregate types, and newer events, always remain.
func TestPruneGuardSharedConsumer(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	ops := consumer.NewOps(db.Store)
	c := recorder(t, db, "prunee", feature.Shared)
	d := newEventDispatcher(t, db, "p1", c)

	old := appendN(t, db.Store, 3)
	other := appendOfType(t, db.Store, "other")
	cutoff := dbNow(t, db)
	newer := appendOne(t, db.Store)
	opts := eventstore.PruneOptions{OlderThan: cutoff, AggregateTypes: []string{"thing"}}

	_, err := ops.PruneEvents(ctx, opts)
	requireLagging(t, err, "prunee", consumer.SharedInstance, 0, old[2].ID)
	dry := opts
	dry.DryRun = true
	counted, err := ops.PruneEvents(ctx, dry)
	requireLagging(t, err, "prunee", consumer.SharedInstance, 0, old[2].ID)
	require.Equal(t, eventstore.PruneResult{Deleted: 3, UpTo: old[2].ID, ByType: map[string]int64{"thing": 3}}, counted,
		"a refused dry run still counts")
	require.Len(t, eventIDs(t, db), 5, "nothing removed")

	runPass(t, d, "prunee")
	res, err := ops.PruneEvents(ctx, dry)
	require.NoError(t, err)
	require.Equal(t, eventstore.PruneResult{Deleted: 3, UpTo: old[2].ID, ByType: map[string]int64{"thing": 3}}, res)
	require.Len(t, eventIDs(t, db), 5, "a dry run removes nothing")

	res, err = ops.PruneEvents(ctx, opts)
	require.NoError(t, err)
	require.Equal(t, eventstore.PruneResult{Deleted: 3, UpTo: old[2].ID, ByType: map[string]int64{"thing": 3}}, res)
	require.Equal(t, []int64{other.ID, newer.ID}, eventIDs(t, db),
		"the other aggregate type's old event and the newer event remain")

	res, err = ops.PruneEvents(ctx, opts)
	require.NoError(t, err)
	require.Equal(t, eventstore.PruneResult{ByType: map[string]int64{"thing": 0}}, res, "nothing left to prune")
}

// A dead consumer holds the prune back; disabling it lets the prune through.
func TestPruneDeadBlocksDisabledDoesNot(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	ops := consumer.NewOps(db.Store)
	newEventDispatcher(t, db, "p1", recorder(t, db, "stuck", feature.Shared))
	evs := appendN(t, db.Store, 4)
	db.Exec(t, `UPDATE kumiko_event_consumers SET status = 'dead', last_processed_event_id = $1 WHERE name = 'stuck'`, evs[1].ID)
	opts := eventstore.PruneOptions{OlderThan: dbNow(t, db), AggregateTypes: []string{"thing"}}

	_, err := ops.PruneEvents(ctx, opts)
	requireLagging(t, err, "stuck", consumer.SharedInstance, evs[1].ID, evs[3].ID)

	_, err = ops.Disable(ctx, "stuck", "")
	require.NoError(t, err)
	res, err := ops.PruneEvents(ctx, opts)
	require.NoError(t, err)
	require.Equal(t, int64(4), res.Deleted)
	require.Equal(t, evs[3].ID, res.UpTo)
	require.Empty(t, eventIDs(t, db))
}

// The per-instance row of a stopped process pins the prune — that is what
// the guard is for — and names the instance with the scale-down statement;
// once the row is deleted the prune goes through.
func TestPruneStalePerInstanceRow(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	ops := consumer.NewOps(db.Store)
	mk := func(instance string) *consumer.Dispatcher {
		c := recorder(t, db, "local_"+instance, feature.PerInstance)
		c.Name = "local"
		return newEventDispatcher(t, db, instance, c)
	}
	a, b := mk("pod_a"), mk("pod_b")
	first := appendN(t, db.Store, 2)
	runPass(t, a, "local")
	runPass(t, b, "local")
	// pod_b stops for good; pod_a goes on.
	later := appendN(t, db.Store, 2)
	runPass(t, a, "local")
	opts := eventstore.PruneOptions{OlderThan: dbNow(t, db), AggregateTypes: []string{"thing"}}

	_, err := ops.PruneEvents(ctx, opts)
	requireLagging(t, err, "local", "pod_b", first[1].ID, later[1].ID)
	var pe *consumer.Error
	require.ErrorAs(t, err, &pe)
	require.Contains(t, pe.Detail(), "consumer gc")
	require.Len(t, eventIDs(t, db), 4)

	db.Exec(t, `DELETE FROM kumiko_event_consumers WHERE instance_id = 'pod_b'`)
	res, err := ops.PruneEvents(ctx, opts)
	require.NoError(t, err)
	require.Equal(t, int64(4), res.Deleted)
	require.Empty(t, eventIDs(t, db))
}

// A consumer registering while a prune runs.
//
// The invariant proved: every event a prune removes has been processed by
// every shard that is not disabled and whose row existed when the event was
// removed. Put the other way round, a shard never exists (is committed) at a
// moment when events it has not processed are being removed: either its row
// committed before the prune took its lock, and the guard counts it (a new
// consumer's cursor 0 refuses the prune), or its registration waits for the
// prune to commit, and the shard begins its life on the events that remain —
// exactly like a consumer registered a day later. A new shard's cursor (0)
// may be numerically below ids that were removed, which is harmless: it was
// never promised events that were gone before it existed. What must not
// happen is the interleaving guard → registration commits → delete, in
// which a shard that already existed misses events.
//
// The test holds the prune inside its transaction, after the guard and
// before the delete completes (the delete waits for a row lock on one of the
// old events), registers a new consumer meanwhile, and checks that the
// registration waits on the consumer table until the prune commits.
func TestPruneRacingRegistration(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	ops := consumer.NewOps(db.Store)
	d := newEventDispatcher(t, db, "p1", recorder(t, db, "early", feature.Shared))
	old := appendN(t, db.Store, 3)
	runPass(t, d, "early")
	opts := eventstore.PruneOptions{OlderThan: dbNow(t, db), AggregateTypes: []string{"thing"}}
	kept := appendOne(t, db.Store)
	runPass(t, d, "early")

	// Hold the delete: lock one of the events it will remove.
	holder, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer holder.Rollback(ctx) //nolint:errcheck
	_, err = holder.Exec(ctx, "SELECT id FROM kumiko_events WHERE id = $1 FOR UPDATE", old[1].ID)
	require.NoError(t, err)

	type pruned struct {
		res eventstore.PruneResult
		err error
	}
	pruneDone := make(chan pruned, 1)
	go func() {
		res, err := ops.PruneEvents(ctx, opts)
		pruneDone <- pruned{res, err}
	}()
	// The prune holds the SHARE lock and waits on the row.
	require.Eventually(t, func() bool {
		return db.Count(t, `SELECT count(*) FROM pg_locks WHERE relation = 'kumiko_event_consumers'::regclass AND mode = 'ShareLock' AND granted`) == 1 &&
			db.Count(t, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'
				AND query LIKE '%DELETE FROM "' || $1 || '".kumiko_events%'`, db.Schema) == 1
	}, 10*time.Second, 5*time.Millisecond, "the prune took the lock and waits for the row")

	late := recorder(t, db, "late", feature.Shared)
	lateD, err := consumer.New(db.Store, consumer.Config{InstanceID: "p2", PollInterval: 50 * time.Millisecond}, late)
	require.NoError(t, err)
	registered := make(chan error, 1)
	go func() { registered <- lateD.Register(ctx) }()
	require.Eventually(t, func() bool {
		return db.Count(t, `SELECT count(*) FROM pg_locks WHERE relation = 'kumiko_event_consumers'::regclass AND mode = 'ShareRowExclusiveLock' AND NOT granted`) == 1
	}, 10*time.Second, 5*time.Millisecond, "the registration waits on the consumer table")
	select {
	case err := <-registered:
		t.Fatalf("registration committed while the prune ran: %v", err)
	case p := <-pruneDone:
		t.Fatalf("the prune ended while held: %+v", p)
	case <-time.After(100 * time.Millisecond):
	}
	require.Equal(t, 0, db.Count(t, `SELECT count(*) FROM kumiko_event_consumers WHERE name = 'late'`))

	require.NoError(t, holder.Rollback(ctx))
	p := <-pruneDone
	require.NoError(t, p.err)
	require.Equal(t, int64(3), p.res.Deleted)
	require.Equal(t, old[2].ID, p.res.UpTo)
	require.NoError(t, <-registered)

	// The new shard exists only after the removal and begins on what remains.
	require.Equal(t, []int64{kept.ID}, eventIDs(t, db))
	runPass(t, lateD, "late")
	require.Equal(t, []int64{kept.ID}, seen(t, db, "late"))

	// Had it committed before the prune, the guard would have counted it: a
	// fresh consumer registered now holds the next prune back.
	fresh := recorder(t, db, "fresh", feature.Shared)
	newEventDispatcher(t, db, "p3", fresh)
	_, err = ops.PruneEvents(ctx, eventstore.PruneOptions{OlderThan: dbNow(t, db), AggregateTypes: []string{"thing"}})
	requireLagging(t, err, "fresh", consumer.SharedInstance, 0, kept.ID)
}

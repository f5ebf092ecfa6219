package consumer_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/consumer"
	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/kumikotest"
)

// errPoison is what a poisoned consumer answers for its bad event.
var errPoison = errors.New("poison event")

// poisoned wraps c so that its Handle fails on the event whose id bad holds.
func poisoned(c consumer.Consumer, bad *atomic.Int64) consumer.Consumer {
	handle := c.Handle
	c.Handle = func(ctx context.Context, tx pgx.Tx, ev eventstore.Event) error {
		if ev.ID == bad.Load() {
			return errPoison
		}
		return handle(ctx, tx, ev)
	}
	return c
}

func appendN(t *testing.T, s *eventstore.Store, n int) []eventstore.Event {
	t.Helper()
	evs := make([]eventstore.Event, n)
	for i := range evs {
		evs[i] = appendOne(t, s)
	}
	return evs
}

// shardRow is a consumer shard's whole state row, to prove an operation
// changed nothing.
func shardRow(t *testing.T, db *kumikotest.DB, name, instance string) string {
	t.Helper()
	var row string
	require.NoError(t, db.Pool.QueryRow(ctx,
		`SELECT row_to_json(c)::text FROM kumiko_event_consumers c WHERE name = $1 AND instance_id = $2`,
		name, instance).Scan(&row))
	return row
}

// requireOpsError asserts err is a *consumer.Error with code and reason that
// wraps sentinel.
func requireOpsError(t *testing.T, err error, code, reason string, sentinel error) *consumer.Error {
	t.Helper()
	require.Error(t, err)
	var pe *consumer.Error
	require.ErrorAs(t, err, &pe)
	require.Equal(t, code, pe.Code(), "%v", err)
	require.Equal(t, reason, pe.Reason(), "%v", err)
	require.NotEmpty(t, pe.Detail())
	require.ErrorIs(t, err, sentinel)
	return pe
}

func runPass(t *testing.T, d *consumer.Dispatcher, name string) consumer.PassResult {
	t.Helper()
	res, err := d.RunPass(ctx, name)
	require.NoError(t, err)
	require.True(t, res.Locked)
	return res
}

// A strict consumer that fails on one event goes dead after MaxAttempts
// passes and shows it in List; Restart retries the same event (which counts
// attempts again); Skip passes exactly that event and the later ones are
// applied.
func TestConsumerOpsPoisonDeadRestartSkip(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	ops := consumer.NewOps(db.Store)
	var bad atomic.Int64
	c := poisoned(recorder(t, db, "poison", feature.Shared), &bad)
	c.MaxAttempts = 3
	d := newEventDispatcher(t, db, "p1", c)
	evs := appendN(t, db.Store, 4)
	bad.Store(evs[1].ID)
	// The poison event is 90 s old: the lag in seconds is its age.
	db.Exec(t, `UPDATE kumiko_events SET created_at = now() - interval '90 seconds' WHERE id = $1`, evs[1].ID)

	res := runPass(t, d, "poison")
	require.Equal(t, 1, res.Handled)
	require.ErrorIs(t, res.Failed, errPoison)
	st, err := ops.Status(ctx, "poison", "")
	require.NoError(t, err)
	require.Equal(t, consumer.StatusCatchingUp, st.Status, "one failure is not dead yet: still catching up")
	require.Equal(t, 1, st.Attempts)
	require.Equal(t, evs[0].ID, st.Cursor, "the cursor stops before the poison event")

	runPass(t, d, "poison")
	runPass(t, d, "poison")
	list, err := ops.List(ctx)
	require.NoError(t, err)
	require.Len(t, list, 1)
	dead := list[0]
	require.Equal(t, "poison", dead.Name)
	require.Equal(t, consumer.SharedInstance, dead.InstanceID)
	require.Equal(t, consumer.StatusDead, dead.Status)
	require.Equal(t, 3, dead.Attempts)
	require.Contains(t, dead.LastError, "poison event")
	require.Equal(t, evs[0].ID, dead.Cursor)
	require.Equal(t, evs[3].ID, dead.Head)
	require.Equal(t, int64(3), dead.LagEvents)
	require.InDelta(t, 90, dead.LagSeconds, 30, "the age of the oldest unprocessed event")
	require.WithinDuration(t, time.Now(), dead.UpdatedAt, time.Minute)
	st, err = ops.Status(ctx, "poison", consumer.SharedInstance)
	require.NoError(t, err)
	require.InDelta(t, dead.LagSeconds, st.LagSeconds, 5)
	st.LagSeconds = dead.LagSeconds // time moves on
	require.Equal(t, dead, st, "Status is List's row; \"\" and __shared__ address the same shard")

	// Dead: passes apply nothing.
	res = runPass(t, d, "poison")
	require.Zero(t, res.Handled)
	require.Nil(t, res.Failed)
	require.Equal(t, []int64{evs[0].ID}, seen(t, db, "poison"))

	// Restart retries the same event, which still fails and counts again.
	st, err = ops.Restart(ctx, "poison", "")
	require.NoError(t, err)
	require.Equal(t, consumer.StatusCatchingUp, st.Status)
	require.Zero(t, st.Attempts)
	require.Empty(t, st.LastError)
	require.Equal(t, evs[0].ID, st.Cursor, "restart keeps the cursor")
	res = runPass(t, d, "poison")
	require.ErrorIs(t, res.Failed, errPoison, "the same event again")
	st, err = ops.Status(ctx, "poison", "")
	require.NoError(t, err)
	require.Equal(t, 1, st.Attempts)
	require.Equal(t, consumer.StatusCatchingUp, st.Status)

	// Restart is only for a dead shard.
	before := shardRow(t, db, "poison", consumer.SharedInstance)
	_, err = ops.Restart(ctx, "poison", "")
	pe := requireOpsError(t, err, "unprocessable", consumer.ReasonWrongState, consumer.ErrWrongState)
	require.Equal(t, consumer.StatusIdle, pe.Details()["status"])
	require.Contains(t, err.Error(), "idle", "the error names the current state")
	require.Equal(t, before, shardRow(t, db, "poison", consumer.SharedInstance), "a refused op changes nothing")

	runPass(t, d, "poison")
	runPass(t, d, "poison")
	st, err = ops.Status(ctx, "poison", "")
	require.NoError(t, err)
	require.Equal(t, consumer.StatusDead, st.Status)

	// Skip passes exactly the poison event.
	st, err = ops.Skip(ctx, "poison", "")
	require.NoError(t, err)
	require.Equal(t, evs[1].ID, st.Cursor, "past the head event, and only it")
	require.Equal(t, consumer.StatusCatchingUp, st.Status, "the events after the poison one wait")
	require.Zero(t, st.Attempts)
	require.Empty(t, st.LastError)
	require.Equal(t, int64(2), st.LagEvents)
	res = runPass(t, d, "poison")
	require.Nil(t, res.Failed)
	require.Equal(t, 2, res.Handled)
	require.Equal(t, []int64{evs[0].ID, evs[2].ID, evs[3].ID}, seen(t, db, "poison"), "later events are applied")

	st, err = ops.Status(ctx, "poison", "")
	require.NoError(t, err)
	require.Equal(t, evs[3].ID, st.Cursor)
	require.Zero(t, st.LagEvents)
	require.Zero(t, st.LagSeconds, "caught up")

	// Nothing left to skip.
	before = shardRow(t, db, "poison", consumer.SharedInstance)
	_, err = ops.Skip(ctx, "poison", "")
	requireOpsError(t, err, "unprocessable", consumer.ReasonNothingToSkip, consumer.ErrNothingToSkip)
	require.Equal(t, before, shardRow(t, db, "poison", consumer.SharedInstance))
}

// A disabled shard is left alone by passes; enabling it resumes delivery
// from its cursor.
func TestConsumerOpsDisableEnable(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	ops := consumer.NewOps(db.Store)
	d := newEventDispatcher(t, db, "p1", recorder(t, db, "paused", feature.Shared))
	first := appendN(t, db.Store, 2)

	st, err := ops.Disable(ctx, "paused", "")
	require.NoError(t, err)
	require.Equal(t, consumer.StatusDisabled, st.Status)
	require.Equal(t, int64(2), st.LagEvents)
	for range 2 {
		res := runPass(t, d, "paused")
		require.Zero(t, res.Handled)
		require.Zero(t, res.Cursor)
	}
	require.Empty(t, seen(t, db, "paused"), "a disabled shard applies nothing")

	st, err = ops.Enable(ctx, "paused", "")
	require.NoError(t, err)
	require.Equal(t, consumer.StatusCatchingUp, st.Status, "enabled, with two events to catch up on")
	more := appendOne(t, db.Store)
	res := runPass(t, d, "paused")
	require.Equal(t, 3, res.Handled)
	require.Equal(t, []int64{first[0].ID, first[1].ID, more.ID}, seen(t, db, "paused"), "resumed from the cursor")
}

// An idle shard behind the log reports catching_up until a pass has
// brought it to the head; the stored status stays idle throughout.
func TestConsumerStatusCatchingUp(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	ops := consumer.NewOps(db.Store)
	d := newEventDispatcher(t, db, "p1", recorder(t, db, "behind", feature.Shared))
	st, err := ops.Status(ctx, "behind", "")
	require.NoError(t, err)
	require.Equal(t, consumer.StatusIdle, st.Status, "nothing to read")

	appendN(t, db.Store, 3)
	st, err = ops.Status(ctx, "behind", "")
	require.NoError(t, err)
	require.Equal(t, consumer.StatusCatchingUp, st.Status)
	require.Equal(t, int64(3), st.LagEvents)
	require.Contains(t, shardRow(t, db, "behind", consumer.SharedInstance), `"status":"idle"`, "never stored")

	kumikotest.CatchUp(t, d, "behind")
	list, err := ops.List(ctx)
	require.NoError(t, err)
	require.Equal(t, consumer.StatusIdle, list[0].Status)
}

// Every operation refuses from every status it does not start from, with
// wrong_state naming the status, and changes nothing; from the others it
// succeeds. A missing shard is not_found.
func TestConsumerOpsRefuseFromTheWrongState(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	ops := consumer.NewOps(db.Store)
	newEventDispatcher(t, db, "p1", recorder(t, db, "states", feature.Shared))
	evs := appendN(t, db.Store, 3)

	type opFunc func(ctx context.Context, name, instance string) (consumer.ShardStatus, error)
	cases := []struct {
		name string
		op   opFunc
		from []string
		to   string
	}{
		{"restart", ops.Restart, []string{consumer.StatusDead}, consumer.StatusIdle},
		{"skip", ops.Skip, []string{consumer.StatusDead, consumer.StatusIdle}, consumer.StatusIdle},
		{"disable", ops.Disable, []string{consumer.StatusIdle, consumer.StatusDead}, consumer.StatusDisabled},
		{"enable", ops.Enable, []string{consumer.StatusDisabled}, consumer.StatusIdle},
	}
	for _, tc := range cases {
		for _, status := range []string{consumer.StatusIdle, consumer.StatusDead, consumer.StatusDisabled} {
			// A shard that failed twice on the event after evs[0].
			db.Exec(t, `UPDATE kumiko_event_consumers SET status = $1, attempts = 2, last_error = 'boom',
				last_processed_event_id = $2 WHERE name = 'states'`, status, evs[0].ID)
			before := shardRow(t, db, "states", consumer.SharedInstance)
			st, err := tc.op(ctx, "states", "")
			if !slices.Contains(tc.from, status) {
				pe := requireOpsError(t, err, "unprocessable", consumer.ReasonWrongState, consumer.ErrWrongState)
				require.Equal(t, status, pe.Details()["status"], "%s from %s", tc.name, status)
				require.Contains(t, pe.Detail(), status)
				require.Equal(t, before, shardRow(t, db, "states", consumer.SharedInstance), "%s from %s changed the row", tc.name, status)
				continue
			}
			require.NoError(t, err, "%s from %s", tc.name, status)
			want := tc.to
			if want == consumer.StatusIdle && st.LagEvents > 0 {
				want = consumer.StatusCatchingUp
			}
			require.Equal(t, want, st.Status, "%s from %s", tc.name, status)
			cursor := evs[0].ID
			if tc.name == "skip" {
				cursor = evs[1].ID
			}
			require.Equal(t, cursor, st.Cursor, "%s from %s", tc.name, status)
		}
	}

	for _, tc := range cases {
		_, err := tc.op(ctx, "nobody", "")
		requireOpsError(t, err, "not_found", consumer.ReasonNotFound, consumer.ErrNotFound)
		_, err = tc.op(ctx, "states", "p1")
		requireOpsError(t, err, "not_found", consumer.ReasonNotFound, consumer.ErrNotFound)
	}
	_, err := ops.Status(ctx, "nobody", "")
	requireOpsError(t, err, "not_found", consumer.ReasonNotFound, consumer.ErrNotFound)
	require.Equal(t, 1, db.Count(t, "SELECT count(*) FROM kumiko_event_consumers"), "no op creates a row")
}

// Per-instance shards are addressed by their instance id: an operation on
// one process's shard leaves the others alone.
func TestConsumerOpsPerInstance(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	ops := consumer.NewOps(db.Store)
	var bad atomic.Int64
	ds := map[string]*consumer.Dispatcher{}
	for _, instance := range []string{"a", "b"} {
		c := poisoned(recorder(t, db, "local_"+instance, feature.PerInstance), &bad)
		c.Name, c.MaxAttempts = "local", 1
		ds[instance] = newEventDispatcher(t, db, instance, c)
	}
	evs := appendN(t, db.Store, 3)
	bad.Store(evs[1].ID)
	runPass(t, ds["a"], "local")
	runPass(t, ds["b"], "local")

	list, err := ops.List(ctx)
	require.NoError(t, err)
	require.Len(t, list, 2)
	for i, instance := range []string{"a", "b"} {
		require.Equal(t, "local", list[i].Name)
		require.Equal(t, instance, list[i].InstanceID)
		require.Equal(t, consumer.StatusDead, list[i].Status)
		require.Equal(t, evs[0].ID, list[i].Cursor)
	}
	_, err = ops.Status(ctx, "local", "")
	requireOpsError(t, err, "not_found", consumer.ReasonNotFound, consumer.ErrNotFound)
	_, err = ops.Restart(ctx, "local", "")
	requireOpsError(t, err, "not_found", consumer.ReasonNotFound, consumer.ErrNotFound)

	st, err := ops.Restart(ctx, "local", "a")
	require.NoError(t, err)
	require.Equal(t, "a", st.InstanceID)
	require.Equal(t, consumer.StatusCatchingUp, st.Status, "restarted before the event it failed on")
	st, err = ops.Skip(ctx, "local", "b")
	require.NoError(t, err)
	require.Equal(t, evs[1].ID, st.Cursor)

	a, err := ops.Status(ctx, "local", "a")
	require.NoError(t, err)
	require.Equal(t, evs[0].ID, a.Cursor, "skipping b's shard moved nothing of a's")
	require.Equal(t, consumer.StatusCatchingUp, a.Status)

	require.Equal(t, 1, runPass(t, ds["b"], "local").Handled)
	require.Equal(t, []int64{evs[0].ID, evs[2].ID}, seen(t, db, "local_b"))
	res := runPass(t, ds["a"], "local")
	require.ErrorIs(t, res.Failed, errPoison, "a retries the poison event")
	a, err = ops.Status(ctx, "local", "a")
	require.NoError(t, err)
	require.Equal(t, consumer.StatusDead, a.Status)
	require.Equal(t, []int64{evs[0].ID}, seen(t, db, "local_a"))
}

// On the same events, a lenient consumer moves past the poison event, a
// strict one halts before it, and a healthy one applies everything: only the
// poisoned strict consumer halts.
func TestConsumerOpsLenientAndStrict(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	ops := consumer.NewOps(db.Store)
	var bad atomic.Int64
	strict := poisoned(recorder(t, db, "strict", feature.Shared), &bad)
	strict.MaxAttempts = 2
	lenient := poisoned(recorder(t, db, "lenient", feature.Shared), &bad)
	lenient.SkipApplyErrors = true
	healthy := recorder(t, db, "healthy", feature.Shared)
	d := newEventDispatcher(t, db, "p1", strict, lenient, healthy)
	evs := appendN(t, db.Store, 4)
	bad.Store(evs[1].ID)

	for range 2 {
		for _, name := range []string{"strict", "lenient", "healthy"} {
			runPass(t, d, name)
		}
	}
	all := []int64{evs[0].ID, evs[1].ID, evs[2].ID, evs[3].ID}
	require.Equal(t, []int64{evs[0].ID}, seen(t, db, "strict"))
	require.Equal(t, []int64{evs[0].ID, evs[2].ID, evs[3].ID}, seen(t, db, "lenient"))
	require.Equal(t, all, seen(t, db, "healthy"))

	list, err := ops.List(ctx)
	require.NoError(t, err)
	byName := map[string]consumer.ShardStatus{}
	for _, st := range list {
		byName[st.Name] = st
	}
	require.Equal(t, []string{"healthy", "lenient", "strict"}, []string{list[0].Name, list[1].Name, list[2].Name}, "ordered by name")
	require.Equal(t, consumer.StatusDead, byName["strict"].Status)
	require.Equal(t, int64(3), byName["strict"].LagEvents)
	require.Contains(t, byName["strict"].LastError, "poison event")
	for _, name := range []string{"lenient", "healthy"} {
		st := byName[name]
		require.Equal(t, consumer.StatusIdle, st.Status, name)
		require.Equal(t, evs[3].ID, st.Cursor, name)
		require.Zero(t, st.LagEvents, name)
		require.Zero(t, st.Attempts, name)
	}
}

// An operation waits for a pass that holds the shard (FOR UPDATE, not SKIP
// LOCKED) and acts on what the pass committed; Status and List read without
// waiting.
func TestConsumerOpsWaitForARunningPass(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	ops := consumer.NewOps(db.Store)
	entered, release := make(chan struct{}), make(chan struct{})
	var once atomic.Bool
	c := recorder(t, db, "slow", feature.Shared)
	handle := c.Handle
	c.Handle = func(ctx context.Context, tx pgx.Tx, ev eventstore.Event) error {
		if once.CompareAndSwap(false, true) {
			close(entered)
			<-release
		}
		return handle(ctx, tx, ev)
	}
	d := newEventDispatcher(t, db, "p1", c)
	ev := appendOne(t, db.Store)

	passDone := make(chan consumer.PassResult, 1)
	go func() {
		res, err := d.RunPass(context.Background(), "slow")
		if err != nil {
			res.Failed = err
		}
		passDone <- res
	}()
	<-entered

	st, err := ops.Status(ctx, "slow", "")
	require.NoError(t, err, "reads do not wait for the pass")
	require.Zero(t, st.Cursor)

	type result struct {
		st  consumer.ShardStatus
		err error
	}
	opDone := make(chan result, 1)
	go func() {
		st, err := ops.Disable(context.Background(), "slow", "")
		opDone <- result{st, err}
	}()
	select {
	case r := <-opDone:
		t.Fatalf("disable did not wait for the running pass: %+v", r)
	case <-time.After(300 * time.Millisecond):
	}
	close(release)
	res := <-passDone
	require.NoError(t, res.Failed)
	require.Equal(t, 1, res.Handled)
	r := <-opDone
	require.NoError(t, r.err)
	require.Equal(t, consumer.StatusDisabled, r.st.Status)
	require.Equal(t, ev.ID, r.st.Cursor, "the op sees what the pass committed")
}

// Skip never passes an id that a writer still in flight may commit: with a
// gap before the next visible event it refuses until the writer is done,
// then skips the event that committed late.
func TestConsumerOpsSkipWaitsForAnUnsettledGap(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	ops := consumer.NewOps(db.Store)
	d := newEventDispatcher(t, db, "p1", recorder(t, db, "gappy", feature.Shared))
	first := appendOne(t, db.Store)
	runPass(t, d, "gappy")

	slow, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer slow.Rollback(ctx)
	late, err := db.Store.AppendTx(ctx, slow, eventstore.Stream{TenantID: tenantA, AggregateType: "thing"}, 0,
		eventstore.NewEvent{Type: "thing.made", Payload: json.RawMessage(`{}`)})
	require.NoError(t, err)
	after := appendOne(t, db.Store)
	require.Greater(t, after.ID, late.Events[0].ID)

	before := shardRow(t, db, "gappy", consumer.SharedInstance)
	_, err = ops.Skip(ctx, "gappy", "")
	requireOpsError(t, err, "unprocessable", consumer.ReasonGapUnsettled, consumer.ErrGapUnsettled)
	require.Equal(t, before, shardRow(t, db, "gappy", consumer.SharedInstance))

	require.NoError(t, slow.Commit(ctx))
	st, err := ops.Skip(ctx, "gappy", "")
	require.NoError(t, err)
	require.Equal(t, late.Events[0].ID, st.Cursor, "the late event was the head")
	runPass(t, d, "gappy")
	require.Equal(t, []int64{first.ID, after.ID}, seen(t, db, "gappy"))
}

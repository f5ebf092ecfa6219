package consumer_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/consumer"
	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/kumikotest"
)

// A consumer disabled so that a prune could pass it, and enabled again
// afterwards, does not move on over the gap silently: its shard goes
// expired, visibly, and delivers nothing — pass after pass — until the
// operator skips it (it then resumes with the oldest retained event). A
// consumer of other types is not touched by that prune, and one registered
// after it starts on the events that remain.
func TestReenabledConsumerAfterPruneExpires(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	ops := consumer.NewOps(db.Store)
	proj := recorder(t, db, "proj", feature.Shared)
	notes := recorder(t, db, "notes", feature.Shared)
	notes.Types = []string{"note.made"}
	d := newEventDispatcher(t, db, "p1", proj, notes)

	before := appendN(t, db.Store, 2)
	runPass(t, d, "proj")
	runPass(t, d, "notes")
	for _, name := range []string{"proj", "notes"} {
		_, err := ops.Disable(ctx, name, "")
		require.NoError(t, err)
	}
	missed := appendN(t, db.Store, 3) // proj never sees these
	note := appendOfType(t, db.Store, "note")
	res, err := ops.PruneEvents(ctx, eventstore.PruneOptions{OlderThan: dbNow(t, db).Add(time.Second), AggregateTypes: []string{"thing"}})
	require.NoError(t, err, "disabled shards do not hold the prune back")
	require.Equal(t, int64(5), res.Deleted)
	retained := appendN(t, db.Store, 2)
	for _, name := range []string{"proj", "notes"} {
		_, err := ops.Enable(ctx, name, "")
		require.NoError(t, err)
	}

	for range 3 {
		r := runPass(t, d, "proj")
		require.True(t, r.Expired)
		require.Zero(t, r.Handled)
		require.Equal(t, before[1].ID, r.Cursor, "the cursor stays where it was")
	}
	require.Equal(t, []int64{before[0].ID, before[1].ID}, seen(t, db, "proj"), "nothing delivered over the gap")
	st, err := ops.Status(ctx, "proj", "")
	require.NoError(t, err)
	require.Equal(t, consumer.StatusExpired, st.Status)
	require.Equal(t, missed[2].ID, st.ExpiredUpTo)
	require.Contains(t, st.LastError, "skip")
	require.Contains(t, st.LastError, "rebuild")

	// A consumer of types no prune removed goes on.
	r := runPass(t, d, "notes")
	require.False(t, r.Expired)
	require.Equal(t, []int64{note.ID}, seen(t, db, "notes"))

	// A consumer registered after the prune starts on what remains.
	late := recorder(t, db, "late", feature.Shared)
	d2 := newEventDispatcher(t, db, "p2", late)
	r = runPass(t, d2, "late")
	require.False(t, r.Expired)
	require.Equal(t, []int64{note.ID, retained[0].ID, retained[1].ID}, seen(t, db, "late"))

	// Restart and enable refuse; skip decides: resume with what remains.
	_, err = ops.Restart(ctx, "proj", "")
	requireOpsError(t, err, "unprocessable", consumer.ReasonWrongState, consumer.ErrWrongState)
	st, err = ops.Skip(ctx, "proj", "")
	require.NoError(t, err)
	require.Equal(t, consumer.StatusCatchingUp, st.Status, "idle again, with the retained events to read")
	require.Equal(t, before[1].ID, st.Cursor)
	r = runPass(t, d, "proj")
	require.False(t, r.Expired)
	require.Equal(t, []int64{before[0].ID, before[1].ID, note.ID, retained[0].ID, retained[1].ID}, seen(t, db, "proj"))

	// A later prune that passes it again expires it again.
	_, err = ops.Disable(ctx, "proj", "")
	require.NoError(t, err)
	appendN(t, db.Store, 1)
	runPass(t, d, "notes")
	runPass(t, d2, "late")
	_, err = ops.PruneEvents(ctx, eventstore.PruneOptions{OlderThan: dbNow(t, db).Add(time.Second), AggregateTypes: []string{"thing"}})
	require.NoError(t, err)
	_, err = ops.Enable(ctx, "proj", "")
	require.NoError(t, err)
	require.True(t, runPass(t, d, "proj").Expired)

	// Rebuilding its projection is the other way out: the rebuild moves
	// the shards to where it read up to, and they are idle again.
	head := appendOne(t, db.Store).ID
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	shards, err := ops.LockShardsTx(ctx, tx, "proj")
	require.NoError(t, err)
	require.NoError(t, ops.MoveShardsTx(ctx, tx, "proj", head, shards, true))
	require.NoError(t, tx.Commit(ctx))
	st, err = ops.Status(ctx, "proj", "")
	require.NoError(t, err)
	require.Equal(t, consumer.StatusIdle, st.Status)
	require.Zero(t, st.ExpiredUpTo)
	require.Empty(t, st.LastError)
	require.False(t, runPass(t, d, "proj").Expired)
}

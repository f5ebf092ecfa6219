package consumer_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/consumer"
	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/kumikotest"
)

// holdWriter begins a transaction on its own connection, appends one event
// in it and leaves it open: an id allocated that may still commit. It
// returns the transaction and its backend's process id.
func holdWriter(t *testing.T, db *kumikotest.DB) (pgx.Tx, int32) {
	t.Helper()
	tx, err := db.Pool.Begin(context.Background())
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	_, err = db.Store.AppendTx(context.Background(), tx, eventstore.Stream{TenantID: tenantA, AggregateType: "thing"}, 0,
		eventstore.NewEvent{Type: "thing.made", Payload: json.RawMessage(`{}`)})
	require.NoError(t, err)
	return tx, int32(tx.Conn().PgConn().PID())
}

func shardStatus(t *testing.T, db *kumikotest.DB, name string) consumer.ShardStatus {
	t.Helper()
	st, err := consumer.NewOps(db.Store).Status(context.Background(), name, "")
	require.NoError(t, err)
	return st
}

// A writer that stays open holds delivery at its id. The shard shows how
// long it has been waiting and the backend to look at — in the status rows
// and as a gauge — and both clear once the writer ends.
func TestGapWaitNamesTheWriterBackend(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	c := recorder(t, db, "held", feature.Shared)
	e, err := consumer.New(db.Store, consumer.Config{InstanceID: "g1", PollInterval: 10 * time.Millisecond, Metrics: reg}, c)
	require.NoError(t, err)
	require.NoError(t, e.Start(ctx))
	t.Cleanup(func() { require.NoError(t, e.Stop(context.Background())) })

	first := appendOne(t, db.Store)
	require.Eventually(t, func() bool { return len(seen(t, db, "held")) == 1 }, 10*time.Second, 5*time.Millisecond)
	st := shardStatus(t, db, "held")
	require.Zero(t, st.GapWaitSeconds, "caught up: not waiting")
	require.Equal(t, []int32{}, st.GapBackends)

	writer, pid := holdWriter(t, db)
	after := appendOne(t, db.Store)
	require.Eventually(t, func() bool {
		st = shardStatus(t, db, "held")
		return st.GapWaitSeconds > 0
	}, 10*time.Second, 5*time.Millisecond, "the shard reports a gap wait")
	require.Equal(t, []int32{pid}, st.GapBackends, "naming the open writer's backend")
	require.Equal(t, first.ID, st.Cursor)
	waited := st.GapWaitSeconds
	require.Eventually(t, func() bool { return shardStatus(t, db, "held").GapWaitSeconds > waited }, 10*time.Second, 5*time.Millisecond,
		"the wait grows while the writer stays open")
	require.Eventually(t, func() bool {
		v, ok := metricValue(t, reg, "kumiko_event_consumer_gap_wait_seconds")
		return ok && v > 0
	}, 10*time.Second, 5*time.Millisecond, "and the gauge shows it")
	list, err := consumer.NewOps(db.Store).List(ctx)
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Equal(t, []int32{pid}, list[0].GapBackends, "List answers the same")

	require.NoError(t, writer.Commit(ctx))
	require.Eventually(t, func() bool { return len(seen(t, db, "held")) == 3 }, 10*time.Second, 5*time.Millisecond)
	require.Equal(t, after.ID, seen(t, db, "held")[2])
	require.Eventually(t, func() bool {
		v, ok := metricValue(t, reg, "kumiko_event_consumer_gap_wait_seconds")
		return ok && v == 0
	}, 10*time.Second, 5*time.Millisecond, "the gauge falls back to 0")
	st = shardStatus(t, db, "held")
	require.Zero(t, st.GapWaitSeconds)
	require.Equal(t, []int32{}, st.GapBackends)
	require.Zero(t, db.Count(t, "SELECT count(*) FROM kumiko_event_consumers WHERE gap_since IS NOT NULL"))
}

// rowVersion is what changes when a row is written: its xmin and updated_at.
func rowVersion(t *testing.T, db *kumikotest.DB, name string) string {
	t.Helper()
	var v string
	require.NoError(t, db.Pool.QueryRow(context.Background(),
		"SELECT xmin::text || ' ' || updated_at::text FROM kumiko_event_consumers WHERE name = $1", name).Scan(&v))
	return v
}

// An idle pass writes nothing: neither when the shard has caught up (it
// does not even lock the row) nor while it waits at a gap it already
// recorded.
func TestIdlePassWritesNothing(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	ctx := context.Background()
	c := recorder(t, db, "quiet", feature.Shared)
	e := newEventDispatcher(t, db, "p1", c)

	for range 3 {
		appendOne(t, db.Store)
	}
	kumikotest.CatchUp(t, e, "quiet")
	caughtUp := rowVersion(t, db, "quiet")
	lockedBy := db.Count(t, "SELECT xmax::text::bigint FROM kumiko_event_consumers WHERE name = 'quiet'")
	for range 5 {
		res, err := e.RunPass(ctx, "quiet")
		require.NoError(t, err)
		require.True(t, res.Locked)
	}
	require.Equal(t, caughtUp, rowVersion(t, db, "quiet"), "five idle passes left the row alone")
	require.Equal(t, lockedBy, db.Count(t, "SELECT xmax::text::bigint FROM kumiko_event_consumers WHERE name = 'quiet'"),
		"without even locking it: an idle pass takes no transaction id")

	writer, _ := holdWriter(t, db)
	appendOne(t, db.Store)
	res, err := e.RunPass(ctx, "quiet")
	require.NoError(t, err)
	require.Zero(t, res.GapWait, "the pass that finds the gap starts the wait")
	atGap := rowVersion(t, db, "quiet")
	require.NotEqual(t, caughtUp, atGap, "the new gap is recorded")
	for range 5 {
		res, err = e.RunPass(ctx, "quiet")
		require.NoError(t, err)
		require.Positive(t, res.GapWait, "waiting at the recorded gap")
	}
	require.Equal(t, atGap, rowVersion(t, db, "quiet"), "passes waiting at a recorded gap write nothing")

	require.NoError(t, writer.Commit(ctx))
	kumikotest.CatchUp(t, e, "quiet")
	require.Len(t, seen(t, db, "quiet"), 5)
	require.NotEqual(t, atGap, rowVersion(t, db, "quiet"))
}

// Error texts are stored cut on a character boundary, with invalid UTF-8
// and NUL made storable: a consumer failing with such a text still counts
// its attempts and goes dead at MaxAttempts.
func TestFailingConsumerWithAnyErrorTextGoesDead(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	ctx := context.Background()
	ev := appendOne(t, db.Store)
	// The stored text is "event <id> (thing.made): " + the handler's error,
	// cut at 2000 bytes: pad it so the cut lands inside a three-byte rune.
	prefix := len(fmt.Sprintf("event %d (%s): ", ev.ID, ev.Type))
	pad := strings.Repeat("x", ((2000-prefix-1)%3+3)%3)
	require.Equal(t, 1, (2000-prefix-len(pad))%3)
	texts := []struct{ name, text string }{
		{"multibyte", pad + strings.Repeat("€", 1000)},
		{"nul", "driver said \x00 here"},
		{"invalid", "bytes \xff\xfe from a peer"},
	}
	var consumers []consumer.Consumer
	for _, tc := range texts {
		consumers = append(consumers, consumer.Consumer{Name: tc.name, MaxAttempts: 2,
			Handle: func(context.Context, pgx.Tx, eventstore.Event) error { return errors.New(tc.text) }})
	}
	e := newEventDispatcher(t, db, "p1", consumers...)
	for _, tc := range texts {
		name := tc.name
		for attempt := 1; attempt <= 2; attempt++ {
			res, err := e.RunPass(ctx, name)
			require.NoError(t, err, "%s: the failure is recorded", name)
			require.Error(t, res.Failed)
		}
		st := shardStatus(t, db, name)
		require.Equal(t, consumer.StatusDead, st.Status, name)
		require.Equal(t, 2, st.Attempts, name)
		require.True(t, utf8.ValidString(st.LastError), name)
		require.LessOrEqual(t, len(st.LastError), 2000, name)
		require.NotContains(t, st.LastError, "\x00", name)
		require.True(t, strings.HasPrefix(st.LastError, fmt.Sprintf("event %d (thing.made): ", ev.ID)), name)
	}
	require.Len(t, shardStatus(t, db, "multibyte").LastError, 2000-1, "cut before the split character")
}

// Events held back at a gap count in the delivery metric from when the
// dispatcher first learnt of their commit, not from the pass that finally
// delivers them: the wait shows in kumiko_event_consumer_delivery_seconds.
func TestDeliveryMetricCountsTheGapWait(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	c := recorder(t, db, "timed", feature.Shared)
	e, err := consumer.New(db.Store, consumer.Config{InstanceID: "t1", PollInterval: 10 * time.Millisecond, Metrics: reg}, c)
	require.NoError(t, err)
	require.NoError(t, e.Start(ctx))
	t.Cleanup(func() { require.NoError(t, e.Stop(context.Background())) })

	const held = 0.1 // seconds the writer stays open, at least; a bucket bound below it
	writer, _ := holdWriter(t, db)
	appendOne(t, db.Store) // wakes the dispatcher, and waits behind the writer
	require.Eventually(t, func() bool { return shardStatus(t, db, "timed").GapWaitSeconds > 2*held }, 10*time.Second, 5*time.Millisecond)
	require.NoError(t, writer.Commit(ctx))
	require.Eventually(t, func() bool { return len(seen(t, db, "timed")) == 2 }, 10*time.Second, 5*time.Millisecond)

	// The pass observes the metric right after its commit, which the test
	// may see first.
	var count, slow uint64 // observations, and those above held
	require.Eventually(t, func() bool {
		mfs, err := reg.Gather()
		require.NoError(t, err)
		for _, mf := range mfs {
			if mf.GetName() != "kumiko_event_consumer_delivery_seconds" {
				continue
			}
			h := mf.GetMetric()[0].GetHistogram()
			count = h.GetSampleCount()
			for _, b := range h.GetBucket() {
				if b.GetUpperBound() == held {
					slow = count - b.GetCumulativeCount()
				}
			}
		}
		return count >= 2
	}, 10*time.Second, 5*time.Millisecond)
	require.Equal(t, uint64(2), count)
	require.Equal(t, uint64(2), slow, "both events count from the wake-up of the first, before the wait")
}

package consumer_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/consumer"
	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/kumikotest"
)

// Short beats, so the liveness tests stay fast: an instance is stale once
// it has missed its beats for a second, and never before 600ms (three
// beats; a loaded test machine may stall a process for a few hundred
// milliseconds).
const (
	testHeartbeat  = 200 * time.Millisecond
	testStaleAfter = time.Second
)

const (
	childInstanceEnv = "KUMIKO_TEST_CHILD_INSTANCE"
	childInstanceURL = "KUMIKO_TEST_CHILD_INSTANCE_URL"
)

func noop(context.Context, pgx.Tx, eventstore.Event) error { return nil }

// runChildInstance runs a dispatcher with a per-instance and a shared
// consumer under the instance id id until the process is killed. It is a
// subprocess of TestStaleInstanceIsCollected.
func runChildInstance(id, dbURL string) {
	ctx := context.Background()
	u, _ := url.Parse(dbURL)
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		panic(err)
	}
	store, err := eventstore.New(pool, eventstore.Config{Schema: u.Query().Get("search_path")})
	if err != nil {
		panic(err)
	}
	e, err := consumer.New(store, consumer.Config{InstanceID: id, PollInterval: 200 * time.Millisecond,
		Heartbeat: testHeartbeat, StaleAfter: testStaleAfter, Host: "child-host", Version: "v-test"},
		consumer.Consumer{Name: "feed", Delivery: feature.PerInstance, Handle: noop},
		consumer.Consumer{Name: "proj", Handle: noop})
	if err != nil {
		panic(err)
	}
	if err := e.Start(ctx); err != nil {
		panic(err)
	}
	select {} // until killed
}

// liveness maps each per-instance shard of consumer name to its liveness.
func liveness(t *testing.T, ops *consumer.Ops, name string) map[string]string {
	t.Helper()
	list, err := ops.List(ctx)
	require.NoError(t, err)
	out := map[string]string{}
	for _, s := range list {
		if s.Name == name {
			out[s.InstanceID] = s.Liveness
		}
	}
	return out
}

// Three processes run a per-instance and a shared consumer; one is killed
// for good. Its rows hold retention back; once its beats are older than
// the threshold they are reported stale (the others stay live), gc removes
// exactly them — never the shared row, never a live instance's — and the
// prune then goes through.
func TestStaleInstanceIsCollected(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	ops := consumer.NewOps(db.Store)
	children := map[string]*exec.Cmd{}
	for _, id := range []string{"pod-1", "pod-2", "pod-3"} {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childInstanceEnv+"="+id, childInstanceURL+"="+db.URL)
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		children[id] = cmd
	}
	require.Eventually(t, func() bool {
		l := liveness(t, ops, "feed")
		return len(l) == 3 && l["pod-1"] == "live" && l["pod-2"] == "live" && l["pod-3"] == "live"
	}, 20*time.Second, 10*time.Millisecond, "three processes beat")
	instances, err := ops.Instances(ctx)
	require.NoError(t, err)
	require.Len(t, instances, 3)
	for _, in := range instances {
		require.Equal(t, "child-host", in.Host)
		require.Equal(t, "v-test", in.Version)
		require.NotNil(t, in.StartedAt)
		require.False(t, in.Stale)
	}

	require.NoError(t, children["pod-2"].Process.Signal(syscall.SIGKILL))
	_ = children["pod-2"].Wait()
	evs := appendN(t, db.Store, 3)
	head := evs[2].ID
	caughtUp := func(s consumer.ShardStatus) bool { return s.Cursor >= head }
	require.Eventually(t, func() bool {
		list, err := ops.List(ctx)
		require.NoError(t, err)
		for _, s := range list {
			if s.InstanceID != "pod-2" && !caughtUp(s) {
				return false
			}
		}
		return true
	}, 20*time.Second, 10*time.Millisecond, "the live processes catch up")
	opts := eventstore.PruneOptions{OlderThan: dbNow(t, db).Add(time.Second), AggregateTypes: []string{"thing"}}
	_, err = ops.PruneEvents(ctx, opts)
	requireOpsError(t, err, "unprocessable", consumer.ReasonLagging, consumer.ErrLagging)

	// Before the threshold, gc removes nothing.
	res, err := ops.CollectStale(ctx, consumer.GCOptions{StaleAfter: time.Hour})
	require.NoError(t, err)
	require.Empty(t, res.Instances)

	require.Eventually(t, func() bool { return liveness(t, ops, "feed")["pod-2"] == consumer.LivenessStale },
		20*time.Second, 10*time.Millisecond, "the killed instance goes stale")
	l := liveness(t, ops, "feed")
	require.Equal(t, consumer.LivenessLive, l["pod-1"], "%v", l)
	require.Equal(t, consumer.LivenessLive, l["pod-3"], "%v", l)
	require.Equal(t, "", liveness(t, ops, "proj")[consumer.SharedInstance], "a shared row has no liveness")

	dry, err := ops.CollectStale(ctx, consumer.GCOptions{DryRun: true})
	require.NoError(t, err)
	require.Equal(t, consumer.GCResult{Instances: []string{"pod-2"}, Shards: 1}, dry)
	require.Contains(t, liveness(t, ops, "feed"), "pod-2", "a dry run removes nothing")

	// A threshold below three beats does not make the live ones stale.
	res, err = ops.CollectStale(ctx, consumer.GCOptions{StaleAfter: time.Nanosecond})
	require.NoError(t, err)
	require.Equal(t, consumer.GCResult{Instances: []string{"pod-2"}, Shards: 1}, res)

	list, err := ops.List(ctx)
	require.NoError(t, err)
	var left []string
	for _, s := range list {
		left = append(left, s.Name+"/"+s.InstanceID)
	}
	require.Equal(t, []string{"feed/pod-1", "feed/pod-3", "proj/" + consumer.SharedInstance}, left)
	instances, err = ops.Instances(ctx)
	require.NoError(t, err)
	require.Len(t, instances, 2)
	require.False(t, slices.ContainsFunc(instances, func(i consumer.Instance) bool { return i.InstanceID == "pod-2" }))

	pruned, err := ops.PruneEvents(ctx, opts)
	require.NoError(t, err, "retention proceeds")
	require.Equal(t, int64(3), pruned.Deleted)
}

// A process whose passes take far longer than the stale threshold, and
// hold every pooled connection meanwhile, keeps beating: it is never
// reported stale, and gc never touches it.
func TestBusyInstanceIsNeverStale(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	ops := consumer.NewOps(db.Store)
	// The dispatcher's own pool: two connections, both held by the passes.
	cfg, err := pgxpool.ParseConfig(db.URL)
	require.NoError(t, err)
	cfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	store, err := eventstore.New(pool, eventstore.Config{Schema: db.Schema})
	require.NoError(t, err)

	release := make(chan struct{})
	var entered sync.WaitGroup
	entered.Add(2)
	var once [2]atomic.Bool
	slow := func(i int) consumer.Consumer {
		return consumer.Consumer{Name: []string{"slow-a", "slow-b"}[i], Delivery: feature.PerInstance,
			Handle: func(ctx context.Context, _ pgx.Tx, _ eventstore.Event) error {
				if once[i].CompareAndSwap(false, true) {
					entered.Done()
				}
				<-release
				return nil
			}}
	}
	// The threshold leaves a loaded test machine room: a beat late by a
	// second is the machine's, not the passes'.
	const staleAfter = 3 * testStaleAfter
	e, err := consumer.New(store, consumer.Config{InstanceID: "busy", PollInterval: 10 * time.Millisecond,
		Heartbeat: testHeartbeat, StaleAfter: staleAfter}, slow(0), slow(1))
	require.NoError(t, err)
	require.NoError(t, e.Start(ctx))
	t.Cleanup(func() { require.NoError(t, e.Stop(context.Background())) })
	t.Cleanup(func() { close(release) }) // runs before Stop
	appendOne(t, db.Store)
	entered.Wait()
	busySince := dbNow(t, db)

	// Watch it for two thresholds while both passes hold their
	// connections: every look finds it live.
	var looks, stale, collected atomic.Int64
	require.Eventually(t, func() bool {
		looks.Add(1)
		for _, name := range []string{"slow-a", "slow-b"} {
			if liveness(t, ops, name)["busy"] != consumer.LivenessLive {
				stale.Add(1)
			}
		}
		res, err := ops.CollectStale(ctx, consumer.GCOptions{DryRun: true})
		if err != nil || len(res.Instances) > 0 {
			collected.Add(1)
		}
		return dbNow(t, db).Sub(busySince) > 2*staleAfter
	}, 30*time.Second, 20*time.Millisecond)
	require.Zero(t, stale.Load(), "a busy instance is reported live, %d looks", looks.Load())
	require.Zero(t, collected.Load(), "gc never takes a beating instance")
	require.Equal(t, 2, countShards(t, db, "busy"))
}

func countShards(t *testing.T, db *kumikotest.DB, instance string) int {
	t.Helper()
	return db.Count(t, "SELECT count(*) FROM kumiko_event_consumers WHERE instance_id = $1", instance)
}

// With CollectStale, a running dispatcher removes by itself the shards of
// an instance that stopped beating — and only those: its own and the
// shared shard stay.
func TestDispatcherCollectsStaleInstances(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	ops := consumer.NewOps(db.Store)
	feed := consumer.Consumer{Name: "feed", Delivery: feature.PerInstance, Handle: noop}
	proj := consumer.Consumer{Name: "proj", Handle: noop}
	cfg := consumer.Config{PollInterval: 50 * time.Millisecond, Heartbeat: testHeartbeat, StaleAfter: testStaleAfter}

	cfg.InstanceID = "gone"
	gone, err := consumer.New(db.Store, cfg, feed, proj)
	require.NoError(t, err)
	require.NoError(t, gone.Start(ctx))
	require.NoError(t, gone.Stop(ctx)) // and never comes back

	cfg.InstanceID, cfg.CollectStale = "keeper", true
	keeper, err := consumer.New(db.Store, cfg, feed, proj)
	require.NoError(t, err)
	require.NoError(t, keeper.Start(ctx))
	t.Cleanup(func() { require.NoError(t, keeper.Stop(context.Background())) })

	require.Eventually(t, func() bool { return countShards(t, db, "gone") == 0 }, 20*time.Second, 20*time.Millisecond,
		"the stopped instance's shard is removed")
	require.Equal(t, 1, countShards(t, db, "keeper"))
	require.Equal(t, 1, countShards(t, db, consumer.SharedInstance))
	instances, err := ops.Instances(ctx)
	require.NoError(t, err)
	require.Len(t, instances, 1)
	require.Equal(t, "keeper", instances[0].InstanceID)
}

// A process taken for stale while it was only paused (here: its rows are
// removed as a gc would) registers its shards again on its next beat, and
// goes on delivering.
func TestCollectedLiveInstanceRegistersAgain(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	c := recorder(t, db, "feed", feature.PerInstance)
	d, err := consumer.New(db.Store, consumer.Config{InstanceID: "paused", PollInterval: 20 * time.Millisecond,
		Heartbeat: testHeartbeat, StaleAfter: testStaleAfter}, c)
	require.NoError(t, err)
	require.NoError(t, d.Start(ctx))
	t.Cleanup(func() { require.NoError(t, d.Stop(context.Background())) })

	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "DELETE FROM kumiko_event_consumers WHERE instance_id = 'paused'")
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "DELETE FROM kumiko_instances WHERE instance_id = 'paused'")
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))

	require.Eventually(t, func() bool { return countShards(t, db, "paused") == 1 }, 20*time.Second, 10*time.Millisecond)
	ev := appendOne(t, db.Store)
	require.Eventually(t, func() bool { return slices.Contains(seen(t, db, "feed"), ev.ID) }, 20*time.Second, 10*time.Millisecond)
}

// kumiko_instance_stale reports every instance the app knows: 0 for one
// that beats, 1 for one that does not (here: known only by its shard).
// kumiko_event_consumer_expired is 0 for a shard delivering normally.
func TestLivenessMetrics(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	feed := consumer.Consumer{Name: "feed", Delivery: feature.PerInstance, Handle: noop}
	newEventDispatcher(t, db, "ghost", feed) // registered, never beating
	reg := prometheus.NewRegistry()
	d, err := consumer.New(db.Store, consumer.Config{InstanceID: "watcher", PollInterval: 20 * time.Millisecond,
		Heartbeat: testHeartbeat, StaleAfter: testStaleAfter, Metrics: reg}, feed)
	require.NoError(t, err)
	require.NoError(t, d.Start(ctx))
	t.Cleanup(func() { require.NoError(t, d.Stop(context.Background())) })
	appendOne(t, db.Store)
	stale := func(id string) string {
		return fmt.Sprintf("kumiko_instance_stale{instance_id=%q}", id)
	}
	require.Eventually(t, func() bool {
		got := gauges(t, reg)
		return got[stale("ghost")] == "1" && got[stale("watcher")] == "0" &&
			got[`kumiko_event_consumer_expired{consumer="feed",instance_id="watcher"}`] == "0"
	}, 20*time.Second, 20*time.Millisecond)
}

// gauges renders every gauge series of reg as name{labels} → value.
func gauges(t *testing.T, reg *prometheus.Registry) map[string]string {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]string{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if m.GetGauge() == nil {
				continue
			}
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			out[mf.GetName()+"{"+strings.Join(labels, ",")+"}"] = fmt.Sprint(m.GetGauge().GetValue())
		}
	}
	return out
}

package consumer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/consumer"
	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/kumikotest"
)

const (
	childPartitionEnv = "KUMIKO_TEST_CHILD_PARTITION"
	childPartitionURL = "KUMIKO_TEST_CHILD_PARTITION_URL"
	partitionCount    = 16
)

// partitionRecorder is a consumer with partitionCount partitions whose
// handler records (event, stream, version, process) in the pass
// transaction; the table has no unique key, so a duplicate shows as a
// second row instead of a failing handler.
func partitionRecorder(process string) consumer.Consumer {
	return consumer.Consumer{
		Name: "parts", Partitions: partitionCount, BatchSize: 20,
		Handle: func(ctx context.Context, tx pgx.Tx, ev eventstore.Event) error {
			time.Sleep(200 * time.Microsecond) // some work, so kills land in passes
			_, err := tx.Exec(ctx, `INSERT INTO part_log (event_id, stream, version, process) VALUES ($1, $2, $3, $4)`,
				ev.ID, ev.AggregateID, ev.Version, process)
			return err
		},
	}
}

// runChildPartition runs a dispatcher with the partitioned recorder under
// the instance id id until the process is killed or stopped (SIGTERM). It
// is a subprocess of TestPartitionsAcrossProcesses.
func runChildPartition(id, dbURL string) {
	ctx := context.Background()
	u, _ := url.Parse(dbURL)
	pc, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		panic(err)
	}
	pc.MaxConns = 8
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		panic(err)
	}
	store, err := eventstore.New(pool, eventstore.Config{Schema: u.Query().Get("search_path")})
	if err != nil {
		panic(err)
	}
	e, err := consumer.New(store, consumer.Config{InstanceID: id, PollInterval: 100 * time.Millisecond,
		Heartbeat: testHeartbeat, StaleAfter: testStaleAfter}, partitionRecorder(id))
	if err != nil {
		panic(err)
	}
	if err := e.Start(ctx); err != nil {
		panic(err)
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM)
	<-stop
	bound, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_ = e.Stop(bound)
}

// appendStreamEvents appends n events to each of streams, round-robin,
// from writers goroutines; each append is its own transaction, so commits
// land out of id order.
func appendStreamEvents(t *testing.T, s *eventstore.Store, streams []uuid.UUID, from, n, writers int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for round := range n {
				for i := w; i < len(streams); i += writers {
					_, err := s.Append(ctx, eventstore.Stream{TenantID: tenantA, AggregateType: "thing", AggregateID: streams[i]}, from+round,
						eventstore.NewEvent{Type: "thing.made", Payload: json.RawMessage(`{}`)})
					if err != nil {
						errs <- err
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

func startPartitionChild(t *testing.T, db *kumikotest.DB, id string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childPartitionEnv+"="+id, childPartitionURL+"="+db.URL)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd
}

// Four processes run a consumer with 16 partitions while writers append to
// 64 streams and one writer holds a transaction open across streams of
// several partitions. Two processes are killed with SIGKILL mid-way, one
// joins late. Every event is applied exactly once, the events of each
// stream in version order, the held writer's events after it commits; the
// live processes share the partitions, and the killed ones' partitions are
// taken over.
func TestPartitionsAcrossProcesses(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	db.Exec(t, `CREATE TABLE part_log (seq bigserial PRIMARY KEY, event_id bigint NOT NULL, stream uuid NOT NULL, version int NOT NULL, process text NOT NULL)`)
	procs := map[string]*exec.Cmd{}
	for _, id := range []string{"p1", "p2", "p3", "p4"} {
		procs[id] = startPartitionChild(t, db, id)
	}
	ops := consumer.NewOps(db.Store)
	require.Eventually(t, func() bool { return owners(t, ops) == 4 }, 30*time.Second, 20*time.Millisecond, "four processes share the partitions")

	streams := make([]uuid.UUID, 64)
	for i := range streams {
		streams[i] = uuid.New()
	}
	// A writer holds events of three new streams (other partitions, most
	// likely) uncommitted while the others write.
	held, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = held.Rollback(ctx) })
	heldStreams := []uuid.UUID{uuid.New(), uuid.New(), uuid.New()}
	for _, s := range heldStreams {
		_, err := db.Store.AppendTx(ctx, held, eventstore.Stream{TenantID: tenantA, AggregateType: "thing", AggregateID: s}, 0,
			eventstore.NewEvent{Type: "thing.made", Payload: json.RawMessage(`{}`)})
		require.NoError(t, err)
	}

	appendStreamEvents(t, db.Store, streams, 0, 10, 4)
	require.NoError(t, procs["p2"].Process.Signal(syscall.SIGKILL))
	require.NoError(t, procs["p4"].Process.Signal(syscall.SIGKILL))
	procs["p5"] = startPartitionChild(t, db, "p5") // joins late
	appendStreamEvents(t, db.Store, streams, 10, 10, 4)
	require.NoError(t, held.Commit(ctx))
	appendStreamEvents(t, db.Store, streams[:8], 20, 5, 2)

	total := db.Count(t, `SELECT count(*) FROM kumiko_events`)
	require.Eventually(t, func() bool {
		return db.Count(t, `SELECT count(DISTINCT event_id) FROM part_log`) == total
	}, 90*time.Second, 50*time.Millisecond, "every event is applied")
	require.Zero(t, db.Count(t, `SELECT count(*) - count(DISTINCT event_id) FROM part_log`), "no event applied twice")
	// Per stream, the order of application is the version order.
	require.Zero(t, db.Count(t, `SELECT count(*) FROM (
		SELECT version, lag(version) OVER (PARTITION BY stream ORDER BY seq) AS prev FROM part_log) x
		WHERE prev IS NOT NULL AND version <> prev + 1`), "a stream's events in order")
	require.Zero(t, db.Count(t, `SELECT count(*) FROM (SELECT stream, min(version) AS v FROM part_log GROUP BY stream) x WHERE v <> 1`))
	// The survivors and the late joiner applied events; the partitions are
	// spread over the three live processes.
	require.Eventually(t, func() bool { return owners(t, ops) == 3 }, 30*time.Second, 20*time.Millisecond, "the killed processes' partitions are taken over")
	require.Positive(t, db.Count(t, `SELECT count(*) FROM part_log WHERE process = 'p5'`), "the late joiner applies events")
	list, err := ops.List(ctx)
	require.NoError(t, err)
	perOwner := map[string]int{}
	for _, s := range list {
		if s.Name == "parts" {
			require.Equal(t, partitionCount, s.Partitions)
			perOwner[s.Owner]++
		}
	}
	require.Len(t, perOwner, 3)
	for owner, n := range perOwner {
		require.Contains(t, []string{"p1", "p3", "p5"}, owner)
		require.InDelta(t, partitionCount/3, n, 1, "an even share")
	}
}

// owners counts the distinct live owners of the parts consumer's
// partitions.
func owners(t *testing.T, ops *consumer.Ops) int {
	t.Helper()
	list, err := ops.List(ctx)
	require.NoError(t, err)
	seen := map[string]bool{}
	for _, s := range list {
		if s.Name == "parts" && s.Owner != "" {
			seen[s.Owner] = true
		}
	}
	return len(seen)
}

// A poison event with Park parks only its stream: 10,000 events of other
// streams pass meanwhile, the stream's later events wait; a retry that
// fails again keeps it parked with the new error, a retry that succeeds
// applies the stream's events in order and unparks it; a skip passes only
// the failing event.
func TestPoisonEventParksOnlyItsStream(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	db.Exec(t, `CREATE TABLE park_log (seq bigserial PRIMARY KEY, event_id bigint NOT NULL, stream uuid NOT NULL, version int NOT NULL)`)
	poison, other := uuid.New(), uuid.New()
	var mu sync.Mutex
	failing := map[uuid.UUID]int{poison: 1} // the version that fails
	c := consumer.Consumer{Name: "parking", Partitions: 4, Park: true, MaxAttempts: 2, BatchSize: 500,
		Handle: func(ctx context.Context, tx pgx.Tx, ev eventstore.Event) error {
			mu.Lock()
			bad := failing[ev.AggregateID] == ev.Version
			mu.Unlock()
			if bad {
				return fmt.Errorf("poison %s v%d", ev.AggregateID, ev.Version)
			}
			_, err := tx.Exec(ctx, `INSERT INTO park_log (event_id, stream, version) VALUES ($1, $2, $3)`, ev.ID, ev.AggregateID, ev.Version)
			return err
		}}
	e, err := consumer.New(db.Store, consumer.Config{InstanceID: "solo", PollInterval: 20 * time.Millisecond}, c)
	require.NoError(t, err)
	require.NoError(t, e.Start(ctx))
	t.Cleanup(func() { require.NoError(t, e.Stop(context.Background())) })

	appendStreamEvents(t, db.Store, []uuid.UUID{poison}, 0, 3, 1)
	streams := make([]uuid.UUID, 100)
	for i := range streams {
		streams[i] = uuid.New()
	}
	streams[0] = other
	appendStreamEvents(t, db.Store, streams, 0, 100, 4) // 10,000 events
	ops := consumer.NewOps(db.Store)
	require.Eventually(t, func() bool {
		return db.Count(t, `SELECT count(*) FROM park_log`) == 10000
	}, 60*time.Second, 20*time.Millisecond, "every other stream goes on")
	require.Zero(t, db.Count(t, `SELECT count(*) FROM park_log WHERE stream = $1`, poison), "the parked stream waits")
	parked, err := ops.Parked(ctx, "parking")
	require.NoError(t, err)
	require.Len(t, parked, 1)
	require.Equal(t, poison.String(), parked[0].Stream)
	require.Equal(t, consumer.PartitionInstance(consumer.PartitionOf(poison.String(), 4)), parked[0].Shard)
	require.Contains(t, parked[0].LastError, "poison")
	require.Equal(t, 2, parked[0].Attempts)
	// A partition without events of its own moves its cursor at its next
	// poll: until then it reads as catching_up.
	require.Eventually(t, func() bool {
		for _, s := range shardsOf(t, ops, "parking") {
			if s.Status == consumer.StatusDead {
				return true // reported below
			}
			if s.Status != consumer.StatusIdle {
				return false
			}
		}
		return true
	}, 20*time.Second, 20*time.Millisecond)
	for _, s := range shardsOf(t, ops, "parking") {
		require.Equal(t, consumer.StatusIdle, s.Status, "no shard is dead")
	}

	// A retry that fails again: still parked, with the new error.
	_, err = ops.RetryParked(ctx, "parking", poison.String())
	require.NoError(t, err)
	appendOne(t, db.Store) // wakes the passes
	require.Eventually(t, func() bool {
		p, err := ops.Parked(ctx, "parking")
		require.NoError(t, err)
		return len(p) == 1 && p[0].Action == "" && p[0].Attempts == 3
	}, 20*time.Second, 20*time.Millisecond)

	// More events of the parked stream wait too; a retry that succeeds
	// applies all of them, in order.
	_, err = db.Store.Append(ctx, eventstore.Stream{TenantID: tenantA, AggregateType: "thing", AggregateID: poison}, 3,
		eventstore.NewEvent{Type: "thing.made", Payload: json.RawMessage(`{}`)})
	require.NoError(t, err)
	mu.Lock()
	delete(failing, poison)
	mu.Unlock()
	_, err = ops.RetryParked(ctx, "parking", poison.String())
	require.NoError(t, err)
	appendOne(t, db.Store)
	require.Eventually(t, func() bool {
		return db.Count(t, `SELECT count(*) FROM park_log WHERE stream = $1`, poison) == 4
	}, 20*time.Second, 20*time.Millisecond)
	require.Equal(t, []int{1, 2, 3, 4}, versionsOf(t, db, poison))
	parked, err = ops.Parked(ctx, "parking")
	require.NoError(t, err)
	require.Empty(t, parked)

	// Skip passes only the failing event.
	mu.Lock()
	failing[other] = 101
	mu.Unlock()
	for v := 100; v < 102; v++ {
		_, err = db.Store.Append(ctx, eventstore.Stream{TenantID: tenantA, AggregateType: "thing", AggregateID: other}, v,
			eventstore.NewEvent{Type: "thing.made", Payload: json.RawMessage(`{}`)})
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool {
		p, err := ops.Parked(ctx, "parking")
		require.NoError(t, err)
		return len(p) == 1 && p[0].Stream == other.String()
	}, 20*time.Second, 20*time.Millisecond)
	_, err = ops.SkipParked(ctx, "parking", other.String())
	require.NoError(t, err)
	appendOne(t, db.Store)
	require.Eventually(t, func() bool {
		return db.Count(t, `SELECT count(*) FROM park_log WHERE stream = $1`, other) == 101
	}, 20*time.Second, 20*time.Millisecond)
	vs := versionsOf(t, db, other)
	require.Equal(t, 102, vs[len(vs)-1])
	require.NotContains(t, vs, 101)

	_, err = ops.RetryParked(ctx, "parking", "no-such-stream")
	requireOpsError(t, err, "not_found", "stream_not_parked", consumer.ErrNotFound)
}

func versionsOf(t *testing.T, db *kumikotest.DB, stream uuid.UUID) []int {
	t.Helper()
	rows, err := db.Pool.Query(ctx, `SELECT version FROM park_log WHERE stream = $1 ORDER BY seq`, stream)
	require.NoError(t, err)
	vs, err := pgx.CollectRows(rows, pgx.RowTo[int])
	require.NoError(t, err)
	return vs
}

func shardsOf(t *testing.T, ops *consumer.Ops, name string) []consumer.ShardStatus {
	t.Helper()
	list, err := ops.List(ctx)
	require.NoError(t, err)
	var out []consumer.ShardStatus
	for _, s := range list {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// A reset to an event id while four processes run a partitioned consumer:
// every event after it is delivered again exactly once, none before it; the
// reset is recorded with its actor. A repartition from 16 to 5 while they
// run loses and repeats nothing.
func TestResetAndRepartitionWhileRunning(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	db.Exec(t, `CREATE TABLE part_log (seq bigserial PRIMARY KEY, event_id bigint NOT NULL, stream uuid NOT NULL, version int NOT NULL, process text NOT NULL)`)
	for i := range 4 {
		startPartitionChild(t, db, fmt.Sprintf("r%d", i))
	}
	ops := consumer.NewOps(db.Store)
	require.Eventually(t, func() bool { return owners(t, ops) == 4 }, 30*time.Second, 20*time.Millisecond, "four processes share the partitions")
	streams := make([]uuid.UUID, 32)
	for i := range streams {
		streams[i] = uuid.New()
	}
	appendStreamEvents(t, db.Store, streams, 0, 10, 4)
	total := db.Count(t, `SELECT count(*) FROM kumiko_events`)
	maxBefore := int64(db.Count(t, `SELECT max(id) FROM kumiko_events`))
	caughtUp := func(n int) func() bool {
		return func() bool { return db.Count(t, `SELECT count(*) FROM part_log`) == n }
	}
	require.Eventually(t, caughtUp(total), 30*time.Second, 20*time.Millisecond)

	var to int64
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT id FROM kumiko_events ORDER BY id OFFSET 100 LIMIT 1`).Scan(&to))
	res, err := ops.Reset(ctx, "parts", consumer.ResetOptions{To: to, Actor: "ops-alice"})
	require.NoError(t, err)
	require.Len(t, res.Shards, partitionCount)
	after := db.Count(t, `SELECT count(*) FROM kumiko_events WHERE id > $1`, to)
	require.Eventually(t, caughtUp(total+after), 30*time.Second, 20*time.Millisecond)
	head := int64(db.Count(t, `SELECT max(id) FROM kumiko_events`))
	require.Eventually(t, func() bool { // every partition past the head: nothing more comes
		for _, s := range shardsOf(t, ops, "parts") {
			if s.Cursor < head {
				return false
			}
		}
		return true
	}, 30*time.Second, 20*time.Millisecond)
	require.Equal(t, total+after, db.Count(t, `SELECT count(*) FROM part_log`))
	require.Zero(t, db.Count(t, `SELECT count(*) FROM (SELECT event_id FROM part_log GROUP BY event_id
		HAVING count(*) <> CASE WHEN event_id > $1 THEN 2 ELSE 1 END) x`, to), "after the id twice, before it once")
	require.Equal(t, 1, db.Count(t, `SELECT count(*) FROM kumiko_consumer_audit WHERE name = 'parts' AND action = 'reset' AND actor = 'ops-alice'`))

	_, err = ops.Reset(ctx, "parts", consumer.ResetOptions{To: 1 << 40, Actor: "ops-alice"})
	var ce *consumer.Error
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "invalid_operation", ce.Reason())
	_, err = ops.Reset(ctx, "nope", consumer.ResetOptions{Actor: "ops-alice"})
	requireOpsError(t, err, "not_found", consumer.ReasonNotFound, consumer.ErrNotFound)

	// Repartition while writers go on.
	done := make(chan struct{})
	go func() { defer close(done); appendStreamEvents(t, db.Store, streams, 10, 5, 2) }()
	rp, err := ops.Repartition(ctx, "parts", 5, consumer.RepartitionOptions{Actor: "ops-alice", Wait: 30 * time.Second})
	require.NoError(t, err)
	require.Equal(t, partitionCount, rp.From)
	require.Equal(t, 5, rp.To)
	<-done
	total2 := db.Count(t, `SELECT count(*) FROM kumiko_events`)
	require.Eventually(t, caughtUp(total2+after), 30*time.Second, 20*time.Millisecond)
	require.Len(t, shardsOf(t, ops, "parts"), 5)
	require.Zero(t, db.Count(t, `SELECT count(*) FROM (SELECT event_id FROM part_log GROUP BY event_id
		HAVING count(*) <> CASE WHEN event_id > $1 AND event_id <= $2 THEN 2 ELSE 1 END) x`, to, maxBefore), "nothing lost or repeated by the repartition")
	require.Zero(t, db.Count(t, `SELECT count(*) FROM (
		SELECT version, lag(version) OVER (PARTITION BY stream ORDER BY seq) AS prev FROM part_log WHERE seq > $1) x
		WHERE prev IS NOT NULL AND version <> prev + 1`, total+after), "a stream's events in order across the repartition")
}

// The instance ids beginning with "__" are the dispatcher's own.
func TestPartitionSettingsAreChecked(t *testing.T) {
	db := kumikotest.NewDB(t)
	_, err := consumer.New(db.Store, consumer.Config{InstanceID: "__partition_1__"})
	require.ErrorContains(t, err, "reserved")
	for _, c := range []consumer.Consumer{
		{Name: "a", Partitions: -1, Handle: noop},
		{Name: "a", Partitions: consumer.MaxPartitions + 1, Handle: noop},
		{Name: "a", Partitions: 4, Delivery: 1, Handle: noop},
		{Name: "a", Park: true, SkipApplyErrors: true, Handle: noop},
	} {
		_, err := consumer.New(db.Store, consumer.Config{InstanceID: "x"}, c)
		require.Error(t, err)
	}
	require.Equal(t, consumer.PartitionOf("abc", 16), consumer.PartitionOf("abc", 16))
	require.Zero(t, consumer.PartitionOf("abc", 1))
	spread := map[int]bool{}
	for i := range 200 {
		spread[consumer.PartitionOf(uuid.NewString()+strings.Repeat("x", i%3), 8)] = true
	}
	require.Len(t, spread, 8)
}

// A commit wakes only the partitions that have events in it: the others
// are passed over until their next poll (here a minute away), so their
// cursors stay where they were while the event's own partition delivers
// it — and every partition delivers what is its own.
func TestCommitWakesOnlyItsPartitions(t *testing.T) {
	db := kumikotest.NewDB(t)
	handled := make(chan eventstore.Event, 16)
	c := consumer.Consumer{Name: "routed", Partitions: 4, Handle: func(_ context.Context, _ pgx.Tx, ev eventstore.Event) error {
		handled <- ev
		return nil
	}}
	e, err := consumer.New(db.Store, consumer.Config{InstanceID: "p", PollInterval: time.Minute}, c)
	require.NoError(t, err)
	require.NoError(t, e.Register(ctx))
	appendTo := func(partition int) eventstore.Event {
		t.Helper()
		id := uuid.New()
		for consumer.PartitionOf(id.String(), 4) != partition {
			id = uuid.New()
		}
		res, err := db.Store.Append(ctx, eventstore.Stream{TenantID: tenantA, AggregateType: "thing", AggregateID: id}, 0,
			eventstore.NewEvent{Type: "thing.made", Payload: json.RawMessage(`{}`)})
		require.NoError(t, err)
		return res.Events[0]
	}
	seed := appendTo(1)
	require.NoError(t, e.Start(ctx))
	t.Cleanup(func() { require.NoError(t, e.Stop(context.Background())) })
	require.Equal(t, seed.ID, (<-handled).ID)
	ops := consumer.NewOps(db.Store)
	cursors := func() map[int]int64 {
		out := map[int]int64{}
		for _, s := range shardsOf(t, ops, "routed") {
			out[s.Partition] = s.Cursor
		}
		return out
	}
	atSeed := map[int]int64{0: seed.ID, 1: seed.ID, 2: seed.ID, 3: seed.ID}
	require.Eventually(t, func() bool { return fmt.Sprint(cursors()) == fmt.Sprint(atSeed) }, 5*time.Second, 10*time.Millisecond)
	// The start's own wake-ups are over — the listener's first, once it
	// listens, and the passes the router woke for it (it wakes every
	// partition it cannot judge yet): from here a partition passes only
	// when the router wakes it for a commit.
	require.Eventually(t, func() bool { return consumer.Settled(e, "routed", 4) }, 10*time.Second, 5*time.Millisecond,
		"the partitions settle after the start")

	ev := appendTo(0)
	select {
	case got := <-handled:
		require.Equal(t, ev.ID, got.ID)
	case <-time.After(5 * time.Second):
		t.Fatal("the event's partition did not deliver it")
	}
	time.Sleep(300 * time.Millisecond) // what a wrongly woken partition needs to move
	require.Equal(t, map[int]int64{0: ev.ID, 1: seed.ID, 2: seed.ID, 3: seed.ID}, cursors())

	want := map[int64]bool{}
	for k := 1; k < 4; k++ {
		want[appendTo(k).ID] = true
	}
	for range 3 {
		select {
		case got := <-handled:
			require.True(t, want[got.ID], "event %d", got.ID)
			delete(want, got.ID)
		case <-time.After(5 * time.Second):
			t.Fatalf("events %v not delivered", want)
		}
	}
}

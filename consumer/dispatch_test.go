package consumer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/consumer"
	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/kumikotest"
)

// recorder is a consumer that writes every event it applies into a table in
// the pass transaction, keyed by event id: a duplicate apply fails loudly.
func recorder(t *testing.T, db *kumikotest.DB, name string, delivery feature.Delivery) consumer.Consumer {
	t.Helper()
	table := "seen_" + name
	db.Exec(t, fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (event_id bigint PRIMARY KEY, instance text NOT NULL, seq bigserial)`, table))
	return consumer.Consumer{
		Name:     name,
		Delivery: delivery,
		Handle: func(ctx context.Context, tx pgx.Tx, ev eventstore.Event) error {
			var instance string
			if err := tx.QueryRow(ctx, "SELECT current_setting('application_name')").Scan(&instance); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, fmt.Sprintf("INSERT INTO %s (event_id, instance) VALUES ($1, $2)", table), ev.ID, instance)
			return err
		},
	}
}

func newEventDispatcher(t *testing.T, db *kumikotest.DB, instance string, consumers ...consumer.Consumer) *consumer.Dispatcher {
	t.Helper()
	e, err := consumer.New(db.Store, consumer.Config{InstanceID: instance, PollInterval: 50 * time.Millisecond}, consumers...)
	require.NoError(t, err)
	require.NoError(t, e.Register(context.Background()))
	return e
}

func appendOne(t *testing.T, s *eventstore.Store) eventstore.Event {
	t.Helper()
	res, err := s.Append(context.Background(), eventstore.Stream{TenantID: tenantA, AggregateType: "thing"}, 0,
		eventstore.NewEvent{Type: "thing.made", Payload: json.RawMessage(`{}`)})
	require.NoError(t, err)
	return res.Events[0]
}

func seen(t *testing.T, db *kumikotest.DB, name string) []int64 {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), "SELECT event_id FROM seen_"+name+" ORDER BY seq")
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	return ids
}

// A writer holds its transaction open after allocating an id while later
// events commit: the consumer delivers what precedes the gap, waits at it,
// and delivers the late event once it commits — in order. An open
// transaction that wrote no events delays nothing, and a rolled-back id is
// passed once its writer is gone.
func TestLateCommitIsNeverSkipped(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	ctx := context.Background()
	s := db.Store
	c := recorder(t, db, "late", feature.Shared)
	e := newEventDispatcher(t, db, "p1", c)

	first := appendOne(t, s)

	// An idle transaction that only read: not a writer.
	idle, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer idle.Rollback(ctx)
	_, err = idle.Exec(ctx, "SELECT count(*) FROM kumiko_events")
	require.NoError(t, err)

	slow, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer slow.Rollback(ctx)
	late, err := s.AppendTx(ctx, slow, eventstore.Stream{TenantID: tenantA, AggregateType: "thing"}, 0,
		eventstore.NewEvent{Type: "thing.made", Payload: json.RawMessage(`{}`)})
	require.NoError(t, err)
	after := []eventstore.Event{appendOne(t, s), appendOne(t, s)}
	require.Greater(t, after[0].ID, late.Events[0].ID)

	res, err := e.RunPass(ctx, "late")
	require.NoError(t, err)
	require.Equal(t, []int64{first.ID}, seen(t, db, "late"), "delivery stops at the open writer's id")
	require.Equal(t, first.ID, res.Cursor)
	for range 3 {
		_, err = e.RunPass(ctx, "late")
		require.NoError(t, err)
	}
	require.Equal(t, []int64{first.ID}, seen(t, db, "late"), "and keeps waiting while it is open")

	require.NoError(t, slow.Commit(ctx))
	_, err = e.RunPass(ctx, "late")
	require.NoError(t, err)
	require.Equal(t, []int64{first.ID, late.Events[0].ID, after[0].ID, after[1].ID}, seen(t, db, "late"),
		"the late event is delivered, in id order, with nothing skipped")

	// A rolled-back writer leaves a gap that is passed.
	gone, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	_, err = s.AppendTx(ctx, gone, eventstore.Stream{TenantID: tenantA, AggregateType: "thing"}, 0,
		eventstore.NewEvent{Type: "thing.made", Payload: json.RawMessage(`{}`)})
	require.NoError(t, err)
	next := appendOne(t, s)
	_, err = e.RunPass(ctx, "late")
	require.NoError(t, err)
	require.Len(t, seen(t, db, "late"), 4, "waiting for the open writer")
	require.NoError(t, gone.Rollback(ctx))
	res, err = e.RunPass(ctx, "late")
	require.NoError(t, err)
	ids := seen(t, db, "late")
	require.Equal(t, next.ID, ids[len(ids)-1], "the rolled-back id is passed")
	require.Equal(t, next.ID, res.Cursor)

	// The idle reader is still open and never delayed anything.
	require.NoError(t, idle.Rollback(ctx))
}

// Several dispatchers on one shared consumer, many concurrent writers: every
// event applied exactly once, in id order.
func TestSharedConsumerExactlyOnceAcrossDispatchers(t *testing.T) {
	t.Parallel()
	const (
		dispatchers = 4
		writers     = 8
		perWriter   = 2500 // 20,000 events
	)
	db := kumikotest.NewDB(t, kumikotest.MaxConns(40))
	ctx := context.Background()
	var ds []*consumer.Dispatcher
	for i := range dispatchers {
		c := recorder(t, db, "shared", feature.Shared)
		c.BatchSize = 100
		d := newEventDispatcher(t, db, fmt.Sprintf("p%d", i), c)
		require.NoError(t, d.Start(ctx))
		ds = append(ds, d)
	}
	t.Cleanup(func() {
		for _, d := range ds {
			require.NoError(t, d.Stop(context.Background()))
		}
	})

	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := 0; i < perWriter; i += 10 {
				batch := make([]eventstore.NewEvent, 10)
				for j := range batch {
					batch[j] = eventstore.NewEvent{Type: "thing.made", Payload: json.RawMessage(fmt.Sprintf(`{"w":%d,"i":%d}`, w, i+j))}
				}
				// Some writers append in transactions that take a while, so
				// commits land out of id order.
				err := db.Store.WithTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
					if _, err := db.Store.AppendTx(ctx, tx, eventstore.Stream{TenantID: tenantA, AggregateType: "thing", AggregateID: uuid.Must(uuid.NewV7())}, 0, batch...); err != nil {
						return err
					}
					if w%2 == 0 {
						_, err := tx.Exec(ctx, "SELECT pg_sleep(0.002)")
						return err
					}
					return nil
				})
				require.NoError(t, err)
			}
		})
	}
	wg.Wait()
	total := writers * perWriter
	require.Eventually(t, func() bool {
		return db.Count(t, "SELECT count(*) FROM seen_shared") == total
	}, 60*time.Second, 20*time.Millisecond, "all %d events applied", total)

	ids := seen(t, db, "shared")
	require.Len(t, ids, total)
	for i := 1; i < len(ids); i++ {
		require.Less(t, ids[i-1], ids[i], "applied in id order")
	}
	require.Equal(t, total, db.Count(t, "SELECT count(*) FROM kumiko_events"))
	require.Equal(t, 1, db.Count(t, "SELECT count(*) FROM kumiko_event_consumers WHERE name = 'shared'"))
}

// Per-instance consumers: every process sees every event, each on its own
// state row; no shared row exists.
func TestPerInstanceEveryProcessSeesEverything(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	ctx := context.Background()
	var ds []*consumer.Dispatcher
	for _, instance := range []string{"a", "b", "c"} {
		c := recorder(t, db, "local_"+instance, feature.PerInstance)
		c.Name = "local"
		d := newEventDispatcher(t, db, instance, c)
		ds = append(ds, d)
	}
	for range 25 {
		appendOne(t, db.Store)
	}
	for _, d := range ds {
		res, err := d.RunPass(ctx, "local")
		require.NoError(t, err)
		require.True(t, res.Locked, "per-instance rows never contend")
	}
	for _, instance := range []string{"a", "b", "c"} {
		require.Len(t, seen(t, db, "local_"+instance), 25, instance)
	}
	require.Equal(t, 3, db.Count(t, "SELECT count(*) FROM kumiko_event_consumers WHERE name = 'local'"))
	require.Equal(t, 0, db.Count(t, "SELECT count(*) FROM kumiko_event_consumers WHERE instance_id = '__shared__'"))
}

func TestConsumerMetrics(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	c := recorder(t, db, "measured", feature.Shared)
	e, err := consumer.New(db.Store, consumer.Config{InstanceID: "m1", PollInterval: 20 * time.Millisecond, Metrics: reg}, c)
	require.NoError(t, err)
	require.NoError(t, e.Start(ctx))
	t.Cleanup(func() { require.NoError(t, e.Stop(context.Background())) })
	for range 7 {
		appendOne(t, db.Store)
	}
	var (
		n   uint64
		sum float64
	)
	require.Eventually(t, func() bool {
		processed, ok1 := metricValue(t, reg, "kumiko_event_consumer_events_processed_total")
		lag, ok2 := metricValue(t, reg, "kumiko_event_consumer_lag_events")
		// The pass counts the events, then observes each one's delivery.
		n, sum = histogram(t, reg, "kumiko_event_consumer_delivery_seconds")
		return ok1 && ok2 && processed == 7 && lag == 0 && n == 7
	}, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, 1, testutil.CollectAndCount(reg, "kumiko_event_consumer_delivery_latency_seconds"))
	require.Positive(t, sum)
}

// histogram returns the sample count and sum of a histogram family's only
// series; zeros while it has none.
func histogram(t *testing.T, reg *prometheus.Registry, name string) (uint64, float64) {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			h := mf.GetMetric()[0].GetHistogram()
			return h.GetSampleCount(), h.GetSampleSum()
		}
	}
	return 0, 0
}

// metricValue returns the value of a metric family's only series.
func metricValue(t *testing.T, reg *prometheus.Registry, name string) (float64, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			m := mf.GetMetric()[0]
			return m.GetCounter().GetValue() + m.GetGauge().GetValue(), true
		}
	}
	return 0, false
}

// A failing event: the events before it are applied and committed with the
// cursor right before it; a lenient consumer applies everything else.
func TestPoisonEventStopsAtItself(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	ctx := context.Background()
	var evs []eventstore.Event
	for range 5 {
		evs = append(evs, appendOne(t, db.Store))
	}
	poison := evs[2].ID
	poisoned := func(c consumer.Consumer) consumer.Consumer {
		inner := c.Handle
		c.Handle = func(ctx context.Context, tx pgx.Tx, ev eventstore.Event) error {
			if err := inner(ctx, tx, ev); err != nil {
				return err
			}
			if ev.ID == poison {
				return fmt.Errorf("cannot digest %d", ev.ID) // after writing: the write must roll back too
			}
			return nil
		}
		return c
	}
	strict := poisoned(recorder(t, db, "strict", feature.Shared))
	lenient := poisoned(recorder(t, db, "lenient", feature.Shared))
	lenient.SkipApplyErrors = true
	e := newEventDispatcher(t, db, "p1", strict, lenient)

	res, err := e.RunPass(ctx, "strict")
	require.NoError(t, err)
	require.ErrorContains(t, res.Failed, "cannot digest")
	require.Equal(t, []int64{evs[0].ID, evs[1].ID}, seen(t, db, "strict"))
	require.Equal(t, evs[1].ID, res.Cursor)
	require.Equal(t, 1, db.Count(t, "SELECT attempts FROM kumiko_event_consumers WHERE name = 'strict'"))

	res, err = e.RunPass(ctx, "lenient")
	require.NoError(t, err)
	require.Equal(t, []int64{evs[0].ID, evs[1].ID, evs[3].ID, evs[4].ID}, seen(t, db, "lenient"))
	require.Equal(t, evs[4].ID, res.Cursor)
	require.Equal(t, 0, db.Count(t, "SELECT attempts FROM kumiko_event_consumers WHERE name = 'lenient'"))
}

// A batch handler gets the wanted events of a pass at once; a consumer that
// starts from now ignores what came before it was registered; a dead
// consumer with a re-arm cooldown comes back by itself, a bounded number of
// times.
func TestBatchHandlersStartFromAndRearm(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	ctx := context.Background()
	old := appendOne(t, db.Store)

	batches := &batchLog{}
	batch := consumer.Consumer{Name: "batched", Types: []string{"thing.made"}, HandleBatch: batches.handle}
	late := recorder(t, db, "late_starter", feature.Shared)
	late.StartFrom = feature.FromNow
	failures := 0
	rearmed := consumer.Consumer{Name: "rearmed", MaxAttempts: 1, RearmAfter: time.Nanosecond, MaxRearms: 2,
		Handle: func(context.Context, pgx.Tx, eventstore.Event) error { failures++; return fmt.Errorf("always") }}
	e := newEventDispatcher(t, db, "p1", batch, late, rearmed)

	fresh := []eventstore.Event{appendOne(t, db.Store), appendOne(t, db.Store)}
	kumikotest.CatchUp(t, e, "batched", "late_starter")
	require.Equal(t, [][]int64{{old.ID, fresh[0].ID, fresh[1].ID}}, batches.get(), "one call with the whole pass")
	require.Equal(t, []int64{fresh[0].ID, fresh[1].ID}, seen(t, db, "late_starter"), "nothing from before its registration")

	for range 6 {
		_, err := e.RunPass(ctx, "rearmed")
		require.NoError(t, err)
	}
	var (
		status   string
		attempts int
	)
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT status, attempts FROM kumiko_event_consumers WHERE name = 'rearmed'").Scan(&status, &attempts))
	require.Equal(t, "dead", status)
	require.Equal(t, 3, attempts, "one attempt, then two re-arms")
	require.Equal(t, 6, failures, "a failing pass runs the handler once fast, once under savepoints")
}

// Registering again — a restart, another process, another StartFrom — never
// moves an existing cursor.
func TestRegisterNeverRewinds(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	ctx := context.Background()
	for range 3 {
		appendOne(t, db.Store)
	}
	c := recorder(t, db, "steady", feature.Shared)
	e := newEventDispatcher(t, db, "p1", c)
	kumikotest.CatchUp(t, e, "steady")
	cursor := db.Count(t, "SELECT last_processed_event_id FROM kumiko_event_consumers WHERE name = 'steady'")
	require.Positive(t, cursor)

	again := c
	again.StartFrom = feature.FromNow
	for _, instance := range []string{"p1", "p2"} {
		require.NoError(t, newEventDispatcher(t, db, instance, c).Register(ctx))
		require.NoError(t, newEventDispatcher(t, db, instance, again).Register(ctx))
	}
	require.Equal(t, cursor, db.Count(t, "SELECT last_processed_event_id FROM kumiko_event_consumers WHERE name = 'steady'"))
	require.Equal(t, 1, db.Count(t, "SELECT count(*) FROM kumiko_event_consumers WHERE name = 'steady'"))
}

// With MinPassInterval, commits arriving within the interval after a pass
// started share the next pass instead of waking one each; every event is
// still delivered, in order.
func TestMinPassIntervalCoalescesWakeUps(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	ctx := context.Background()
	const interval = 250 * time.Millisecond
	var (
		mu     sync.Mutex
		passes int
		got    []int64
	)
	c := consumer.Consumer{
		Name: "coalesced", Delivery: feature.Shared, MinPassInterval: interval,
		HandleBatch: func(_ context.Context, _ pgx.Tx, evs []eventstore.Event) error {
			mu.Lock()
			defer mu.Unlock()
			passes++
			for _, ev := range evs {
				got = append(got, ev.ID)
			}
			return nil
		},
	}
	// Only wake-ups start passes: the poll would not come during the test.
	e, err := consumer.New(db.Store, consumer.Config{InstanceID: "c1", PollInterval: time.Hour}, c)
	require.NoError(t, err)
	require.NoError(t, e.Start(ctx))
	t.Cleanup(func() { require.NoError(t, e.Stop(context.Background())) })

	start := time.Now()
	var want []int64
	for range 20 {
		want = append(want, appendOne(t, db.Store).ID)
	}
	elapsed := time.Since(start)
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == len(want)
	}, 10*time.Second, 10*time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, want, got)
	// A pass at most per interval while the appends ran, and one after.
	require.LessOrEqual(t, passes, int(elapsed/interval)+2, "%d passes for 20 commits in %s", passes, elapsed)
}

// A consumer on standby is not woken by commits: it passes at the poll
// interval and its cursor follows the log. Once off standby, the next
// commit's wake-up starts a pass that delivers what the standby left.
func TestStandbyIgnoresWakeUps(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	ctx := context.Background()
	var standby atomic.Bool
	standby.Store(true)
	batches := &batchLog{}
	// Only wake-ups could start passes: the poll would not come during the
	// test.
	woken := consumer.Consumer{Name: "standby", Delivery: feature.Shared, Standby: standby.Load, HandleBatch: batches.handle}
	e, err := consumer.New(db.Store, consumer.Config{InstanceID: "c1", PollInterval: time.Hour}, woken)
	require.NoError(t, err)
	// The pass a start runs delivers what is there; then the loop waits.
	zeroth := appendOne(t, db.Store).ID
	require.NoError(t, e.Start(ctx))
	t.Cleanup(func() { require.NoError(t, e.Stop(context.Background())) })
	require.Eventually(t, func() bool { return len(batches.get()) > 0 }, 10*time.Second, 10*time.Millisecond)

	first := appendOne(t, db.Store).ID
	// A pass woken by the commit would deliver it well within this.
	time.Sleep(300 * time.Millisecond)
	require.Equal(t, [][]int64{{zeroth}}, batches.get(), "a commit woke a consumer on standby")
	standby.Store(false)
	second := appendOne(t, db.Store).ID
	require.Eventually(t, func() bool { return len(batches.get()) > 1 }, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, [][]int64{{zeroth}, {first, second}}, batches.get())

	// On standby for good, the poll's passes deliver everything.
	polledBatches := &batchLog{}
	polled := consumer.Consumer{Name: "polled", Delivery: feature.Shared, Standby: func() bool { return true }, HandleBatch: polledBatches.handle}
	p, err := consumer.New(db.Store, consumer.Config{InstanceID: "c2", PollInterval: 20 * time.Millisecond}, polled)
	require.NoError(t, err)
	require.NoError(t, p.Start(ctx))
	t.Cleanup(func() { require.NoError(t, p.Stop(context.Background())) })
	has := func(id int64) func() bool {
		return func() bool { return slices.Contains(slices.Concat(polledBatches.get()...), id) }
	}
	require.Eventually(t, has(second), 10*time.Second, 10*time.Millisecond) // the start's pass
	third := appendOne(t, db.Store).ID
	require.Eventually(t, has(third), 10*time.Second, 10*time.Millisecond, "a poll's pass delivers it")
}

// batchLog records the event ids of every batch a HandleBatch gets.
type batchLog struct {
	mu      sync.Mutex
	batches [][]int64
}

func (b *batchLog) handle(_ context.Context, _ pgx.Tx, evs []eventstore.Event) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	ids := make([]int64, 0, len(evs))
	for _, ev := range evs {
		ids = append(ids, ev.ID)
	}
	b.batches = append(b.batches, ids)
	return nil
}

// get returns the batches so far.
func (b *batchLog) get() [][]int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.batches)
}

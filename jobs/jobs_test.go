package jobs_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
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
	"github.com/kumiko-go/kumiko/jobs"
	"github.com/kumiko-go/kumiko/kumikotest"
)

var tenantA = uuid.MustParse("0190a000-0000-7000-8000-00000000000a")

// newRunner migrates River's tables into db and builds a runner; start
// works jobs until the test ends.
func newRunner(t *testing.T, db *kumikotest.DB, cfg jobs.Config, start bool, js ...jobs.Job) *jobs.Runner {
	t.Helper()
	_, err := jobs.Migrate(t.Context(), db.Store)
	require.NoError(t, err)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 50 * time.Millisecond
	}
	r, err := jobs.New(db.Store, cfg, js...)
	require.NoError(t, err)
	if start {
		require.NoError(t, r.Start(t.Context()))
		t.Cleanup(func() { require.NoError(t, r.Stop(context.Background())) })
	}
	return r
}

func noop(context.Context, jobs.Run) error { return nil }

func TestMigrate(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t) // migrated with River's tables; migrate another schema from scratch
	schema := db.Schema + "_river"
	db.Exec(t, "CREATE SCHEMA "+schema)
	t.Cleanup(func() { db.Exec(t, "DROP SCHEMA "+schema+" CASCADE") })
	store, err := eventstore.New(db.Pool, eventstore.Config{Schema: schema})
	require.NoError(t, err)
	var wg sync.WaitGroup
	applied := make([][]int, 3)
	for i := range applied {
		wg.Go(func() {
			var err error
			applied[i], err = jobs.Migrate(t.Context(), store)
			require.NoError(t, err)
		})
	}
	wg.Wait()
	var all []int
	for _, a := range applied {
		all = append(all, a...)
	}
	require.NotEmpty(t, all, "one of the concurrent migrations applied River's versions")
	seen := map[int]bool{}
	for _, v := range all {
		require.False(t, seen[v], "version %d was applied twice", v)
		seen[v] = true
	}
	require.Equal(t, 1, db.Count(t, "SELECT count(*) FROM pg_tables WHERE schemaname = $1 AND tablename = 'river_job'", schema),
		"River's tables live in the app's schema")
	again, err := jobs.Migrate(t.Context(), store)
	require.NoError(t, err)
	require.Empty(t, again)
}

func TestJobValidation(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	for _, tc := range []struct {
		job  jobs.Job
		want string
	}{
		{jobs.Job{Name: "Bad Name", Work: noop}, "lowercase"},
		{jobs.Job{Name: "x", Work: noop}, `job name "x": want lowercase letters`},
		{jobs.Job{Name: "no-work"}, "no Work"},
		{jobs.Job{Name: "bad-cron", Work: noop, Schedule: "every day"}, `jobs: job "bad-cron": Schedule "every day": expected exactly 5 fields`},
		{jobs.Job{Name: "bad-day", Work: noop, Schedule: "0 7 * * 8"}, `jobs: job "bad-day": Schedule "0 7 * * 8"`},
		{jobs.Job{Name: "bad-attempts", Work: noop, MaxAttempts: -1}, `jobs: job "bad-attempts": MaxAttempts is negative (-1)`},
		{jobs.Job{Name: "bad-timeout", Work: noop, Timeout: -time.Second}, `job "bad-timeout": Timeout is negative`},
	} {
		_, err := jobs.New(db.Store, jobs.Config{}, tc.job)
		require.ErrorContains(t, err, tc.want)
	}
	// A UniqueFor that is not positive is not unique: the runner accepts a
	// negative one (the DSL refuses it, registry.Build).
	_, err := jobs.New(db.Store, jobs.Config{}, jobs.Job{Name: "not-unique", Work: noop, UniqueFor: -time.Second, Schedule: "@daily"})
	require.NoError(t, err)
	_, err = jobs.New(db.Store, jobs.Config{}, jobs.Job{Name: "twice", Work: noop}, jobs.Job{Name: "twice", Work: noop})
	require.ErrorContains(t, err, "twice")
	for _, cfg := range []jobs.Config{{FetchCooldown: time.Microsecond}, {FetchCooldown: 2 * time.Second}, {PollInterval: time.Second, FetchCooldown: time.Minute}} {
		_, err := jobs.New(db.Store, cfg, jobs.Job{Name: "once", Work: noop})
		require.ErrorContains(t, err, "Config.FetchCooldown")
	}
	_, err = jobs.New(db.Store, jobs.Config{RescueAfter: -time.Second}, jobs.Job{Name: "once", Work: noop})
	require.ErrorContains(t, err, "Config.RescueAfter is negative")
	// A rescue time shorter than a job's timeout would retry attempts that
	// still run; the default timeout is a minute.
	_, err = jobs.New(db.Store, jobs.Config{RescueAfter: 30 * time.Second}, jobs.Job{Name: "quick", Work: noop, Timeout: time.Second}, jobs.Job{Name: "slow", Work: noop})
	require.ErrorContains(t, err, `Config.RescueAfter (30s) is shorter than the timeout of job "slow" (1m0s)`)
	_, err = jobs.New(db.Store, jobs.Config{RescueAfter: time.Minute}, jobs.Job{Name: "slow", Work: noop})
	require.NoError(t, err, "RescueAfter may equal the longest timeout")
}

// A job enqueued in a write transaction exists only if the write commits,
// and runs with the cause it was enqueued with.
func TestEnqueueTxFollowsTheWrite(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	ran := make(chan jobs.Run, 4)
	r := newRunner(t, db, jobs.Config{}, true, jobs.Job{Name: "remind", Work: func(_ context.Context, run jobs.Run) error {
		ran <- run
		return nil
	}})
	cause := jobs.Cause{TenantID: tenantA, UserID: "ann", CorrelationID: "corr-1", CausationID: "req-1"}

	tx, err := db.Pool.Begin(t.Context())
	require.NoError(t, err)
	_, err = r.EnqueueTx(t.Context(), tx, "remind", map[string]any{"n": 1}, jobs.Options{Cause: cause})
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(t.Context()))
	require.Equal(t, 0, db.Count(t, "SELECT count(*) FROM river_job"), "a rolled-back write enqueues nothing")

	var id int64
	require.NoError(t, pgx.BeginFunc(t.Context(), db.Pool, func(tx pgx.Tx) error {
		e, err := r.EnqueueTx(t.Context(), tx, "remind", map[string]any{"n": 2}, jobs.Options{Cause: cause})
		id = e.ID
		return err
	}))
	run := receive(t, ran)
	require.Equal(t, id, run.ID)
	require.JSONEq(t, `{"n":2}`, string(run.Args))
	require.Equal(t, cause, run.Cause, "the job runs as the user and tenant that caused it")
	require.Equal(t, 1, run.Attempt)

	_, err = r.Enqueue(t.Context(), "nope", nil, jobs.Options{})
	require.ErrorIs(t, err, jobs.ErrUnknownJob)
	_, err = r.Enqueue(t.Context(), "remind", []int{1}, jobs.Options{})
	require.ErrorContains(t, err, "JSON object")
}

// RunAt delays a job: it does not run before its time.
func TestRunAt(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	ran := make(chan jobs.Run, 1)
	r := newRunner(t, db, jobs.Config{}, true, jobs.Job{Name: "due", Work: func(_ context.Context, run jobs.Run) error {
		ran <- run
		return nil
	}})
	at := time.Now().Add(300 * time.Millisecond)
	_, err := r.Enqueue(t.Context(), "due", nil, jobs.Options{RunAt: at})
	require.NoError(t, err)
	run := receive(t, ran)
	require.False(t, time.Now().Before(at), "the job ran before its RunAt")
	require.WithinDuration(t, at, run.ScheduledAt, time.Millisecond)
}

// A unique job enqueued twice while the first is pending is one job.
func TestUniqueJob(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	r := newRunner(t, db, jobs.Config{}, false, jobs.Job{Name: "digest", Work: noop, UniqueFor: time.Hour})
	first, err := r.Enqueue(t.Context(), "digest", map[string]any{"day": "2026-11-30"}, jobs.Options{})
	require.NoError(t, err)
	second, err := r.Enqueue(t.Context(), "digest", map[string]any{"day": "2026-11-30"}, jobs.Options{})
	require.NoError(t, err)
	require.True(t, second.Duplicate)
	require.Equal(t, first.ID, second.ID)
	other, err := r.Enqueue(t.Context(), "digest", map[string]any{"day": "2026-12-01"}, jobs.Options{})
	require.NoError(t, err)
	require.False(t, other.Duplicate, "other args are another job")
}

// A failing job is retried with growing delays and discarded after
// MaxAttempts; the operator sees every attempt's error, can retry it and
// can cancel a pending one.
func TestFailingJobRetriesThenDiscards(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	var mu sync.Mutex
	var runs []jobs.Run
	r := newRunner(t, db, jobs.Config{Backoff: func(n int) time.Duration { return 40 * time.Millisecond << (n - 1) }, PollInterval: 20 * time.Millisecond}, true,
		jobs.Job{Name: "webhook", MaxAttempts: 4, Work: func(_ context.Context, run jobs.Run) error {
			mu.Lock()
			runs = append(runs, run)
			mu.Unlock()
			return fmt.Errorf("receiver answered 503 (attempt %d)", run.Attempt)
		}})
	e, err := r.Enqueue(t.Context(), "webhook", nil, jobs.Options{})
	require.NoError(t, err)
	in := waitState(t, r, e.ID, "discarded")
	require.Equal(t, 4, in.Attempt)
	require.Len(t, in.Errors, 4)
	require.Equal(t, "receiver answered 503 (attempt 4)", in.Errors[3].Error)
	mu.Lock()
	require.Len(t, runs, 4)
	var prev time.Duration
	for i := 1; i < len(runs); i++ {
		delay := runs[i].ScheduledAt.Sub(in.Errors[i-1].At)
		require.Greater(t, delay, prev, "the delay before attempt %d grows", i+1)
		prev = delay
	}
	mu.Unlock()

	list, err := r.List(t.Context(), jobs.ListParams{Name: "webhook", States: []string{"discarded"}})
	require.NoError(t, err)
	require.Len(t, list, 1)

	_, err = r.Retry(t.Context(), e.ID)
	require.NoError(t, err)
	waitState(t, r, e.ID, "discarded") // fails once more, out of attempts

	later, err := r.Enqueue(t.Context(), "webhook", nil, jobs.Options{RunAt: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	in, err = r.Cancel(t.Context(), later.ID)
	require.NoError(t, err)
	require.Equal(t, "cancelled", in.State)
	_, err = r.Get(t.Context(), 1<<40)
	require.ErrorIs(t, err, jobs.ErrNotFound)
}

func waitState(t *testing.T, r *jobs.Runner, id int64, state string) jobs.Info {
	t.Helper()
	var in jobs.Info
	require.Eventually(t, func() bool {
		var err error
		in, err = r.Get(t.Context(), id)
		require.NoError(t, err)
		return in.State == state
	}, 30*time.Second, 10*time.Millisecond, "job %d never reached %s", id, state)
	return in
}

func receive[T any](t *testing.T, c <-chan T) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(30 * time.Second):
		t.Fatal("nothing arrived")
		var zero T
		return zero
	}
}

// appendBurst appends n events of type thing.made in streams of 100.
func appendBurst(t *testing.T, store *eventstore.Store, n int) {
	t.Helper()
	for done := 0; done < n; done += 100 {
		evs := make([]eventstore.NewEvent, min(100, n-done))
		for i := range evs {
			evs[i] = eventstore.NewEvent{Type: "thing.made", Payload: json.RawMessage(fmt.Sprintf(`{"n":%d}`, done+i)),
				Metadata: eventstore.Metadata{UserID: "ann", CorrelationID: "burst"}}
		}
		_, err := store.Append(context.Background(), eventstore.Stream{TenantID: tenantA, AggregateType: "thing"}, 0, evs...)
		require.NoError(t, err)
	}
}

func eventJob() jobs.Job { return jobs.Job{Name: "on-made", On: []string{"thing.made"}, Work: noop} }

// requireOneJobPerEvent checks that every thing.made event enqueued exactly
// one job, caused by it.
func requireOneJobPerEvent(t *testing.T, db *kumikotest.DB, n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		return db.Count(t, "SELECT count(*) FROM river_job") >= n && db.Count(t, `SELECT count(*) FROM kumiko_event_consumers
			WHERE name = 'jobs' AND last_processed_event_id = (SELECT max(id) FROM kumiko_events)`) > 0
	}, 60*time.Second, 20*time.Millisecond, "the trigger's cursor reaches the head")
	require.Equal(t, n, db.Count(t, "SELECT count(*) FROM river_job"), "one job per event, no more")
	require.Equal(t, n, db.Count(t, `SELECT count(DISTINCT (args->>'event')::bigint) FROM river_job j JOIN kumiko_events e ON e.id = (j.args->>'event')::bigint
		WHERE e.type = 'thing.made' AND j.args->'args' = e.payload AND j.args->'cause'->>'userId' = 'ann' AND j.args->'cause'->>'correlationId' = 'burst'`),
		"each job carries its event's payload and cause")
}

// Four dispatchers and a burst of 10,000 matching events give exactly
// 10,000 jobs.
func TestEventBurstEnqueuesOncePerEvent(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t, kumikotest.MaxConns(12))
	const n = 10_000
	for i := range 4 {
		r := newRunner(t, db, jobs.Config{}, false, eventJob())
		c, ok := r.Consumer()
		require.True(t, ok)
		d, err := consumer.New(db.Store, consumer.Config{InstanceID: fmt.Sprintf("d%d", i), PollInterval: 20 * time.Millisecond}, c)
		require.NoError(t, err)
		require.NoError(t, d.Start(t.Context()))
		t.Cleanup(func() { require.NoError(t, d.Stop(context.Background())) })
	}
	appendBurst(t, db.Store, n)
	requireOneJobPerEvent(t, db, n)
}

// A rolled-back write's events never reach the trigger: only committed
// events enqueue.
func TestRolledBackEventsEnqueueNothing(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	r := newRunner(t, db, jobs.Config{}, false, eventJob())
	c, _ := r.Consumer()
	d, err := consumer.New(db.Store, consumer.Config{InstanceID: "d", PollInterval: 20 * time.Millisecond}, c)
	require.NoError(t, err)
	require.NoError(t, d.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, d.Stop(context.Background())) })
	rollback := errors.New("rollback")
	err = pgx.BeginFunc(t.Context(), db.Pool, func(tx pgx.Tx) error {
		_, err := db.Store.AppendTx(t.Context(), tx, eventstore.Stream{TenantID: tenantA, AggregateType: "thing"}, 0,
			eventstore.NewEvent{Type: "thing.made", Payload: json.RawMessage(`{"n":-1}`)})
		require.NoError(t, err)
		return rollback
	})
	require.ErrorIs(t, err, rollback)
	appendBurst(t, db.Store, 3)
	requireOneJobPerEvent(t, db, 3)
}

// A pass that fails after the trigger inserted its jobs (as a crash before
// the commit would) leaves no job behind: the inserts are part of the pass
// transaction, and the retried pass enqueues each event's job once.
func TestFailedPassEnqueuesNothing(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	r := newRunner(t, db, jobs.Config{}, false, eventJob())
	c, _ := r.Consumer()
	insert := c.HandleBatch
	var failed atomic.Bool
	c.HandleBatch = func(ctx context.Context, tx pgx.Tx, evs []eventstore.Event) error {
		if err := insert(ctx, tx, evs); err != nil {
			return err
		}
		if failed.CompareAndSwap(false, true) {
			return errors.New("crash after the insert")
		}
		return nil
	}
	appendBurst(t, db.Store, 50)
	d, err := consumer.New(db.Store, consumer.Config{InstanceID: "d", PollInterval: 20 * time.Millisecond}, c)
	require.NoError(t, err)
	require.NoError(t, d.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, d.Stop(context.Background())) })
	requireOneJobPerEvent(t, db, 50)
	require.True(t, failed.Load())
}

// The case of a job run by hand while the scheduled run still works: with
// Exclusive, the second run finds the job's lock taken and completes without
// working, so the digest goes out once.
func TestExclusiveJobSkipsARunWhileAnotherWorks(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	started, release := make(chan int64, 2), make(chan struct{})
	var works atomic.Int32
	r := newRunner(t, db, jobs.Config{}, true, jobs.Job{Name: "digest", Exclusive: true, Work: func(_ context.Context, run jobs.Run) error {
		works.Add(1)
		started <- run.ID
		<-release
		return nil
	}})
	first, err := r.Enqueue(t.Context(), "digest", map[string]any{"by": "schedule"}, jobs.Options{})
	require.NoError(t, err)
	require.Equal(t, first.ID, receive(t, started), "the scheduled run works")
	manual, err := r.Enqueue(t.Context(), "digest", map[string]any{"by": "hand"}, jobs.Options{})
	require.NoError(t, err)
	waitState(t, r, manual.ID, "completed")
	require.Equal(t, int32(1), works.Load(), "the run by hand did not work while the scheduled one did")
	close(release)
	waitState(t, r, first.ID, "completed")

	again, err := r.Enqueue(t.Context(), "digest", map[string]any{"by": "hand"}, jobs.Options{})
	require.NoError(t, err)
	require.Equal(t, again.ID, receive(t, started), "once the lock is free, a run by hand works")
	waitState(t, r, again.ID, "completed")
}

// Apps in schemas of their own on one database do not share job locks:
// while one app's exclusive job works, another app's job of the same name
// works too.
func TestExclusiveJobsOfAnotherSchemaDoNotWait(t *testing.T) {
	t.Parallel()
	started, release := make(chan int64, 2), make(chan struct{})
	defer close(release)
	work := func(_ context.Context, run jobs.Run) error {
		started <- run.ID
		<-release
		return nil
	}
	a := newRunner(t, kumikotest.NewDB(t), jobs.Config{}, true, jobs.Job{Name: "digest", Exclusive: true, Work: work})
	b := newRunner(t, kumikotest.NewDB(t), jobs.Config{}, true, jobs.Job{Name: "digest", Exclusive: true, Work: work})
	first, err := a.Enqueue(t.Context(), "digest", nil, jobs.Options{})
	require.NoError(t, err)
	require.Equal(t, first.ID, receive(t, started))
	other, err := b.Enqueue(t.Context(), "digest", nil, jobs.Options{})
	require.NoError(t, err)
	require.Equal(t, other.ID, receive(t, started), "the other app's run works while the first holds its lock")
}

// The runner counts attempts by job and outcome.
func TestMetrics(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	reg := prometheus.NewRegistry()
	r := newRunner(t, db, jobs.Config{Metrics: reg}, true, jobs.Job{Name: "count-me", Work: noop})
	e, err := r.Enqueue(t.Context(), "count-me", nil, jobs.Options{})
	require.NoError(t, err)
	waitState(t, r, e.ID, "completed")
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`# HELP kumiko_job_attempts_total Job attempts by job and outcome (ok, error).
# TYPE kumiko_job_attempts_total counter
kumiko_job_attempts_total{job="count-me",outcome="ok"} 1
`), "kumiko_job_attempts_total"))
}

var tenantB = uuid.MustParse("0190b000-0000-7000-8000-00000000000b")

// dayArgs encode with keys in another order than jsonb gives them back.
type dayArgs struct {
	Day string `json:"day"`
	N   int    `json:"n"`
}

// A unique job is one per name, tenant and args: the rest of the cause does
// not tell two apart, another tenant does, and args are compared as JSON
// values, whatever their key order and spacing.
func TestUniqueJobIsByArgsAndTenant(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	r := newRunner(t, db, jobs.Config{}, false, jobs.Job{Name: "digest", Work: noop, UniqueFor: time.Hour})
	enqueue := func(args any, cause jobs.Cause) jobs.Enqueued {
		t.Helper()
		e, err := r.Enqueue(t.Context(), "digest", args, jobs.Options{Cause: cause})
		require.NoError(t, err)
		return e
	}
	first := enqueue(dayArgs{Day: "2026-11-30", N: 1}, jobs.Cause{TenantID: tenantA, UserID: "ann", CorrelationID: "c1", CausationID: "req-1"})
	require.False(t, first.Duplicate)
	for what, again := range map[string]jobs.Enqueued{
		"another cause":           enqueue(dayArgs{Day: "2026-11-30", N: 1}, jobs.Cause{TenantID: tenantA, UserID: "bob", CorrelationID: "c2", CausationID: "req-2"}),
		"keys in another order":   enqueue(json.RawMessage(`{ "n": 1,  "day": "2026-11-30" }`), jobs.Cause{TenantID: tenantA}),
		"the same value as a map": enqueue(map[string]any{"n": 1, "day": "2026-11-30"}, jobs.Cause{TenantID: tenantA}),
	} {
		require.True(t, again.Duplicate, what)
		require.Equal(t, first.ID, again.ID, what)
	}
	other := enqueue(dayArgs{Day: "2026-11-30", N: 1}, jobs.Cause{TenantID: tenantB, UserID: "ann", CorrelationID: "c1", CausationID: "req-1"})
	require.False(t, other.Duplicate, "another tenant's job is another job")
	nested := enqueue(json.RawMessage(`{"a":{"y":2,"x":[1,{"q":1,"p":2}]}}`), jobs.Cause{TenantID: tenantA})
	require.False(t, nested.Duplicate)
	again := enqueue(json.RawMessage(`{"a":{"x":[1,{"p":2,"q":1}],"y":2}}`), jobs.Cause{TenantID: tenantA})
	require.True(t, again.Duplicate, "nested keys in another order")
	require.Equal(t, 3, db.Count(t, "SELECT count(*) FROM river_job"))
}

// Events with one payload enqueue one unique job per tenant, also within
// one pass (River's unique insert refuses one key twice in a statement),
// and a job enqueued by a write with the same args, encoded from a struct
// in another key order than the event's payload comes back from jsonb, is
// that job.
func TestUniqueEventJobIsByArgsAndTenant(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	job := jobs.Job{Name: "made-once", On: []string{"thing.made"}, Work: noop, UniqueFor: time.Hour}
	r := newRunner(t, db, jobs.Config{}, false, job)
	c, _ := r.Consumer()
	d, err := consumer.New(db.Store, consumer.Config{InstanceID: "d"}, c)
	require.NoError(t, err)
	require.NoError(t, d.Register(t.Context()))
	made := func(payload string) eventstore.NewEvent {
		return eventstore.NewEvent{Type: "thing.made", Payload: json.RawMessage(payload), Metadata: eventstore.Metadata{UserID: "ann"}}
	}
	for _, tenant := range []uuid.UUID{tenantA, tenantB} {
		_, err = db.Store.Append(t.Context(), eventstore.Stream{TenantID: tenant, AggregateType: "thing"}, 0,
			made(`{"day":"2026-11-30","n":1}`), made(`{"n":1,"day":"2026-11-30"}`), made(`{"day":"2026-12-01","n":1}`))
		require.NoError(t, err)
	}
	res, err := d.RunPass(t.Context(), jobs.ConsumerName)
	require.NoError(t, err)
	require.Equal(t, 6, res.Handled)
	require.Equal(t, 4, db.Count(t, "SELECT count(*) FROM river_job"), "one job per tenant and args")

	e, err := r.Enqueue(t.Context(), "made-once", dayArgs{Day: "2026-11-30", N: 1}, jobs.Options{Cause: jobs.Cause{TenantID: tenantA, UserID: "bob"}})
	require.NoError(t, err)
	require.True(t, e.Duplicate, "the write's job is the event's")
}

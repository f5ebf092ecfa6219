package consumer_test

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"net/url"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/consumer"
	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/kumikotest"
)

// withAppName returns the test database URL with an application_name, so a
// test can find (and terminate) exactly its own connections.
func withAppName(t *testing.T, db *kumikotest.DB, name string) string {
	t.Helper()
	u, err := url.Parse(db.URL)
	require.NoError(t, err)
	q := u.Query()
	q.Set("application_name", name)
	u.RawQuery = q.Encode()
	return u.String()
}

// The database kills every connection of a running dispatcher: it recovers
// by itself and catches up, losing and repeating nothing.
func TestDispatcherRecoversFromTerminatedBackends(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	ctx := context.Background()
	app := "disp-" + db.Schema
	pool, err := pgxpool.New(ctx, withAppName(t, db, app))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	store, err := eventstore.New(pool, eventstore.Config{Schema: db.Schema})
	require.NoError(t, err)
	c := recorder(t, db, "survivor", feature.Shared)
	e, err := consumer.New(store, consumer.Config{InstanceID: "p1", PollInterval: 20 * time.Millisecond}, c)
	require.NoError(t, err)
	require.NoError(t, e.Start(ctx))
	t.Cleanup(func() { require.NoError(t, e.Stop(context.Background())) })

	for round := 1; round <= 3; round++ {
		for range 20 {
			appendOne(t, db.Store)
		}
		require.Eventually(t, func() bool { return len(seen(t, db, "survivor")) == 20*round }, 20*time.Second, 10*time.Millisecond)
		killed := db.Count(t, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1", app)
		require.Positive(t, killed, "round %d: the dispatcher's connections were terminated", round)
	}
	for range 20 {
		appendOne(t, db.Store)
	}
	require.Eventually(t, func() bool { return len(seen(t, db, "survivor")) == 80 }, 20*time.Second, 10*time.Millisecond)
	require.Equal(t, 80, db.Count(t, "SELECT count(DISTINCT event_id) FROM seen_survivor"))
}

const childDispatcherEnv = "KUMIKO_TEST_CHILD_DISPATCHER"

// runChildDispatcher runs a dispatcher with a table-backed consumer until the
// process is killed. It is the subprocess of TestDispatcherSurvivesSIGKILL.
func runChildDispatcher(dbURL string) {
	ctx := context.Background()
	u, _ := url.Parse(dbURL)
	schema := u.Query().Get("search_path")
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		panic(err)
	}
	store, err := eventstore.New(pool, eventstore.Config{Schema: schema})
	if err != nil {
		panic(err)
	}
	c := consumer.Consumer{
		Name:      "killed",
		BatchSize: 50,
		Handle: func(ctx context.Context, tx pgx.Tx, ev eventstore.Event) error {
			// Two writes per event: both commit with the cursor or neither.
			if _, err := tx.Exec(ctx, "INSERT INTO applied (event_id) VALUES ($1)", ev.ID); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "UPDATE totals SET n = n + 1")
			return err
		},
	}
	e, err := consumer.New(store, consumer.Config{InstanceID: "child", PollInterval: 10 * time.Millisecond}, c)
	if err != nil {
		panic(err)
	}
	if err := e.Start(ctx); err != nil {
		panic(err)
	}
	select {} // until SIGKILL
}

// A dispatcher process killed with SIGKILL mid-batch, again and again, while
// writers keep appending: afterwards every event was applied exactly once
// and the projection's two writes per event agree — apply is atomic with the
// cursor.
func TestDispatcherSurvivesSIGKILL(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	ctx := context.Background()
	db.Exec(t, "CREATE TABLE applied (event_id bigint PRIMARY KEY)")
	db.Exec(t, "CREATE TABLE totals (n bigint NOT NULL)")
	db.Exec(t, "INSERT INTO totals VALUES (0)")

	stop := make(chan struct{})
	var writers sync.WaitGroup
	writers.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			evs := make([]eventstore.NewEvent, 5)
			for i := range evs {
				evs[i] = eventstore.NewEvent{Type: "thing.made", Payload: json.RawMessage(`{}`)}
			}
			_, err := db.Store.Append(ctx, eventstore.Stream{TenantID: tenantA, AggregateType: "thing"}, 0, evs...)
			require.NoError(t, err)
		}
	})

	rng := rand.New(rand.NewPCG(1, uint64(time.Now().UnixNano())))
	for kill := range 6 {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childDispatcherEnv+"="+db.URL)
		require.NoError(t, cmd.Start())
		// Let it work, then kill it at a random moment.
		before := db.Count(t, "SELECT count(*) FROM applied")
		require.Eventually(t, func() bool { return db.Count(t, "SELECT count(*) FROM applied") > before }, 20*time.Second, 5*time.Millisecond,
			"kill %d: the child applies events", kill)
		time.Sleep(time.Duration(rng.IntN(40)) * time.Millisecond) // a random point mid-stream, not a wait for a condition
		require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
		_ = cmd.Wait()
	}
	close(stop)
	writers.Wait()

	// One last, uninterrupted run catches up.
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childDispatcherEnv+"="+db.URL)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	total := db.Count(t, "SELECT count(*) FROM kumiko_events")
	require.Eventually(t, func() bool { return db.Count(t, "SELECT count(*) FROM applied") == total }, 30*time.Second, 10*time.Millisecond)
	require.Equal(t, total, db.Count(t, "SELECT n FROM totals"), "every apply committed both its writes, never one")
	require.Equal(t, total, db.Count(t, "SELECT count(*) FROM applied a JOIN kumiko_events e ON e.id = a.event_id"))
	require.Equal(t, db.Count(t, "SELECT max(id) FROM kumiko_events"),
		db.Count(t, "SELECT last_processed_event_id FROM kumiko_event_consumers WHERE name = 'killed'"), "the cursor is at the head")
}

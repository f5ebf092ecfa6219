package consumer_test

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/consumer"
	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/internal/roundtrips"
	"github.com/kumiko-go/kumiko/kumikotest"
)

// insertCounter counts the statements naming a table that go to the server
// on their own and those that go in a batch.
type insertCounter struct {
	table          string
	alone, batched atomic.Int64
}

func (c *insertCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.Contains(d.SQL, c.table) {
		c.alone.Add(1)
	}
	return ctx
}
func (c *insertCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (c *insertCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}
func (c *insertCounter) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	if strings.Contains(d.SQL, c.table) {
		c.batched.Add(1)
	}
}
func (c *insertCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// tracedStore is db's store on a pool of its own that reports to tracer.
func tracedStore(t *testing.T, db *kumikotest.DB, tracer pgx.QueryTracer) *eventstore.Store {
	t.Helper()
	pc, err := pgxpool.ParseConfig(db.URL)
	require.NoError(t, err)
	pc.ConnConfig.Tracer = tracer
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	s, err := eventstore.New(pool, eventstore.Config{Schema: db.Schema})
	require.NoError(t, err)
	return s
}

// A pipelined consumer's INSERT per event reaches the server as one batch
// per pass, not a statement per event, and an apply reads its own queued
// writes; without Pipelined every INSERT goes alone.
func TestPipelinedHandlerSendsAPassAsOneBatch(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	ctx := context.Background()
	db.Exec(t, `CREATE TABLE piped (event_id bigint PRIMARY KEY)`)
	for range 20 {
		appendOne(t, db.Store)
	}
	for _, pipelined := range []bool{true, false} {
		db.Exec(t, `TRUNCATE piped`)
		counter := &insertCounter{table: "INTO piped"}
		var applied int
		c := consumer.Consumer{
			Name: "piped-" + map[bool]string{true: "on", false: "off"}[pipelined], Delivery: feature.Shared, Pipelined: pipelined,
			Handle: func(ctx context.Context, tx pgx.Tx, ev eventstore.Event) error {
				if _, err := tx.Exec(ctx, `INSERT INTO piped (event_id) VALUES ($1)`, ev.ID); err != nil {
					return err
				}
				applied++
				if applied%7 == 0 { // reads see the writes queued before them
					var n int
					if err := tx.QueryRow(ctx, `SELECT count(*) FROM piped`).Scan(&n); err != nil {
						return err
					}
					require.Equal(t, applied, n)
				}
				return nil
			},
		}
		e, err := consumer.New(tracedStore(t, db, counter), consumer.Config{InstanceID: "p1"}, c)
		require.NoError(t, err)
		require.NoError(t, e.Register(ctx))
		res, err := e.RunPass(ctx, c.Name)
		require.NoError(t, err)
		require.NoError(t, res.Failed)
		require.Equal(t, 20, db.Count(t, `SELECT count(*) FROM piped`))
		if pipelined {
			require.Equal(t, int64(0), counter.alone.Load(), "no INSERT went alone")
			require.Equal(t, int64(20), counter.batched.Load())
		} else {
			require.Equal(t, int64(20), counter.alone.Load())
			require.Equal(t, int64(0), counter.batched.Load())
		}
	}
}

// A queued statement that fails fails the pass's first run; the pass runs
// again event by event, applies what precedes the failing event and names
// it, as an unpipelined consumer does.
func TestPipelinedFailureNamesItsEvent(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	ctx := context.Background()
	db.Exec(t, `CREATE TABLE piped (event_id bigint PRIMARY KEY)`)
	var evs []eventstore.Event
	for range 5 {
		evs = append(evs, appendOne(t, db.Store))
	}
	db.Exec(t, `INSERT INTO piped (event_id) VALUES ($1)`, evs[3].ID) // event 4's insert will collide
	c := consumer.Consumer{
		Name: "piped", Delivery: feature.Shared, Pipelined: true,
		Handle: func(ctx context.Context, tx pgx.Tx, ev eventstore.Event) error {
			_, err := tx.Exec(ctx, `INSERT INTO piped (event_id) VALUES ($1)`, ev.ID)
			return err
		},
	}
	e := newEventDispatcher(t, db, "p1", c)
	res, err := e.RunPass(ctx, "piped")
	require.NoError(t, err)
	require.ErrorContains(t, res.Failed, "event "+strconv.FormatInt(evs[3].ID, 10))
	require.ErrorContains(t, res.Failed, "duplicate key")
	require.Equal(t, evs[2].ID, res.Cursor)
	require.Equal(t, 4, db.Count(t, `SELECT count(*) FROM piped`), "events 1–3 and the colliding row")
}

// A pass whose batch directly follows its cursor, id after id, reads no
// horizon: one statement less between a wake-up and the handler. A batch
// with a hole (an open writer's id) reads it, waits at the hole, and
// delivers the late event once its writer commits.
func TestConsecutiveBatchReadsNoHorizon(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	ctx := context.Background()
	horizon := &insertCounter{table: "pg_locks"}
	c := recorder(t, db, "direct", feature.Shared)
	e, err := consumer.New(tracedStore(t, db, horizon), consumer.Config{InstanceID: "h1"}, c)
	require.NoError(t, err)
	require.NoError(t, e.Register(ctx))
	registered := horizon.alone.Load() + horizon.batched.Load() // Register reads one
	reads := func() int64 { return horizon.alone.Load() + horizon.batched.Load() - registered }

	evs := appendN(t, db.Store, 5)
	res := runPass(t, e, "direct")
	require.Equal(t, 5, res.Handled)
	require.Equal(t, evs[4].ID, res.Cursor)
	require.Zero(t, reads(), "consecutive events need no horizon")

	writer, _ := holdWriter(t, db)
	after := appendOne(t, db.Store)
	res = runPass(t, e, "direct")
	require.Zero(t, res.Handled, "the open writer's id comes first")
	require.Equal(t, evs[4].ID, res.Cursor)
	require.Positive(t, reads(), "a hole is judged by the horizon")

	require.NoError(t, writer.Commit(ctx))
	res = runPass(t, e, "direct")
	require.Equal(t, 2, res.Handled)
	ids := seen(t, db, "direct")
	require.Equal(t, []int64{after.ID - 1, after.ID}, ids[5:], "the late event first, nothing skipped")
}

// A delivering pass costs three round trips: BEGIN travels with the shard's
// lock, the batch is read, and the state's save travels with COMMIT. With
// AsyncCommit the pass's commit does not wait for its WAL flush.
func TestPassRoundTrips(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	ctx := context.Background()
	for _, async := range []bool{false, true} {
		trips := &roundtrips.Recorder{}
		c := consumer.Consumer{
			Name: "trips-" + strconv.FormatBool(async), Delivery: feature.Shared, AsyncCommit: async,
			Handle: func(context.Context, pgx.Tx, eventstore.Event) error { return nil },
		}
		e, err := consumer.New(tracedStore(t, db, trips), consumer.Config{InstanceID: "r1"}, c)
		require.NoError(t, err)
		require.NoError(t, e.Register(ctx))
		appendN(t, db.Store, 3)
		runPass(t, e, c.Name) // statements are prepared on a connection's first pass
		appendN(t, db.Store, 3)
		trips.Take()
		res := runPass(t, e, c.Name)
		require.Equal(t, 3, res.Handled)
		got := trips.Take()
		require.Len(t, got, 3, "round trips: %v", got)
		require.Equal(t, "BEGIN", got[0][0])
		require.Len(t, got[0], 2, "BEGIN and the lock")
		save := []string{"UPDATE", "COMMIT"}
		if async {
			save = []string{"SET", "UPDATE", "COMMIT"}
		}
		require.Equal(t, save, got[2])
	}
}

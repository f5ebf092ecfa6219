package pipeline_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/consumer"
	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/kumikotest"
	"github.com/kumiko-go/kumiko/pipeline"
	"github.com/kumiko-go/kumiko/samples/tasks"
)

// monthRows reads tasks_by_month, or what a fresh fold of the stored task
// events gives when fromEvents is set, as sorted "tenant month created
// completed" lines.
func monthRows(t *testing.T, app *kumikotest.App, fromEvents bool) []string {
	t.Helper()
	sql := `SELECT tenant_id::text, month, created, completed FROM tasks_by_month ORDER BY 1, 2`
	if fromEvents {
		sql = `SELECT tenant_id::text, to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM'),
			count(*) FILTER (WHERE type = 'task.created'), count(*) FILTER (WHERE type = 'task.completed')
			FROM kumiko_events WHERE aggregate_type = 'task' AND type IN ('task.created', 'task.completed')
			GROUP BY 1, 2 ORDER BY 1, 2`
	}
	rows, err := app.Pool.Query(ctx, sql)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (string, error) {
		var tenant, month string
		var created, completed int64
		err := r.Scan(&tenant, &month, &created, &completed)
		return fmt.Sprintf("%s %s %d %d", tenant, month, created, completed), err
	})
	require.NoError(t, err)
	return out
}

func status(t *testing.T, app *kumikotest.App, name string) pipeline.ProjectionStatus {
	t.Helper()
	sts, err := app.Executor.ProjectionStatuses(ctx)
	require.NoError(t, err)
	for _, s := range sts {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("no status of %s in %+v", name, sts)
	return pipeline.ProjectionStatus{}
}

// Four writers keep creating tasks and a reader keeps reading the stats
// while tasks_by_month is rebuilt: no read fails, no write fails, and the
// rebuilt table — which the writers keep writing after the swap — equals
// the fold of every stored event: nothing lost, nothing applied twice.
func TestRebuildProjectionUnderLoad(t *testing.T) {
	t.Parallel()
	app := newTasks(t)
	for i := range 40 {
		c := alice
		if i%3 == 0 {
			c = bob
		}
		task := write(t, app, c, "task.create", fmt.Sprintf(`{"title":"seed %d"}`, i))
		if i%4 == 0 {
			_, err := app.Executor.Command(ctx, c, req("task.complete", fmt.Sprintf(`{"id":%q,"version":1}`, task["id"])))
			require.NoError(t, err)
		}
	}
	// A damaged read model: the rebuild must not carry it over.
	app.Exec(t, "UPDATE tasks_by_month SET created = created + 1000")
	require.NotEqual(t, monthRows(t, app, true), monthRows(t, app, false))

	var (
		stop             atomic.Bool
		wg               sync.WaitGroup
		mu               sync.Mutex
		failures         []error
		writes, readsRun atomic.Int64
	)
	fail := func(err error) {
		mu.Lock()
		failures = append(failures, err)
		mu.Unlock()
	}
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := alice
			if w%2 == 1 {
				c = bob
			}
			for i := 0; !stop.Load(); i++ {
				if _, err := app.Executor.Write(ctx, c, req("task.create", fmt.Sprintf(`{"title":"w%d-%d"}`, w, i))); err != nil {
					fail(fmt.Errorf("write: %w", err))
					return
				}
				writes.Add(1)
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stop.Load() {
			if _, err := app.Executor.Query(ctx, alice, req("task.stats", `{}`)); err != nil {
				fail(fmt.Errorf("read: %w", err))
				return
			}
			readsRun.Add(1)
		}
	}()

	var seen []string
	res, err := app.Executor.RebuildProjection(ctx, "tasks_by_month", pipeline.RebuildOptions{
		BatchSize: 25,
		Progress: func(done, total int64) {
			if len(seen) < 3 {
				seen = append(seen, status(t, app, "tasks_by_month").Status)
			}
			// Let the writers interleave: wait for one more write.
			before := writes.Load()
			require.Eventually(t, func() bool { return writes.Load() > before }, 10*time.Second, time.Millisecond)
		},
	})
	require.NoError(t, err)
	// More writes after the swap: they go to the rebuilt table.
	after := writes.Load()
	require.Eventually(t, func() bool { return writes.Load() >= after+10 }, 10*time.Second, time.Millisecond)
	stop.Store(true)
	wg.Wait()
	require.Empty(t, failures)
	require.Positive(t, writes.Load())
	require.Positive(t, readsRun.Load())
	require.Contains(t, seen, pipeline.ProjectionRebuilding, "the status during the replay")
	require.Positive(t, res.Applied)
	require.Zero(t, res.Quarantined)

	require.Equal(t, monthRows(t, app, true), monthRows(t, app, false))
	st := status(t, app, "tasks_by_month")
	require.Equal(t, pipeline.ProjectionReady, st.Status)
	require.Equal(t, pipeline.ProjectionInline, st.Kind)
	require.NotNil(t, st.LastRebuildAt)
	require.Zero(t, st.Lag)
	require.Equal(t, st.Head, st.Cursor)
	require.Zero(t, app.Count(t, "SELECT count(*) FROM pg_class WHERE relnamespace = current_schema()::regnamespace AND relname LIKE 'tasks_by_month\\_\\_%'"), "no shadow or old table is left")
	require.Equal(t, 1, app.Count(t, "SELECT count(*) FROM pg_indexes WHERE schemaname = current_schema() AND tablename = 'tasks_by_month' AND indexname = 'tasks_by_month_pkey'"),
		"the rebuilt table's indexes carry the live names")

	// A second rebuild, with the writers stopped, gives the same rows, and
	// EnsureSchema still finds the table as it expects it.
	_, err = app.Executor.RebuildProjection(ctx, "tasks_by_month", pipeline.RebuildOptions{})
	require.NoError(t, err)
	require.Equal(t, monthRows(t, app, true), monthRows(t, app, false))
	require.NoError(t, app.Executor.EnsureSchema(ctx))
	require.Equal(t, 1, app.Count(t, "SELECT count(*) FROM pg_indexes WHERE schemaname = current_schema() AND tablename = 'tasks_by_month'"))
}

// A rebuild reads each chunk on a second connection of the pool while the
// chunk before applies. On a pool of one connection, which the rebuild
// holds, it reads on that one instead, and completes.
func TestRebuildOnAPoolOfOneConnection(t *testing.T) {
	t.Parallel()
	app := kumikotest.NewApp(t, []*feature.Feature{tasks.Feature}, kumikotest.MaxConns(1))
	for i := range 7 {
		write(t, app, alice, "task.create", fmt.Sprintf(`{"title":"t%d"}`, i))
	}
	app.Exec(t, "UPDATE tasks_by_month SET created = created + 1000")

	bounded, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	res, err := app.Executor.RebuildProjection(bounded, "tasks_by_month", pipeline.RebuildOptions{BatchSize: 2})
	require.NoError(t, err)
	require.EqualValues(t, 7, res.Applied)
	require.Equal(t, monthRows(t, app, true), monthRows(t, app, false))
}

// A rebuild that fails on a pool of one connection, which the rebuild
// itself holds, still drops its shadow table and records the failure, on
// that connection: it answers instead of waiting for the pool, also when
// the caller's context has ended.
func TestRebuildFailureOnAPoolOfOneConnection(t *testing.T) {
	t.Parallel()
	app := kumikotest.NewApp(t, []*feature.Feature{notes}, kumikotest.MaxConns(1))
	write(t, app, alice, "note.create", `{"title":"a"}`)
	app.Exec(t, `INSERT INTO kumiko_events (aggregate_id, aggregate_type, tenant_id, version, type, event_version, payload)
		VALUES (gen_random_uuid(), 'note', $1, 1, 'note.created', 2, '{"title":"boom-before"}')`, tenantA)

	done := make(chan error, 1)
	go func() {
		_, err := app.Executor.RebuildProjection(ctx, "note_titles", pipeline.RebuildOptions{})
		done <- err
	}()
	select {
	case err := <-done:
		require.ErrorIs(t, err, errApply)
	case <-time.After(20 * time.Second):
		t.Fatal("the failed rebuild waits for a connection of the pool it holds")
	}
	require.Zero(t, app.Count(t, "SELECT count(*) FROM pg_class WHERE relnamespace = current_schema()::regnamespace AND relname = 'note_titles__rebuild'"))
	st := status(t, app, "note_titles")
	require.Equal(t, pipeline.ProjectionFailed, st.Status)
	require.Contains(t, st.LastError, errApply.Error())
}

// A failing apply fails the rebuild: the live table is untouched, the
// shadow is gone and the status says why. Quarantine mode records the event
// and completes.
func TestRebuildProjectionFailureAndQuarantine(t *testing.T) {
	t.Parallel()
	app := kumikotest.NewApp(t, []*feature.Feature{notes})
	write(t, app, alice, "note.create", `{"title":"a"}`)
	write(t, app, bob, "note.create", `{"title":"b"}`)
	// An event the projection refuses (the write path would have refused
	// it too, so it is stored directly).
	app.Exec(t, `INSERT INTO kumiko_events (aggregate_id, aggregate_type, tenant_id, version, type, event_version, payload)
		VALUES (gen_random_uuid(), 'note', $1, 1, 'note.created', 2, '{"title":"boom-before"}')`, tenantA)
	app.Exec(t, "UPDATE note_titles SET title = title || '!'") // to tell the live table from a rebuilt one
	var bad int64
	require.NoError(t, app.Pool.QueryRow(ctx, "SELECT max(id) FROM kumiko_events").Scan(&bad))

	_, err := app.Executor.RebuildProjection(ctx, "note_titles", pipeline.RebuildOptions{})
	require.ErrorIs(t, err, errApply)
	require.Equal(t, 2, app.Count(t, "SELECT count(*) FROM note_titles WHERE title LIKE '%!'"), "the live table is untouched")
	require.Zero(t, app.Count(t, "SELECT count(*) FROM pg_class WHERE relnamespace = current_schema()::regnamespace AND relname = 'note_titles__rebuild'"))
	st := status(t, app, "note_titles")
	require.Equal(t, pipeline.ProjectionFailed, st.Status)
	require.Contains(t, st.LastError, errApply.Error())
	require.Contains(t, st.LastError, fmt.Sprintf("event %d", bad), "the failure names its event")
	require.Nil(t, st.LastRebuildAt)

	res, err := app.Executor.RebuildProjection(ctx, "note_titles", pipeline.RebuildOptions{Quarantine: true})
	require.NoError(t, err)
	require.EqualValues(t, 2, res.Applied)
	require.EqualValues(t, 1, res.Quarantined)
	require.Equal(t, 1, app.Count(t, "SELECT count(*) FROM kumiko_projection_quarantine WHERE projection = 'note_titles' AND event_id = $1 AND error LIKE '%refused%'", bad))
	require.Equal(t, 2, app.Count(t, "SELECT count(*) FROM note_titles WHERE title IN ('a', 'b')"))
	st = status(t, app, "note_titles")
	require.Equal(t, pipeline.ProjectionReady, st.Status)
	require.Empty(t, st.LastError)

	_, err = app.Executor.RebuildProjection(ctx, "no-such", pipeline.RebuildOptions{})
	require.ErrorIs(t, err, pipeline.ErrNoProjection)
}

// A table-backed multi-stream projection is rebuilt and its consumer
// continues after the rebuild's last event: nothing is applied twice.
func TestRebuildProjectionMSP(t *testing.T) {
	t.Parallel()
	app := kumikotest.NewApp(t, []*feature.Feature{crm, notes})
	e, err := consumer.New(app.Store, consumer.Config{InstanceID: "p1"}, app.Executor.Consumers()...)
	require.NoError(t, err)
	require.NoError(t, e.Register(ctx))
	write(t, app, alice, "contact.create", `{"name":"Ann"}`)
	write(t, app, alice, "contact.create", `{"name":"Al"}`)
	write(t, app, bob, "contact.create", `{"name":"Bo"}`)
	kumikotest.CatchUp(t, e, "contact-counter")
	app.Exec(t, "UPDATE contact_counts SET n = 99")
	write(t, app, bob, "contact.create", `{"name":"Bea"}`) // not yet delivered

	res, err := app.Executor.RebuildProjection(ctx, "contact-counter", pipeline.RebuildOptions{})
	require.NoError(t, err)
	require.EqualValues(t, 4, res.Applied)
	require.Equal(t, 2, app.Count(t, "SELECT n FROM contact_counts WHERE tenant_id = $1", tenantA))
	require.Equal(t, 2, app.Count(t, "SELECT n FROM contact_counts WHERE tenant_id = $1", tenantB))
	require.EqualValues(t, res.LastEventID, app.Count(t, "SELECT last_processed_event_id FROM kumiko_event_consumers WHERE name = 'contact-counter'"))

	write(t, app, alice, "contact.create", `{"name":"Ada"}`)
	kumikotest.CatchUp(t, e, "contact-counter")
	require.Equal(t, 3, app.Count(t, "SELECT n FROM contact_counts WHERE tenant_id = $1", tenantA))
	require.Equal(t, 2, app.Count(t, "SELECT n FROM contact_counts WHERE tenant_id = $1", tenantB))
	st := status(t, app, "contact-counter")
	require.Equal(t, pipeline.ProjectionMSP, st.Kind)
	require.Equal(t, pipeline.ProjectionReady, st.Status)
	require.Zero(t, st.Lag)

	// A consumer without a table is no projection to rebuild.
	_, err = app.Executor.RebuildProjection(ctx, "welcomer", pipeline.RebuildOptions{})
	require.ErrorIs(t, err, pipeline.ErrNoProjection)
}

// A statement that fails only when the batched replay sends it (not in Go):
// the rebuild fails naming the event, found by replaying the chunk event by
// event.
func TestRebuildNamesAFailingStatement(t *testing.T) {
	t.Parallel()
	app := kumikotest.NewApp(t, []*feature.Feature{notes})
	n := write(t, app, alice, "note.create", `{"title":"a"}`)
	// A second "created" event of the same note: its row collides with the
	// first one's primary key in the projection.
	app.Exec(t, `INSERT INTO kumiko_events (aggregate_id, aggregate_type, tenant_id, version, type, event_version, payload)
		VALUES ($1, 'note', $2, 2, 'note.created', 2, '{"title":"again"}')`, n["id"], tenantA)
	var dup int64
	require.NoError(t, app.Pool.QueryRow(ctx, "SELECT max(id) FROM kumiko_events").Scan(&dup))

	_, err := app.Executor.RebuildProjection(ctx, "note_titles", pipeline.RebuildOptions{})
	require.ErrorContains(t, err, fmt.Sprintf("event %d", dup))
	require.ErrorContains(t, err, "23505")
	require.Equal(t, pipeline.ProjectionFailed, status(t, app, "note_titles").Status)
	require.Equal(t, 1, app.Count(t, "SELECT count(*) FROM note_titles"), "the live table is untouched")
}

// commitModes records synchronous_commit as an inline projection's apply
// sees it.
var commitModes = struct {
	sync.Mutex
	seen []string
}{}

var commitProbe = feature.Define("probe", func(r *feature.Registrar) {
	r.Entity("probe", feature.Fields{"title": feature.Text()})
	r.Crud("probe", feature.Access{Write: feature.AnyUser(), Read: feature.AnyUser()})
	r.Projection("probe_modes", feature.InlineProjection{
		Source: "probe",
		Table: feature.TableDef{Name: "probe_modes", Columns: []feature.Column{
			{Name: "tenant_id", Type: "uuid", NotNull: true}, {Name: "n", Type: "bigint"},
		}},
		Apply: map[string]feature.ProjectionApplyFunc{"probe.created": func(ctx feature.ProjectionContext, _ feature.Event) error {
			var mode string
			if err := ctx.DB().QueryRow(ctx.Context(), "SHOW synchronous_commit").Scan(&mode); err != nil {
				return err
			}
			commitModes.Lock()
			commitModes.seen = append(commitModes.seen, mode)
			commitModes.Unlock()
			return nil
		}},
	})
})

// A rebuild's chunks commit without waiting for the WAL flush (their rows
// and progress are lost together or kept together); a write commits
// synchronously.
func TestRebuildChunksCommitAsynchronously(t *testing.T) {
	commitModes.Lock()
	commitModes.seen = nil // what an earlier run (-count) recorded
	commitModes.Unlock()
	app := kumikotest.NewApp(t, []*feature.Feature{commitProbe})
	write(t, app, alice, "probe.create", `{"title":"a"}`)
	commitModes.Lock()
	require.Equal(t, []string{"on"}, commitModes.seen, "the write")
	commitModes.seen = nil
	commitModes.Unlock()

	_, err := app.Executor.RebuildProjection(ctx, "probe_modes", pipeline.RebuildOptions{})
	require.NoError(t, err)
	commitModes.Lock()
	defer commitModes.Unlock()
	require.Equal(t, []string{"off"}, commitModes.seen, "the rebuild's chunk")
}

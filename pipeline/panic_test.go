package pipeline_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/consumer"
	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/kumikotest"
	"github.com/kumiko-go/kumiko/pipeline"
)

type gizmoPoke struct {
	ID    uuid.UUID `json:"id" validate:"required"`
	Panic bool      `json:"panic"`
}

type gizmoPoked struct {
	Panic bool `json:"panic"`
}

// gadgets is a test feature whose code panics: a command after it appended,
// a query, an inline projection on the title "panic", and a multi-stream
// projection on every event after it wrote.
var gadgets = feature.Define("gadgets", func(r *feature.Registrar) {
	r.Entity("gadget", feature.Fields{"title": feature.Text().Required()})
	r.Crud("gadget", feature.Access{Write: feature.Roles("User"), Read: feature.AnyUser()})
	r.Projection("gadget_titles", feature.InlineProjection{
		Source: "gadget",
		Table: feature.TableDef{Name: "gadget_titles", Columns: []feature.Column{
			{Name: "tenant_id", Type: "uuid", NotNull: true},
			{Name: "id", Type: "uuid", NotNull: true},
			{Name: "title", Type: "text"},
		}, PrimaryKey: []string{"id"}},
		Apply: map[string]feature.ProjectionApplyFunc{
			"gadget.created": func(ctx feature.ProjectionContext, e feature.Event) error {
				p, err := feature.Decode[struct{ Title string }](e)
				if err != nil {
					return err
				}
				if _, err := ctx.DB().Exec(ctx.Context(), "INSERT INTO "+ctx.Table()+" (tenant_id, id, title) VALUES ($1, $2, $3)",
					ctx.Tenant(), e.AggregateID, p.Title); err != nil {
					return err
				}
				if p.Title == "panic" {
					panic("gadget_titles cannot take it")
				}
				return nil
			},
		},
	})
	r.DefineEvent("gizmo.poked", gizmoPoked{})
	feature.HandleCommand(r, "gizmo.poke", feature.Roles("User"), func(ctx feature.CommandContext, in gizmoPoke) (any, error) {
		ref, err := ctx.AppendEvent(feature.AppendSpec{AggregateID: in.ID, AggregateType: "gizmo", Type: "gizmo.poked", Payload: gizmoPoked{}})
		if err != nil {
			return nil, err
		}
		if in.Panic {
			panic("poke went wrong")
		}
		return ref.Version, nil
	})
	feature.HandleQuery(r, "gizmo.peek", feature.AnyUser(), func(ctx feature.CommandContext, _ struct{}) (any, error) {
		var n int
		if err := ctx.DB().QueryRow(ctx.Context(), "SELECT count(*) FROM kumiko_events").Scan(&n); err != nil {
			return nil, err
		}
		panic("peek went wrong")
	})
	r.MultiStreamProjection(feature.MultiStreamProjection{
		Name:        "gizmo-watch",
		MaxAttempts: 2,
		Table: &feature.TableDef{Name: "gizmo_watch", Columns: []feature.Column{
			{Name: "event_id", Type: "bigint", NotNull: true},
		}, PrimaryKey: []string{"event_id"}},
		Apply: map[string]feature.ApplyFunc{
			"gizmo.poked": func(ctx feature.ApplyContext, e feature.Event) error {
				if _, err := ctx.DB().Exec(ctx.Context(), "INSERT INTO "+ctx.Table()+" (event_id) VALUES ($1)", e.ID); err != nil {
					return err
				}
				panic("watch went wrong")
			},
		},
	})
})

// isolated is a dispatcher on a pool of its own over an app's schema,
// logging into logs, so a test can tell whether a connection was left
// checked out. Should one be (a transaction abandoned by a panic), the
// cleanup terminates its backend instead of waiting for it forever.
type isolated struct {
	pool  *pgxpool.Pool
	store *eventstore.Store
	d     *pipeline.Executor
	logs  *logLines
}

func isolate(t *testing.T, app *kumikotest.App) *isolated {
	t.Helper()
	name := "iso-" + app.Schema
	cfg, err := pgxpool.ParseConfig(app.URL)
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["application_name"] = name // to find its connections
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	store, err := eventstore.New(pool, eventstore.Config{Schema: app.Schema, Upcaster: app.Registry})
	require.NoError(t, err)
	iso := &isolated{pool: pool, store: store, logs: &logLines{}}
	iso.d, err = pipeline.New(app.Registry, store, pipeline.Config{Logger: slog.New(slog.NewJSONHandler(iso.logs, nil))})
	require.NoError(t, err)
	t.Cleanup(func() {
		store.Close()
		if pool.Stat().AcquiredConns() == 0 {
			pool.Close()
			return
		}
		app.Exec(t, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1", name)
	})
	return iso
}

// requireClosable checks that every connection comes back to the pool (one
// closed by a cancelled pass is destroyed in the background) and closes it.
func (iso *isolated) requireClosable(t *testing.T) {
	t.Helper()
	iso.store.Close() // wake-up notifications borrow a connection for a moment
	require.Eventually(t, func() bool { return iso.pool.Stat().AcquiredConns() == 0 }, 10*time.Second, 5*time.Millisecond,
		"a connection is still checked out")
	iso.pool.Close()
}

// logLines collects JSON log lines.
type logLines struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// panics returns the logged recoveries of a panic with value v.
func (l *logLines) panics(t *testing.T, v string) []map[string]any {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(l.buf.Bytes()))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &m))
		if m["msg"] == "recovered a panic" && m["panic"] == v {
			require.Equal(t, "ERROR", m["level"])
			require.Contains(t, m["stack"], "panic_test.go", "the stack reaches the panicking code")
			out = append(out, m)
		}
	}
	return out
}

// caught runs fn and turns a panic escaping it into a test failure and an
// error, so the test goes on to check what the panic left behind.
func caught(t *testing.T, fn func() error) (err error) {
	t.Helper()
	defer func() {
		if p := recover(); p != nil {
			t.Errorf("a panic escaped: %v", p)
			err = errors.New("escaped panic")
		}
	}()
	return fn()
}

// requirePanicError checks that err is the internal_error of a recovered
// panic and shows nothing of it.
func requirePanicError(t *testing.T, err error, value string) *pipeline.Error {
	t.Helper()
	c, pe := code(t, err)
	require.Equal(t, pipeline.CodeInternal, c)
	require.Equal(t, pipeline.ReasonHandlerPanic, pe.Reason())
	require.Equal(t, "internal error", pe.Detail())
	require.ErrorContains(t, err, "panic: "+value, "the cause keeps the value for logs")
	return pe
}

// A command that panics after appending: the caller gets internal_error, the
// transaction is rolled back at once (no event, the stream's version is free
// again, the gap its id left is passed by consumers) and its connection is
// back in the pool.
func TestPanickingCommandRollsBack(t *testing.T) {
	t.Parallel()
	app := kumikotest.NewApp(t, []*feature.Feature{gadgets})
	iso := isolate(t, app)
	rec := recorder(t, app.DB, "after_panic", feature.Shared)
	e, err := consumer.New(iso.store, consumer.Config{InstanceID: "p1"}, rec)
	require.NoError(t, err)
	require.NoError(t, e.Register(ctx))

	id := uuid.New()
	err = caught(t, func() error {
		_, err := iso.d.Command(ctx, alice, req("gizmo.poke", fmt.Sprintf(`{"id":%q,"panic":true}`, id)))
		return err
	})
	requirePanicError(t, err, "poke went wrong")
	require.Zero(t, iso.pool.Stat().AcquiredConns(), "the connection is back in the pool")
	require.Zero(t, events(t, app))
	logged := iso.logs.panics(t, "poke went wrong")
	require.Len(t, logged, 1, "logged once")
	require.Equal(t, "gizmo.poke", logged[0]["handler"])
	require.Equal(t, alice.RequestID, logged[0]["requestId"])

	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := iso.d.Command(wctx, alice, req("gizmo.poke", fmt.Sprintf(`{"id":%q}`, id)))
	require.NoError(t, err, "the stream can be written again right away")
	require.EqualValues(t, 1, out)

	require.Eventually(t, func() bool {
		_, err := e.RunPass(ctx, "after_panic")
		require.NoError(t, err)
		return app.Count(t, "SELECT count(*) FROM seen_after_panic") == 1
	}, 10*time.Second, 10*time.Millisecond, "the consumer passes the rolled-back id")
	iso.requireClosable(t)
}

// A panicking inline projection fails its CRUD write, alone or in a batch,
// like a returned error: nothing is written and the connection is returned.
func TestPanickingInlineProjectionRollsBack(t *testing.T) {
	t.Parallel()
	app := kumikotest.NewApp(t, []*feature.Feature{gadgets})
	iso := isolate(t, app)

	id := uuid.New()
	err := caught(t, func() error {
		_, err := iso.d.Write(ctx, alice, req("gadget.create", fmt.Sprintf(`{"id":%q,"title":"panic"}`, id)))
		return err
	})
	requirePanicError(t, err, "gadget_titles cannot take it")
	require.Zero(t, iso.pool.Stat().AcquiredConns())
	require.Len(t, iso.logs.panics(t, "gadget_titles cannot take it"), 1)

	err = caught(t, func() error {
		_, err := iso.d.Batch(ctx, alice, []pipeline.Request{
			req("gadget.create", `{"title":"fine"}`),
			req("gadget.create", `{"title":"panic"}`),
		})
		return err
	})
	pe := requirePanicError(t, err, "gadget_titles cannot take it")
	require.Equal(t, 1, pe.Details()["failedIndex"])
	require.Zero(t, iso.pool.Stat().AcquiredConns())
	require.Zero(t, events(t, app))
	require.Zero(t, app.Count(t, "SELECT count(*) FROM gadget_titles"))

	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = iso.d.Write(wctx, alice, req("gadget.create", fmt.Sprintf(`{"id":%q,"title":"fine"}`, id)))
	require.NoError(t, err, "the id is free again right away")
	iso.requireClosable(t)
}

// A panicking query handler answers internal_error and returns its
// connection.
func TestPanickingQuery(t *testing.T) {
	t.Parallel()
	app := kumikotest.NewApp(t, []*feature.Feature{gadgets})
	iso := isolate(t, app)
	err := caught(t, func() error {
		_, err := iso.d.Query(ctx, alice, req("gizmo.peek", `{}`))
		return err
	})
	requirePanicError(t, err, "peek went wrong")
	require.Len(t, iso.logs.panics(t, "peek went wrong"), 1)
	iso.requireClosable(t)
}

// A panicking consumer (one event or a batch at a time, or a multi-stream
// projection) fails its attempts like a returned error until it is dead,
// while the dispatcher keeps delivering to the other consumers; nothing of
// the failed applies is kept and the dispatcher stops and releases
// everything.
func TestPanickingConsumersGoDead(t *testing.T) {
	t.Parallel()
	app := kumikotest.NewApp(t, []*feature.Feature{gadgets})
	iso := isolate(t, app)
	consumerLogs := &logLines{}
	grumpy := consumer.Consumer{
		Name:        "grumpy",
		MaxAttempts: 2,
		Handle: func(context.Context, pgx.Tx, eventstore.Event) error {
			panic("grumpy went wrong")
		},
	}
	grumpyBatch := consumer.Consumer{
		Name:        "grumpy-batch",
		MaxAttempts: 2,
		HandleBatch: func(context.Context, pgx.Tx, []eventstore.Event) error {
			panic("grumpy batch went wrong")
		},
	}
	consumers := append(iso.d.Consumers(), grumpy, grumpyBatch, recorder(t, app.DB, "calm", feature.Shared))
	e, err := consumer.New(iso.store, consumer.Config{
		InstanceID: "p1", PollInterval: 20 * time.Millisecond, Logger: slog.New(slog.NewJSONHandler(consumerLogs, nil)),
	}, consumers...)
	require.NoError(t, err)
	require.NoError(t, e.Start(ctx))
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = e.Stop(ctx)
		}
	})
	for range 3 {
		_, err := iso.d.Command(ctx, alice, req("gizmo.poke", fmt.Sprintf(`{"id":%q}`, uuid.New())))
		require.NoError(t, err)
	}

	type state struct {
		Status    string `json:"status"`
		Attempts  int    `json:"attempts"`
		LastError string `json:"last_error"`
	}
	stateOf := func(name string) state {
		var s state
		raw := queryString(t, app, `SELECT json_build_object('status', status, 'attempts', attempts, 'last_error', last_error)::text
			FROM kumiko_event_consumers WHERE name = $1`, name)
		require.NoError(t, json.Unmarshal([]byte(raw), &s))
		return s
	}
	require.Eventually(t, func() bool {
		for _, name := range []string{"grumpy", "grumpy-batch", "gizmo-watch"} {
			if stateOf(name).Status != consumer.StatusDead {
				return false
			}
		}
		return app.Count(t, "SELECT count(*) FROM seen_calm") == 3
	}, 20*time.Second, 10*time.Millisecond, "the panicking consumers die, the others are delivered")
	for name, value := range map[string]string{"grumpy": "grumpy went wrong", "grumpy-batch": "grumpy batch went wrong", "gizmo-watch": "watch went wrong"} {
		s := stateOf(name)
		require.Equal(t, 2, s.Attempts, name)
		require.Contains(t, s.LastError, "panic: "+value, name)
		require.NotContains(t, s.LastError, "goroutine", "%s: the stack goes to the log, not the status", name)
		require.NotEmpty(t, consumerLogs.panics(t, value), name)
	}
	require.Zero(t, app.Count(t, "SELECT count(*) FROM gizmo_watch"), "the failed applies left nothing")

	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, e.Stop(sctx))
	stopped = true
	iso.requireClosable(t)
}

// A panicking apply fails a rebuild like a returned error: the status is
// failed with the panic as its last error, the live table is kept, and the
// connection and the rebuild lock are released — so a quarantining rebuild
// can run right after and sets the event aside.
func TestPanickingRebuildFails(t *testing.T) {
	t.Parallel()
	app := kumikotest.NewApp(t, []*feature.Feature{gadgets})
	iso := isolate(t, app)
	_, err := iso.d.Write(ctx, alice, req("gadget.create", `{"title":"fine"}`))
	require.NoError(t, err)
	// An event the inline projection cannot take, stored without it.
	_, err = app.Store.Append(ctx, eventstore.Stream{TenantID: tenantA, AggregateType: "gadget"}, 0,
		eventstore.NewEvent{Type: "gadget.created", Payload: json.RawMessage(`{"title":"panic"}`)})
	require.NoError(t, err)
	_, err = iso.d.Command(ctx, alice, req("gizmo.poke", fmt.Sprintf(`{"id":%q}`, uuid.New())))
	require.NoError(t, err)

	for name, value := range map[string]string{"gadget_titles": "gadget_titles cannot take it", "gizmo-watch": "watch went wrong"} {
		err := caught(t, func() error {
			_, err := iso.d.RebuildProjection(ctx, name, pipeline.RebuildOptions{})
			return err
		})
		require.ErrorContains(t, err, "panic: "+value, name)
		require.Zero(t, iso.pool.Stat().AcquiredConns(), name)
		sts, err := iso.d.ProjectionStatuses(ctx)
		require.NoError(t, err)
		for _, s := range sts {
			if s.Name == name {
				require.Equal(t, pipeline.ProjectionFailed, s.Status, name)
				require.True(t, strings.Contains(s.LastError, "panic: "+value), "%s: %q", name, s.LastError)
			}
		}
		require.NotEmpty(t, iso.logs.panics(t, value), name)
	}
	require.Equal(t, 1, app.Count(t, "SELECT count(*) FROM gadget_titles"), "the live table is kept")

	res, err := iso.d.RebuildProjection(ctx, "gadget_titles", pipeline.RebuildOptions{Quarantine: true})
	require.NoError(t, err)
	require.EqualValues(t, 1, res.Applied)
	require.EqualValues(t, 1, res.Quarantined)
	require.Contains(t, queryString(t, app, "SELECT error FROM kumiko_projection_quarantine WHERE projection = 'gadget_titles'"), "panic: gadget_titles cannot take it")
	iso.requireClosable(t)
}

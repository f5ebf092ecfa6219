package http_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/consumer"
	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/feature"
	khttp "github.com/kumiko-go/kumiko/http"
	"github.com/kumiko-go/kumiko/idempotency"
	"github.com/kumiko-go/kumiko/kumikotest"
	"github.com/kumiko-go/kumiko/pipeline"
	"github.com/kumiko-go/kumiko/registry"
	"github.com/kumiko-go/kumiko/samples/tasks"
)

type noteInput struct {
	ID uuid.UUID `json:"id" validate:"required"`
}

type noted struct{}

// outageFeature has a command that appends one event, one that appends an
// event and then hands the test a channel on hold, waiting until the test
// closes it (the test breaks the database while the transaction is open),
// and one that waits the same way without appending (no wake-up
// notification follows its commit, so the pool is the test's alone).
func outageFeature(hold chan<- chan struct{}) *feature.Feature {
	return feature.Define("outage", func(r *feature.Registrar) {
		r.DefineEvent("outage.noted", noted{})
		note := func(ctx feature.CommandContext, in noteInput) error {
			_, err := ctx.AppendEvent(feature.AppendSpec{AggregateID: in.ID, AggregateType: "outage", Type: "outage.noted", Payload: noted{}})
			return err
		}
		feature.HandleCommand(r, "outage.note", feature.Roles("User"), func(ctx feature.CommandContext, in noteInput) (any, error) {
			return in.ID, note(ctx, in)
		})
		wait := func(ctx feature.CommandContext, in noteInput) (any, error) {
			release := make(chan struct{})
			select {
			case hold <- release:
			case <-ctx.Context().Done():
				return nil, ctx.Context().Err()
			}
			<-release
			return in.ID, nil
		}
		feature.HandleCommand(r, "outage.wait", feature.Roles("User"), wait)
		feature.HandleCommand(r, "outage.hold", feature.Roles("User"), func(ctx feature.CommandContext, in noteInput) (any, error) {
			if err := note(ctx, in); err != nil {
				return nil, err
			}
			return wait(ctx, in)
		})
	})
}

// outageConns is the pool size of the servers of these tests.
const outageConns = 4

// outageServer is an HTTP server whose database connections go to dbURL —
// through a proxy, or to a database of the test's own.
type outageServer struct {
	t    *testing.T
	srv  *httptest.Server
	pool *pgxpool.Pool
	logs *logBuffer
	user string
	// appName is the application_name of the server's connections.
	appName string
}

// serveOutage starts the server of reg on dbURL and schema. The pool is
// lazy: nothing connects before the first request. It never pings a
// connection before handing it out, so every pooled connection that died in
// an outage fails the request that takes it next, however slow the machine.
func serveOutage(t *testing.T, reg *registry.Registry, dbURL, schema string) *outageServer {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dbURL)
	require.NoError(t, err)
	cfg.MaxConns = outageConns
	cfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
	appName := "outage-" + uuid.NewString()
	cfg.ConnConfig.RuntimeParams["application_name"] = appName
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	store, err := eventstore.New(pool, eventstore.Config{Schema: schema, Upcaster: reg})
	require.NoError(t, err)
	t.Cleanup(store.Close)
	d, err := pipeline.New(reg, store, pipeline.Config{})
	require.NoError(t, err)
	logs := &logBuffer{}
	s, err := khttp.NewServer(khttp.Config{JWTSecret: secret, Logger: slog.New(slog.NewJSONHandler(logs, nil))}, d, store)
	require.NoError(t, err)
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	return &outageServer{t: t, srv: srv, pool: pool, logs: logs, appName: appName, user: token(t, "u-1", tenantA, "User", "Admin", "Operator")}
}

func (o *outageServer) post(path, body string) reply {
	o.t.Helper()
	return doOn(o.t, o.srv, request{path: path, token: o.user, body: strings.NewReader(body)})
}

// write, query and command each reach the database a different way: the
// CRUD write transaction, a pooled read (list), a read-only transaction
// (query handler) and a command's write transaction.
func (o *outageServer) write() reply {
	return o.post("/api/write", `{"type":"task.create","payload":{"title":"t"}}`)
}
func (o *outageServer) list() reply {
	return o.post("/api/query", `{"type":"task.list","payload":{}}`)
}
func (o *outageServer) stats() reply {
	return o.post("/api/query", `{"type":"task.stats","payload":{}}`)
}
func (o *outageServer) command() reply {
	return o.post("/api/command", fmt.Sprintf(`{"type":"outage.note","payload":{"id":%q}}`, uuid.New()))
}

// requireUnavailable asserts the answer of an outage: 503 unavailable with
// Retry-After, problem+json, nothing internal.
func requireUnavailable(t *testing.T, r reply) {
	t.Helper()
	requireProblem(t, r, http.StatusServiceUnavailable, "unavailable", "database_unavailable")
	require.NotEmpty(t, r.header.Get("Retry-After"), r.String())
}

func (o *outageServer) get(path string) func() reply {
	return func() reply { return doOn(o.t, o.srv, get(path, o.user)) }
}

// requireAllUnavailable sends a write, two queries, a command and the
// reads of operators and clients (inspect, consumers, projections, the SSE
// replay) and requires each to answer 503.
func (o *outageServer) requireAllUnavailable() {
	o.t.Helper()
	for name, call := range map[string]func() reply{
		"write": o.write, "list": o.list, "query": o.stats, "command": o.command,
		"inspect":     o.get("/api/inspect/task/" + uuid.NewString()),
		"consumers":   o.get("/api/consumers"),
		"projections": o.get("/api/projections"),
		"sse replay":  o.get("/api/events?after=0"),
	} {
		r := call()
		require.Equal(o.t, http.StatusServiceUnavailable, r.status, "%s: %s", name, r)
		requireUnavailable(o.t, r)
	}
}

// requireAllServed is requireAllUnavailable once the database is back.
// A pooled connection that died in the outage fails its next request with
// a 503 (and the pool drops it), so a 503 is retried; any other answer
// than the expected one fails the test.
func (o *outageServer) requireAllServed() {
	o.t.Helper()
	for _, c := range []struct {
		call func() reply
		want int
	}{
		{o.write, http.StatusOK}, {o.list, http.StatusOK}, {o.stats, http.StatusOK}, {o.command, http.StatusOK},
		{o.get("/api/inspect/task/" + uuid.NewString()), http.StatusNotFound},
		{o.get("/api/consumers"), http.StatusOK}, {o.get("/api/projections"), http.StatusOK},
	} {
		r := c.call()
		for deadline := time.Now().Add(20 * time.Second); r.status == http.StatusServiceUnavailable && time.Now().Before(deadline); {
			r = c.call()
		}
		require.Equal(o.t, c.want, r.status, r.String())
	}
}

// proxied is a test app whose server reaches PostgreSQL through a proxy.
type proxied struct {
	*outageServer
	app   *kumikotest.App
	proxy *kumikotest.Proxy
	hold  chan chan struct{}
}

func newProxied(t *testing.T) *proxied {
	t.Helper()
	hold := make(chan chan struct{})
	app := kumikotest.NewApp(t, []*feature.Feature{tasks.Feature, outageFeature(hold)})
	proxy := kumikotest.NewProxy(t, app.URL)
	return &proxied{outageServer: serveOutage(t, app.Registry, proxy.URL(app.URL), app.Schema), app: app, proxy: proxy, hold: hold}
}

// holdCommand starts outage.hold and returns when its transaction has
// appended the event and waits; release lets it commit (at the latest when
// the test ends), done brings the answer.
func (p *proxied) holdCommand(id uuid.UUID) (release func(), done <-chan reply) {
	p.t.Helper()
	return p.waitCommand("outage.hold", id)
}

// waitCommand is holdCommand for the command typ.
func (p *proxied) waitCommand(typ string, id uuid.UUID) (release func(), done <-chan reply) {
	p.t.Helper()
	out := make(chan reply, 1)
	go func() {
		r, err := send(p.srv, request{path: "/api/command", token: p.user,
			body: strings.NewReader(fmt.Sprintf(`{"type":%q,"payload":{"id":%q}}`, typ, id))})
		if err != nil {
			r = reply{body: []byte(err.Error())}
		}
		out <- r
	}()
	select {
	case ch := <-p.hold:
		var once sync.Once
		release = func() { once.Do(func() { close(ch) }) }
		p.t.Cleanup(release)
	case r := <-out:
		p.t.Fatalf("outage.hold answered before holding: %s", r)
	}
	return release, out
}

func (p *proxied) streamEvents(id uuid.UUID) int {
	return p.app.Count(p.t, "SELECT count(*) FROM kumiko_events WHERE aggregate_id = $1", id)
}

// A fault strikes while a command's transaction is open and the pool holds
// outageConns connections: the proxy cuts them all, or the server terminates
// every backend of the app (57P01 admin_shutdown). The command answers 503
// and its event is not there; the requests that take the other, now dead,
// pooled connections answer 503 too; then the app is served again.
func TestOutageMidTransaction(t *testing.T) {
	t.Parallel()
	for name, fault := range map[string]func(p *proxied) int{
		"cut": func(p *proxied) int { return p.proxy.Cut() },
		"terminated": func(p *proxied) int {
			return p.app.Count(p.t, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1", p.appName)
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			p := newProxied(t)
			p.fillPool()
			id := uuid.New()
			release, done := p.holdCommand(id)
			require.Equal(t, outageConns, fault(p))
			release()
			requireUnavailable(t, <-done)
			require.Zero(t, p.streamEvents(id), "nothing of the broken transaction was written")
			p.requireDeadConnsUnavailable()
			p.requireAllServed()
		})
	}
}

// fillPool opens outageConns connections: as many transactions at once,
// then committed. They append nothing, so no wake-up notification takes a
// pooled connection afterwards.
func (p *proxied) fillPool() {
	p.t.Helper()
	var releases []func()
	var answers []<-chan reply
	for range outageConns {
		release, done := p.waitCommand("outage.wait", uuid.New())
		releases, answers = append(releases, release), append(answers, done)
	}
	for i := range releases {
		releases[i]()
		require.Equal(p.t, http.StatusOK, (<-answers[i]).status)
	}
}

// requireDeadConnsUnavailable sends one request for each pooled connection
// but the one a failed command already dropped: each takes a dead
// connection and answers 503 — the SSE replay before its stream starts.
func (p *proxied) requireDeadConnsUnavailable() {
	p.t.Helper()
	for _, path := range []string{"/api/events?after=0", "/api/consumers", "/api/projections"}[:outageConns-1] {
		requireUnavailable(p.t, p.get(path)())
	}
}

// Every request while the proxy answers garbage or hangs up: 503; back to
// normal once it forwards again.
func TestOutageGarbageAndHangUp(t *testing.T) {
	t.Parallel()
	p := newProxied(t)
	p.requireAllServed()
	before := p.app.Count(t, "SELECT count(*) FROM kumiko_events")

	for _, mode := range []kumikotest.ProxyMode{kumikotest.ProxyGarbage, kumikotest.ProxyHangUp} {
		p.proxy.SetMode(mode)
		p.proxy.Cut() // the pooled connections die with their next statement
		p.requireAllUnavailable()
		p.proxy.SetMode(kumikotest.ProxyForward)
		require.Equal(t, before, p.app.Count(t, "SELECT count(*) FROM kumiko_events"), "mode %d wrote nothing", mode)
	}
	p.requireAllServed()
}

// The proxy stops listening (connection refused) and, separately, the server
// points at a port nobody listens on: 503 throughout.
func TestOutageConnectionRefused(t *testing.T) {
	t.Parallel()
	p := newProxied(t)
	p.requireAllServed()
	before := p.app.Count(t, "SELECT count(*) FROM kumiko_events")
	p.proxy.Close()
	p.requireAllUnavailable()
	require.Equal(t, before, p.app.Count(t, "SELECT count(*) FROM kumiko_events"))

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dead := ln.Addr().String()
	require.NoError(t, ln.Close())
	reg, err := registry.Build(tasks.Feature, outageFeature(nil))
	require.NoError(t, err)
	serveOutage(t, reg, "postgres://postgres@"+dead+"/kumiko_test?sslmode=disable", "public").requireAllUnavailable()
}

// A FATAL at connect: the database admits no more connections (53300
// too_many_connections) — 503 for every request, nothing written; the same
// requests go through once the limit is lifted.
func TestOutageTooManyConnections(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL, admin := privateDatabase(t)
	reg, err := registry.Build(tasks.Feature, outageFeature(nil))
	require.NoError(t, err)
	setup, err := pgxpool.New(ctx, dbURL)
	require.NoError(t, err)
	store, err := eventstore.New(setup, eventstore.Config{})
	require.NoError(t, err)
	_, err = store.Migrate(ctx)
	require.NoError(t, err)
	_, err = consumer.Migrate(ctx, store)
	require.NoError(t, err)
	_, err = pipeline.Migrate(ctx, store)
	require.NoError(t, err)
	d, err := pipeline.New(reg, store, pipeline.Config{})
	require.NoError(t, err)
	require.NoError(t, d.EnsureSchema(ctx))
	setup.Close()

	name := dbName(t, dbURL)
	_, err = admin.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{name}.Sanitize()+" CONNECTION LIMIT 0")
	require.NoError(t, err)
	o := serveOutage(t, reg, dbURL, "public")
	o.requireAllUnavailable()
	require.NotEmpty(t, o.logs.lines(map[string]any{"msg": "request failed", "reason": "database_unavailable"}))
	require.Contains(t, o.logs.String(), "53300", "the log names the cause")

	_, err = admin.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{name}.Sanitize()+" CONNECTION LIMIT -1")
	require.NoError(t, err)
	o.requireAllServed()
	var n int
	require.NoError(t, o.pool.QueryRow(ctx, "SELECT count(*) FROM kumiko_events").Scan(&n))
	require.Equal(t, 2, n, "only the write and the command after the limit was lifted")
}

// privateDatabase creates a login role and a database it owns, both of the
// test's own, and drops them when the test ends. It returns the role's URL of
// the database and a superuser connection for faults. The role is no
// superuser, so connection limits apply to it.
func privateDatabase(t *testing.T) (dbURL string, admin *pgx.Conn) {
	t.Helper()
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, kumikotest.DatabaseURL())
	require.NoError(t, err)
	name := "outage_" + strings.ReplaceAll(uuid.NewString()[:13], "-", "")
	_, err = admin.Exec(ctx, "CREATE ROLE "+name+" LOGIN")
	require.NoError(t, err)
	_, err = admin.Exec(ctx, "CREATE DATABASE "+name+" OWNER "+name)
	require.NoError(t, err)
	t.Cleanup(func() {
		// Dropping a database waits for a checkpoint, which takes a while on
		// a machine the whole suite keeps busy: the bound only keeps a hang
		// from lasting for ever.
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		_, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
		require.NoError(t, err)
		_, err = admin.Exec(ctx, "DROP ROLE IF EXISTS "+name)
		require.NoError(t, err)
		require.NoError(t, admin.Close(ctx))
	})
	u, err := url.Parse(kumikotest.DatabaseURL())
	require.NoError(t, err)
	u.User = url.User(name)
	u.Path = "/" + name
	return u.String(), admin
}

func dbName(t *testing.T, dbURL string) string {
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	return strings.TrimPrefix(u.Path, "/")
}

// String is everything logged so far.
func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Keyed writes with the Redis store behind a proxy: while Redis is cut away
// (new connections hang up or read garbage) a keyed write answers 503
// unavailable and writes nothing, an unkeyed write goes on, and with
// IdempotencyFailOpen the keyed write runs; once Redis is back, keyed writes
// replay again.
func TestOutageRedis(t *testing.T) {
	t.Parallel()
	app := kumikotest.NewApp(t, []*feature.Feature{tasks.Feature})
	proxy := kumikotest.NewProxy(t, kumikotest.RedisURL())
	opts, err := redis.ParseURL(proxy.URL(kumikotest.RedisURL()))
	require.NoError(t, err)
	client := redis.NewClient(opts)
	t.Cleanup(func() { _ = client.Close() })
	store := idempotency.NewRedisStore(client, idempotency.RedisConfig{Prefix: "kumiko:test:" + uuid.NewString() + ":", TTL: time.Minute})
	serve := func(failOpen bool) *httptest.Server {
		s, err := khttp.NewServer(khttp.Config{JWTSecret: secret, Idempotency: store, IdempotencyFailOpen: failOpen}, app.Executor, app.Store)
		require.NoError(t, err)
		srv := httptest.NewServer(s.Handler())
		t.Cleanup(srv.Close)
		return srv
	}
	closed, open := serve(false), serve(true)
	user := token(t, "u-1", tenantA, "User")
	write := func(srv *httptest.Server, key string) reply {
		r := request{path: "/api/write", token: user, body: strings.NewReader(`{"type":"task.create","payload":{"title":"t"}}`)}
		if key != "" {
			r.header = map[string]string{"Idempotency-Key": key}
		}
		return doOn(t, srv, r)
	}
	events := func() int { return app.Count(t, "SELECT count(*) FROM kumiko_events") }

	require.Equal(t, http.StatusOK, write(closed, "k-1").status)
	require.Equal(t, "true", write(closed, "k-1").header.Get("Idempotent-Replayed"))
	require.Equal(t, 1, events())

	for _, mode := range []kumikotest.ProxyMode{kumikotest.ProxyHangUp, kumikotest.ProxyGarbage} {
		proxy.SetMode(mode)
		proxy.Cut()
		r := write(closed, "k-2")
		requireProblem(t, r, http.StatusServiceUnavailable, "unavailable", "idempotency_unavailable")
		require.NotEmpty(t, r.header.Get("Retry-After"))
		require.Equal(t, 1, events(), "mode %d: the refused keyed write wrote nothing", mode)
	}
	require.Equal(t, http.StatusOK, write(closed, "").status, "unkeyed writes go on")
	require.Equal(t, http.StatusOK, write(open, "k-3").status, "fail-open runs keyed writes")
	require.Equal(t, 3, events())

	proxy.SetMode(kumikotest.ProxyForward)
	require.Equal(t, http.StatusOK, write(closed, "k-4").status)
	require.Equal(t, "true", write(closed, "k-4").header.Get("Idempotent-Replayed"))
	require.Equal(t, 4, events())
}

package http_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	khttp "github.com/kumiko-go/kumiko/http"
)

// GET /metrics counts requests by route template, method and status, and
// times them; unmatched paths share one label value.
func TestMetrics(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	alice := token(t, "alice", tenantA, "User")
	id := e.create(alice, "counted")["id"].(string)
	e.create(alice, "counted too")
	e.do(get("/api/inspect/task/"+id, alice))
	e.do(get("/no/such/"+uuid.NewString(), ""))

	r := e.do(get("/metrics", token(t, "olga", tenantA, "Operator")))
	require.Equal(t, 200, r.status)
	require.Contains(t, r.header.Get("Content-Type"), "text/plain")
	text := string(r.body)
	for _, want := range []string{
		`kumiko_http_requests_total{method="POST",route="/api/write",status="200"} 2`,
		`kumiko_http_requests_total{method="GET",route="/api/inspect/:aggregateType/:id",status="403"} 1`,
		`kumiko_http_requests_total{method="GET",route="unmatched",status="404"} 1`,
		`kumiko_http_request_duration_seconds_count{method="POST",route="/api/write",status="200"} 2`,
		`kumiko_http_request_duration_seconds_bucket{method="POST",route="/api/write",status="200",le="+Inf"} 2`,
		`go_goroutines`,
	} {
		require.Contains(t, text, want)
	}
	require.NotContains(t, text, id, "ids never become label values")
}

// Servers sharing a registry share the collectors; a Registerer that is no
// Gatherer needs Config.Gatherer.
func TestMetricsRegistry(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	reg := prometheus.NewRegistry()
	cfg := khttp.Config{JWTSecret: secret, Metrics: reg}
	_, err := khttp.NewServer(cfg, e.app.Executor, e.app.Store)
	require.NoError(t, err)
	_, err = khttp.NewServer(cfg, e.app.Executor, e.app.Store)
	require.NoError(t, err)

	_, err = khttp.NewServer(khttp.Config{JWTSecret: secret, Metrics: prometheus.WrapRegistererWith(prometheus.Labels{"app": "x"}, reg)},
		e.app.Executor, e.app.Store)
	require.ErrorContains(t, err, "Config.Gatherer")
}

// /healthz answers 200 while serving; /readyz follows Config.Ready.
func TestHealthAndReadiness(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	require.Equal(t, 200, e.do(get("/healthz", "")).status)
	require.Equal(t, 200, e.do(get("/readyz", "")).status)

	down := fmt.Errorf("ping: %w", errors.New("dial tcp 127.0.0.1:5432: connection refused"))
	e.ready.Store(&down)
	r := e.do(get("/readyz", ""))
	requireProblem(t, r, 503, "unavailable", "not_ready")
	require.Equal(t, "1", r.header.Get("Retry-After"))
	require.NotContains(t, string(r.body), "5432")
	lines := e.logs.lines(map[string]any{"level": "ERROR", "requestId": r.header.Get("X-Request-ID")})
	require.Len(t, lines, 1)
	require.Contains(t, lines[0]["err"], "connection refused")
	require.Equal(t, 200, e.do(get("/healthz", "")).status, "alive while not ready")

	e.ready.Store(nil)
	require.Equal(t, 200, e.do(get("/readyz", "")).status)
}

// Request and correlation ids are echoed and stored on every event of the
// request, with the idempotency key and the user.
func TestRequestAndCorrelationIDs(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	alice := token(t, "alice", tenantA, "User")
	task := e.create(alice, "ids")

	r := e.post("/api/command", alice, fmt.Sprintf(`{"type":"task.complete","payload":{"id":%q,"version":1}}`, task["id"]),
		"X-Request-ID", "client-req-1", "X-Correlation-ID", "flow-9", "Idempotency-Key", "key-1")
	require.Equal(t, 200, r.status, r.String())
	require.Equal(t, "client-req-1", r.header.Get("X-Request-ID"))
	require.Equal(t, "flow-9", r.header.Get("X-Correlation-ID"))
	rows, err := e.app.Pool.Query(context.Background(),
		"SELECT type, metadata->>'requestId', metadata->>'correlationId', metadata->>'idempotencyKey', metadata->>'userId' FROM kumiko_events WHERE version > 1 ORDER BY version")
	require.NoError(t, err)
	var got []string
	for rows.Next() {
		var typ, req, corr, key, user string
		require.NoError(t, rows.Scan(&typ, &req, &corr, &key, &user))
		got = append(got, strings.Join([]string{typ, req, corr, key, user}, " "))
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{
		"task.completed client-req-1 flow-9 key-1 alice",
		"task.updated client-req-1 flow-9 key-1 alice",
	}, got)

	// Generated when absent: a UUIDv7, and the correlation id defaults to it.
	r = e.post("/api/query", alice, `{"type":"task.list"}`)
	id, err := uuid.Parse(r.header.Get("X-Request-ID"))
	require.NoError(t, err)
	require.Equal(t, uuid.Version(7), id.Version())
	require.Equal(t, id.String(), r.header.Get("X-Correlation-ID"))

	// Replaced when unusable; errors carry the id in the body too.
	for _, bad := range []string{strings.Repeat("r", 129), "tab\there", "ümlaut"} {
		r = e.post("/api/write", alice, `{`, "X-Request-ID", bad, "X-Correlation-ID", bad)
		id, err := uuid.Parse(r.header.Get("X-Request-ID"))
		require.NoError(t, err, "%q", bad)
		require.Equal(t, id.String(), r.header.Get("X-Correlation-ID"))
		require.Equal(t, id.String(), r.obj(t)["requestId"])
	}
	long := strings.Repeat("r", 128)
	require.Equal(t, long, e.post("/api/query", alice, `{"type":"task.list"}`, "X-Request-ID", long).header.Get("X-Request-ID"))
}

// Strings that look like SQL or markup are data: stored and returned as
// sent, JSON-escaped, never interpreted.
func TestHostileStringsAreStoredSafely(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	alice := token(t, "alice", tenantA, "User")
	hostile := []string{
		`'); DROP TABLE kumiko_events; --`,
		`" OR 1=1 --`,
		`Robert'); DELETE FROM read_task WHERE ('1'='1`,
		`<script>alert(document.cookie)</script>`,
		`<img src=x onerror=alert(1)>`,
		`${jndi:ldap://evil/x}`,
		"\u202eRTL \U0001F600 \\u0000 literal",
	}
	for _, s := range hostile {
		row := e.create(alice, s)
		r := e.post("/api/query", alice, fmt.Sprintf(`{"type":"task.detail","payload":{"id":%q}}`, row["id"]))
		require.Equal(t, 200, r.status)
		require.Equal(t, "application/json", r.header.Get("Content-Type"))
		require.Equal(t, "nosniff", r.header.Get("X-Content-Type-Options"))
		require.Equal(t, s, r.data(t)["title"])
		require.NotContains(t, string(r.body), "<script>", "markup is escaped in JSON")
	}
	require.Equal(t, len(hostile), e.events())
	require.Equal(t, len(hostile), e.app.Count(t, "SELECT count(*) FROM read_task"))
}

// Smaller limits from the configuration apply.
func TestConfiguredLimits(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *khttp.Config) { c.BodyLimit = 100; c.MaxDepth = 2 })
	alice := token(t, "alice", tenantA, "User")
	requireProblem(t, e.post("/api/write", alice, `{"type":"task.create","payload":{"title":"`+strings.Repeat("x", 100)+`"}}`), 413, "payload_too_large", "")
	requireProblem(t, e.post("/api/write", alice, deep(3)), 400, "validation_error", "too_deep")
	r := e.post("/api/write", alice, `{"type":"task.create","payload":{"title":"ok"}}`)
	require.Equal(t, 200, r.status, r.String())
	r = e.do(withCT(post("/api/write", alice, `{"type":"task.create","payload":{"title":"ok"}}`), "application/json; charset=UTF-8"))
	require.Equal(t, 200, r.status, r.String())
}

// Configuration errors name the field.
func TestConfigValidation(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		cfg  khttp.Config
		want string
	}{
		{khttp.Config{}, "Config.JWTSecret is required"},
		{khttp.Config{JWTSecret: []byte("short")}, "Config.JWTSecret must be at least 32 bytes"},
		{khttp.Config{JWTSecret: secret, BodyLimit: -1}, "Config.BodyLimit"},
		{khttp.Config{JWTSecret: secret, MaxDepth: -1}, "Config.MaxDepth"},
		{khttp.Config{JWTSecret: secret, IdempotencyWait: -time.Second}, "Config.IdempotencyWait"},
		{khttp.Config{JWTSecret: secret}, "executor and an event store are required"},
	} {
		_, err := khttp.NewServer(c.cfg, nil, nil)
		require.ErrorContains(t, err, c.want)
	}
	d := khttp.Config{}.WithDefaults()
	require.Equal(t, "Admin", d.AdminRole)
	require.Equal(t, "Operator", d.OperatorRole)
	require.Equal(t, int64(1<<20), d.BodyLimit)
	require.Equal(t, 20, d.MaxDepth)
	require.Equal(t, 2*time.Second, d.IdempotencyWait)
	require.NotNil(t, d.Logger)
	require.NotNil(t, d.Metrics)
	require.NotNil(t, d.Gatherer)
}

// IssueToken refuses what the server would refuse, and its tokens are
// accepted with their roles.
func TestIssueToken(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		secret       []byte
		user, tenant string
		ttl          time.Duration
		want         string
	}{
		{nil, "u", tenantA.String(), time.Hour, "secret"},
		{secret, "", tenantA.String(), time.Hour, "user"},
		{secret, "u", "acme", time.Hour, "tenant"},
		{secret, "u", uuid.Nil.String(), time.Hour, "tenant"},
		{secret, "u", tenantA.String(), 0, "ttl"},
	} {
		_, err := khttp.IssueToken(c.secret, c.user, c.tenant, nil, c.ttl)
		require.ErrorContains(t, err, c.want)
	}

	e := newEnv(t)
	admin, err := khttp.IssueToken(secret, "ada", tenantA.String(), []string{"Admin"}, time.Minute)
	require.NoError(t, err)
	id := e.create(admin, "by admin")["id"].(string)
	require.Equal(t, 200, e.do(get("/api/inspect/task/"+id, admin)).status, "the Admin role came through")
}

// Echo() exposes the instance: added routes get ids, metrics and the
// problem+json error handler.
func TestEchoRoutesShareTheErrorContract(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.s.Echo().GET("/custom", func(c echo.Context) error { return c.String(http.StatusTeapot, "tea") })
	r := e.do(get("/custom", ""))
	require.Equal(t, http.StatusTeapot, r.status)
	require.NotEmpty(t, r.header.Get("X-Request-ID"))

	srv := httptest.NewServer(e.s.Handler())
	defer srv.Close()
	require.Equal(t, 200, doOn(t, srv, get("/healthz", "")).status)
}

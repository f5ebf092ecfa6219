package http_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/kumiko-go/kumiko/feature"
	khttp "github.com/kumiko-go/kumiko/http"
	"github.com/kumiko-go/kumiko/idempotency"
	"github.com/kumiko-go/kumiko/kumikotest"
	"github.com/kumiko-go/kumiko/samples/tasks"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var (
	secret  = []byte("test-secret-of-at-least-32-bytes!!")
	tenantA = uuid.MustParse("0190a000-0000-7000-8000-00000000000a")
	tenantB = uuid.MustParse("0190b000-0000-7000-8000-00000000000b")
)

// Probe is a test feature next to the tasks sample: an entity with a unique
// field, and a command that fails the way a bug would, with internal text.
var probe = feature.Define("probe", func(r *feature.Registrar) {
	r.Entity("member", feature.Fields{
		"email": feature.Text().Required().MaxLen(200).Unique(),
	})
	r.Crud("member", feature.Access{Write: feature.Roles("Admin", "User"), Read: feature.AnyUser()})
	feature.HandleCommand(r, "probe.fail", feature.Roles("Admin", "User"), func(feature.CommandContext, probeInput) (any, error) {
		return nil, errors.New(leakedSecret)
	})
})

type probeInput struct {
	Note string `json:"note" validate:"max=10"`
}

// leakedSecret is what a failing handler's error says; it must never reach a
// client.
const leakedSecret = `SELECT password FROM secret_users WHERE id = 1: relation "secret_users" does not exist`

// env is a server on a real port over a fresh database with the tasks
// sample and the probe feature.
type env struct {
	t    *testing.T
	app  *kumikotest.App
	srv  *httptest.Server
	s    *khttp.Server
	idem *memStore
	logs *logBuffer
	// ready is what the Ready check answers.
	ready atomic.Pointer[error]
}

func newEnv(t *testing.T, opts ...func(*khttp.Config)) *env {
	t.Helper()
	return newEnvConns(t, 8, opts...)
}

// newEnvConns is newEnv with a pool of conns connections.
func newEnvConns(t *testing.T, conns int32, opts ...func(*khttp.Config)) *env {
	t.Helper()
	return newEnvWith(t, conns, nil, opts...)
}

// newEnvWith is newEnvConns serving extra features too.
func newEnvWith(t *testing.T, conns int32, extra []*feature.Feature, opts ...func(*khttp.Config)) *env {
	t.Helper()
	e := &env{t: t, idem: newMemStore(), logs: &logBuffer{}}
	e.app = kumikotest.NewApp(t, append([]*feature.Feature{tasks.Feature, probe}, extra...), kumikotest.MaxConns(conns))
	cfg := khttp.Config{
		JWTSecret:   secret,
		Idempotency: e.idem,
		Logger:      slog.New(slog.NewJSONHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Ready: func(context.Context) error {
			if err := e.ready.Load(); err != nil {
				return *err
			}
			return nil
		},
	}
	for _, o := range opts {
		o(&cfg)
	}
	s, err := khttp.NewServer(cfg, e.app.Executor, e.app.Store)
	require.NoError(t, err)
	e.s = s
	e.srv = httptest.NewServer(s.Handler())
	t.Cleanup(e.srv.Close)
	return e
}

// token signs a token for user in tenant with roles.
func token(t *testing.T, user string, tenant uuid.UUID, roles ...string) string {
	t.Helper()
	tok, err := khttp.IssueToken(secret, user, tenant.String(), roles, time.Hour)
	require.NoError(t, err)
	return tok
}

// reply is an HTTP answer, read completely.
type reply struct {
	status int
	header http.Header
	body   []byte
}

func (r reply) String() string { return fmt.Sprintf("%d %s", r.status, r.body) }

// obj decodes the body as a JSON object.
func (r reply) obj(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(r.body, &m), "body: %s", r.body)
	return m
}

// data is the "data" member of a success body, as an object.
func (r reply) data(t *testing.T) map[string]any {
	t.Helper()
	d, _ := r.obj(t)["data"].(map[string]any)
	return d
}

// request is one HTTP request of a test.
type request struct {
	method, path, token string
	contentType         string // default application/json when body is set
	body                io.Reader
	header              map[string]string
}

func (e *env) do(r request) reply {
	e.t.Helper()
	return doOn(e.t, e.srv, r)
}

func doOn(t *testing.T, srv *httptest.Server, r request) reply {
	t.Helper()
	rep, err := send(srv, r)
	require.NoError(t, err)
	return rep
}

// send is doOn for goroutines other than the test's: it returns the error.
func send(srv *httptest.Server, r request) (reply, error) {
	if r.method == "" {
		r.method = http.MethodPost
	}
	req, err := http.NewRequest(r.method, srv.URL+r.path, r.body)
	if err != nil {
		return reply{}, err
	}
	if r.body != nil {
		ct := r.contentType
		if ct == "" {
			ct = "application/json"
		}
		if ct != "-" {
			req.Header.Set("Content-Type", ct)
		}
	}
	if r.token != "" {
		req.Header.Set("Authorization", "Bearer "+r.token)
	}
	for k, v := range r.header {
		req.Header.Set(k, v)
	}
	res, err := srv.Client().Do(req)
	if err != nil {
		return reply{}, err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	return reply{status: res.StatusCode, header: res.Header, body: body}, err
}

// post sends a JSON body to path.
func (e *env) post(path, token, body string, header ...string) reply {
	e.t.Helper()
	h := map[string]string{}
	for i := 0; i+1 < len(header); i += 2 {
		h[header[i]] = header[i+1]
	}
	return e.do(request{path: path, token: token, body: strings.NewReader(body), header: h})
}

// create makes a task as the token's user and returns its row.
func (e *env) create(token, title string) map[string]any {
	e.t.Helper()
	r := e.post("/api/write", token, fmt.Sprintf(`{"type":"task.create","payload":{"title":%q}}`, title))
	require.Equal(e.t, http.StatusOK, r.status, r.String())
	return r.data(e.t)
}

func (e *env) events() int {
	e.t.Helper()
	return e.app.Count(e.t, "SELECT count(*) FROM kumiko_events")
}

// requireProblem asserts a problem+json answer with status, code and, when
// not empty, reason; it returns the decoded problem.
func requireProblem(t *testing.T, r reply, status int, code, reason string) map[string]any {
	t.Helper()
	require.Equal(t, status, r.status, r.String())
	require.Equal(t, "application/problem+json", r.header.Get("Content-Type"), r.String())
	p := r.obj(t)
	require.Equal(t, code, p["code"], r.String())
	if reason != "" {
		require.Equal(t, reason, p["reason"], r.String())
	}
	require.Equal(t, "https://kumiko.dev/problems/"+code, p["type"])
	require.NotEmpty(t, p["title"])
	require.NotEmpty(t, p["detail"])
	require.NotEmpty(t, p["reason"])
	require.Equal(t, float64(status), p["status"])
	require.Equal(t, r.header.Get("X-Request-ID"), p["requestId"])
	requireNoLeak(t, r)
	return p
}

// requireNoLeak asserts a body shows nothing internal.
func requireNoLeak(t *testing.T, r reply) {
	t.Helper()
	for _, s := range []string{"secret_users", "SELECT", "SQLSTATE", "ERROR:", "goroutine", "panic", ".go:", "pgx", "pgconn"} {
		require.NotContains(t, string(r.body), s, "the body leaks internals")
	}
}

// logBuffer collects JSON log lines of one server.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// lines returns the log records whose fields include all of match.
func (b *logBuffer) lines(match map[string]any) []map[string]any {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	for _, line := range bytes.Split(b.buf.Bytes(), []byte("\n")) {
		var m map[string]any
		if json.Unmarshal(line, &m) != nil {
			continue
		}
		ok := true
		for k, v := range match {
			if m[k] != v {
				ok = false
			}
		}
		if ok {
			out = append(out, m)
		}
	}
	return out
}

// memStore is an in-memory idempotency.Store for these tests, with hooks to
// hold a completion and to fail like an unreachable backend.
type memStore struct {
	mu   sync.Mutex
	recs map[idempotency.Key]*memRecord
	down atomic.Bool
	// hold, when set, makes Complete signal entered and wait for release.
	hold *holdHook
	// waiting, when set, is closed by the first Claim that finds the key
	// in progress.
	waiting     chan struct{}
	waitingOnce sync.Once
}

type holdHook struct {
	entered chan struct{}
	release chan struct{}
	once    sync.Once
}

type memRecord struct {
	fp   string
	resp *idempotency.Response
}

var _ idempotency.Store = (*memStore)(nil)

func newMemStore() *memStore { return &memStore{recs: map[idempotency.Key]*memRecord{}} }

func (s *memStore) Claim(_ context.Context, key idempotency.Key, fp string) (*idempotency.Response, error) {
	if s.down.Load() {
		return nil, fmt.Errorf("%w: dial tcp 127.0.0.1:6379: connection refused", idempotency.ErrUnavailable)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, ok := s.recs[key]
	switch {
	case !ok:
		s.recs[key] = &memRecord{fp: fp}
		return nil, nil
	case rec.fp != fp:
		return nil, idempotency.ErrKeyReused
	case rec.resp == nil:
		if s.waiting != nil {
			s.waitingOnce.Do(func() { close(s.waiting) })
		}
		return nil, idempotency.ErrInProgress
	}
	resp := *rec.resp
	resp.Body = bytes.Clone(resp.Body)
	return &resp, nil
}

func (s *memStore) Complete(_ context.Context, key idempotency.Key, fp string, resp idempotency.Response) error {
	if h := s.hold; h != nil {
		h.once.Do(func() { close(h.entered) })
		<-h.release
	}
	if s.down.Load() {
		return fmt.Errorf("%w: connection refused", idempotency.ErrUnavailable)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if rec, ok := s.recs[key]; ok && rec.fp == fp {
		resp.Body = bytes.Clone(resp.Body)
		rec.resp = &resp
	}
	return nil
}

func (s *memStore) Release(_ context.Context, key idempotency.Key, fp string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if rec, ok := s.recs[key]; ok && rec.fp == fp && rec.resp == nil {
		delete(s.recs, key)
	}
	return nil
}

// flush forgets every record, like a Redis FLUSHALL.
func (s *memStore) flush() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.recs)
}

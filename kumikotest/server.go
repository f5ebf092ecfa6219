package kumikotest

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	nethttp "net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/http"
	"github.com/kumiko-go/kumiko/idempotency"
)

// Secret is the HS256 secret the test server verifies tokens with.
const Secret = "kumikotest-secret-of-at-least-32-bytes"

// Server is an App served over HTTP on a local port, as clients reach it:
// the full route set of docs/http.md, tokens signed with Secret, an
// in-memory idempotency store. Events reach multi-stream projections only
// when the test calls CatchUpAll.
type Server struct {
	*App
	// BaseURL is where the server listens ("http://127.0.0.1:port"); the
	// embedded App's URL is the test database's.
	BaseURL string
	// HTTP is the adapter, for tests that need its handler or its streams.
	HTTP *http.Server
}

// NewServer builds features with NewApp and serves them until the test ends.
func NewServer(t testing.TB, features []*feature.Feature, opts ...Option) *Server {
	t.Helper()
	app := NewApp(t, features, opts...)
	s, err := http.NewServer(http.Config{
		JWTSecret:   []byte(Secret),
		Idempotency: idempotency.NewMemoryStore(idempotency.MemoryConfig{}),
		Logger:      slog.New(slog.DiscardHandler),
	}, app.Executor, app.Store)
	if err != nil {
		t.Fatalf("kumikotest: %v", err)
	}
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(func() {
		s.CloseStreams()
		srv.Close()
	})
	return &Server{App: app, BaseURL: srv.URL, HTTP: s}
}

// As returns a client that calls the server as user of tenant with roles.
func (s *Server) As(t testing.TB, tenant uuid.UUID, user string, roles ...string) *Client {
	t.Helper()
	tok, err := http.IssueToken([]byte(Secret), user, tenant.String(), roles, time.Hour)
	if err != nil {
		t.Fatalf("kumikotest: token: %v", err)
	}
	return &Client{t: t, base: s.BaseURL, Token: tok}
}

// Client calls the HTTP API with one user's token, failing the test on
// transport errors only: answers of any status come back as a Response.
type Client struct {
	t    testing.TB
	base string
	// Token is the bearer token sent with every request.
	Token string
	// Header is sent with every request (X-Correlation-ID, Idempotency-Key…).
	Header nethttp.Header
}

// With returns a copy of the client that also sends header name: value.
func (c *Client) With(name, value string) *Client {
	cc := *c
	cc.Header = c.Header.Clone()
	if cc.Header == nil {
		cc.Header = nethttp.Header{}
	}
	cc.Header.Set(name, value)
	return &cc
}

// Write posts {"type","payload"} to /api/write.
func (c *Client) Write(typ string, payload any) Response {
	c.t.Helper()
	return c.call("/api/write", typ, payload)
}

// Query posts {"type","payload"} to /api/query.
func (c *Client) Query(typ string, payload any) Response {
	c.t.Helper()
	return c.call("/api/query", typ, payload)
}

// Command posts {"type","payload"} to /api/command.
func (c *Client) Command(typ string, payload any) Response {
	c.t.Helper()
	return c.call("/api/command", typ, payload)
}

// Get sends GET path (with its query string), e.g. "/api/inspect/task/<id>".
func (c *Client) Get(path string) Response {
	c.t.Helper()
	return c.Do(nethttp.MethodGet, path, nil)
}

func (c *Client) call(path, typ string, payload any) Response {
	c.t.Helper()
	body, err := json.Marshal(struct {
		Type    string          `json:"type"`
		Payload json.RawMessage `json:"payload"`
	}{typ, rawJSON(c.t, payload)})
	if err != nil {
		c.t.Fatalf("kumikotest: %v", err)
	}
	return c.Do(nethttp.MethodPost, path, body)
}

// Do sends one request with the client's token; a body is sent as JSON.
func (c *Client) Do(method, path string, body []byte) Response {
	c.t.Helper()
	req, err := nethttp.NewRequestWithContext(c.t.Context(), method, c.base+path, bytes.NewReader(body))
	if err != nil {
		c.t.Fatalf("kumikotest: %v", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range c.Header {
		req.Header[k] = v
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	res, err := nethttp.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatalf("kumikotest: %s %s: %v", method, path, err)
	}
	defer func() { _ = res.Body.Close() }()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		c.t.Fatalf("kumikotest: %s %s: %v", method, path, err)
	}
	return Response{t: c.t, Status: res.StatusCode, Header: res.Header, Body: b}
}

// Response is an HTTP answer, read completely.
type Response struct {
	t      testing.TB
	Status int
	Header nethttp.Header
	Body   []byte
}

// Problem is an application/problem+json answer of the error contract.
type Problem struct {
	Type      string         `json:"type"`
	Title     string         `json:"title"`
	Status    int            `json:"status"`
	Code      string         `json:"code"`
	Reason    string         `json:"reason"`
	Detail    string         `json:"detail"`
	RequestID string         `json:"requestId"`
	Fields    []ProblemField `json:"fields"`
	Details   map[string]any `json:"details"`
}

// ProblemField is one entry of a validation_error's fields.
type ProblemField struct {
	Path    string `json:"path"`
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Problem decodes the answer as a problem, failing the test when it is a
// success or not a problem document.
func (r Response) Problem() Problem {
	r.t.Helper()
	var p Problem
	if r.Status < 400 || json.Unmarshal(r.Body, &p) != nil || p.Code == "" {
		r.t.Fatalf("kumikotest: want a problem, got %d %s", r.Status, r.Body)
	}
	return p
}

// Data decodes the "data" member of a 200 answer into T, failing the test
// on any other answer.
func Data[T any](r Response) T {
	r.t.Helper()
	var env struct {
		Data T `json:"data"`
	}
	if r.Status != nethttp.StatusOK {
		r.t.Fatalf("kumikotest: want 200, got %d %s", r.Status, r.Body)
	}
	if err := json.Unmarshal(r.Body, &env); err != nil {
		r.t.Fatalf("kumikotest: decode %T: %v in %s", env.Data, err, r.Body)
	}
	return env.Data
}

// Package http serves the pipeline over HTTP with Echo v4: the JSON API of
// docs/http.md (write, batch, query, command, inspect), bearer-token
// authentication, request and correlation ids, idempotent writes, input
// hardening, Prometheus metrics and health probes.
//
// Every error leaves through one place, the server's HTTPErrorHandler, as
// application/problem+json with a stable code and reason; nothing internal
// (SQL, causes, stack traces) is ever shown, and every 5xx is logged with its
// cause and the request id. Handlers are thin: they decode the envelope, call
// the executor and write {"data": …}.
//
// The adapter calls the pipeline; the pipeline never calls it. A Server is
// built by hand with [NewServer] or by the kumiko facade, which runs
// [Server.Handler] in its own http.Server.
package http

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/kumiko-go/kumiko/consumer"
	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/idempotency"
	"github.com/kumiko-go/kumiko/internal/lifecycle"
	"github.com/kumiko-go/kumiko/pipeline"
)

// Defaults of Config.
const (
	DefaultAdminRole       = "Admin"
	DefaultOperatorRole    = "Operator"
	DefaultBodyLimit       = 1 << 20 // 1 MiB
	DefaultMaxDepth        = 20
	DefaultIdempotencyWait = 2 * time.Second
	// DefaultIdempotencyMaxResponse is the default of
	// Config.IdempotencyMaxResponse: 64 KiB.
	DefaultIdempotencyMaxResponse = 64 << 10
	// MinSecretLen is the shortest JWTSecret accepted: RFC 7518 §3.2 wants a
	// key at least as long as the HS256 hash output.
	MinSecretLen = 32
)

// TracerName is the instrumentation scope of the adapter's spans.
const TracerName = "github.com/kumiko-go/kumiko/http"

// Header names the adapter reads and writes.
const (
	HeaderRequestID          = "X-Request-ID"
	HeaderCorrelationID      = "X-Correlation-ID"
	HeaderIdempotencyKey     = "Idempotency-Key"
	HeaderIdempotentReplayed = "Idempotent-Replayed"
)

const (
	// idempotencyPoll is how often a duplicate of an in-flight keyed request
	// asks the store again while it waits.
	idempotencyPoll = 20 * time.Millisecond
	// storeTimeout bounds Complete and Release, which run after the client
	// may have gone.
	storeTimeout = 5 * time.Second
	// readyTimeout bounds one readiness check.
	readyTimeout = 2 * time.Second
	// maxKeyLen is the longest Idempotency-Key accepted.
	maxKeyLen = 255
)

// Config configures a Server. The zero value of every field but JWTSecret
// means its default.
type Config struct {
	// Title names the API in its OpenAPI document. Default "kumiko".
	Title string
	// JWTSecret verifies HS256 bearer tokens; at least MinSecretLen bytes.
	// Required unless JWKSURL or OIDCIssuer is set; empty: HS256 is refused.
	JWTSecret []byte
	// JWKSURL, when set, verifies RS256 and ES256 tokens with the keys of
	// this JWK set, chosen by the token's kid.
	JWKSURL string
	// OIDCIssuer, when set (and JWKSURL is not), verifies RS256 and ES256
	// tokens with the keys of the jwks_uri in the issuer's discovery
	// document (<issuer>/.well-known/openid-configuration), and iss must
	// name it unless Issuer says otherwise.
	OIDCIssuer string
	// JWKSClient fetches the discovery document and the key set. Default:
	// an http.Client with a 5s timeout.
	JWKSClient *http.Client
	// JWKSRefresh is how old the cached keys may get before the next token
	// fetches them again (a rotation that keeps the kid of a key). Default
	// 1h.
	JWKSRefresh time.Duration
	// JWKSMinRefetch is the shortest time between two fetches of the key
	// set, so tokens with unknown kids (a rotation, or made-up ones) cause
	// at most one fetch per period. Default 30s.
	JWKSMinRefetch time.Duration
	// CORSOrigins, when set, allows browsers on these origins (e.g.
	// "https://app.example.com"; "*" for any) to call the API, with the
	// Authorization, Idempotency-Key, request and correlation id headers.
	// Empty: no CORS headers; cross-origin browser calls fail.
	CORSOrigins []string
	// AdminRole is the role that may use /api/inspect and export and
	// forget data subjects (GET /api/subjects/{subject}/export, POST
	// /api/subjects/{subject}/forget), within its own tenant. Default
	// "Admin".
	AdminRole string
	// OperatorRole is the role that may see app-wide state: /api/consumers,
	// /api/projections (with their lastError texts) and, unless
	// SeparateMetrics is set, /metrics. A tenant's AdminRole does not
	// suffice. Default "Operator".
	OperatorRole string
	// Issuer, when set, must equal every token's iss claim. Empty: iss is
	// not checked.
	Issuer string
	// Audience, when set, must be among every token's aud claim. Empty: aud
	// is not checked.
	Audience string
	// SeparateMetrics takes GET /metrics off Handler, for a process that
	// serves its Gatherer on a listener of its own (kumiko.Config.MetricsAddr),
	// unauthenticated and out of the public network's reach. False: Handler
	// serves /metrics to the OperatorRole only.
	SeparateMetrics bool
	// BodyLimit is the largest request body in bytes; larger bodies answer
	// 413 payload_too_large. Default 1 MiB.
	BodyLimit int64
	// MaxDepth is the deepest nesting of objects and arrays a request
	// payload may have; deeper answers 400 validation_error (too_deep).
	// Default 20.
	MaxDepth int
	// Idempotency records keyed writes (write, batch, command, and the
	// forgetting of a data subject) so a retry with the same
	// Idempotency-Key replays the first response. Nil turns replay off:
	// the key is still stored on the events and recorded by the pipeline in
	// the write transaction, so a retry is refused (idempotency_conflict,
	// already_applied) instead of applying twice; a forget, which appends
	// no event, simply runs again, as harmless as the first time.
	// Keys sent without a token are ignored: there is no user to scope
	// them to.
	Idempotency idempotency.Store
	// IdempotencyWait is how long a duplicate of an in-flight keyed request
	// waits for the first to complete (polling the store every 20 ms) before
	// it answers 409 idempotency_conflict (request_in_progress). Default 2s.
	IdempotencyWait time.Duration
	// IdempotencyFailOpen decides keyed writes while the store is down:
	// false answers 503 unavailable with Retry-After; true runs them without
	// replay (the pipeline's record still prevents a double apply) and logs
	// a warning. Unkeyed requests never touch the store.
	IdempotencyFailOpen bool
	// IdempotencyMaxResponse is the largest response body, in bytes, a
	// keyed request's record keeps for replay, so a record stays small
	// for its whole TTL. A larger 2xx is recorded as applied without its
	// body: a retry answers 409 idempotency_conflict (already_applied), the
	// answer the pipeline's own record would give. A larger 4xx is not
	// recorded (nothing was applied): a retry runs again. Default 64 KiB.
	IdempotencyMaxResponse int
	// TracerProvider makes a server span per request (named "<METHOD>
	// <route>"), continuing a W3C traceparent the client sends. Default: no
	// spans (a no-op provider).
	TracerProvider trace.TracerProvider
	// Logger receives one line per request and every 5xx with its cause,
	// each with the request id. Default slog.Default().
	Logger *slog.Logger
	// Metrics registers the kumiko_http_* collectors. Default: a new
	// registry that also holds the Go and process collectors.
	Metrics prometheus.Registerer
	// Gatherer is what GET /metrics serves. Default: Metrics when it is a
	// Gatherer (a *prometheus.Registry is); required otherwise.
	Gatherer prometheus.Gatherer
	// Ready reports whether the server can serve (the facade pings the
	// database); while it fails GET /readyz answers 503. Nil: always ready.
	Ready func(ctx context.Context) error
	// SSEHeartbeat is how often GET /api/events sends a `: ping` comment
	// to keep an idle stream open through proxies. Default 15s.
	SSEHeartbeat time.Duration
	// RequestTimeout bounds each request of the API routes but the event
	// stream: past it the request's context ends, so a handler stuck on a
	// slow statement or a lock wait is cancelled, its transaction rolls
	// back and its connection returns to the pool, and the client gets 503
	// unavailable (timeout). A handler that ignores its context is not
	// stopped. Zero: no bound (the facade sets one, see
	// kumiko.Config.RequestTimeout).
	RequestTimeout time.Duration
	// MaxStreamsPerUser is how many event streams (GET /api/events and the
	// projection channels together) one user of a tenant may hold open at
	// once; one more answers 429 rate_limited (too_many_streams) with
	// Retry-After until one of them ends. Default 16; negative: no bound.
	MaxStreamsPerUser int
	// MaxStreams is how many event streams the server holds open at once,
	// over every user; one more answers 429 rate_limited
	// (streams_exhausted) with Retry-After. Default 1000; negative: no
	// bound.
	MaxStreams int
	// SSEBuffer is how many live events may wait for one stream while its
	// client reads slowly. A stream that falls further behind gets a last
	// `event: overflow` frame and ends; its client resumes with
	// Last-Event-ID. Writers never wait for a stream. Default 256.
	SSEBuffer int
}

// WithDefaults returns a copy of c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	if c.AdminRole == "" {
		c.AdminRole = DefaultAdminRole
	}
	if c.OperatorRole == "" {
		c.OperatorRole = DefaultOperatorRole
	}
	if c.BodyLimit == 0 {
		c.BodyLimit = DefaultBodyLimit
	}
	if c.MaxDepth == 0 {
		c.MaxDepth = DefaultMaxDepth
	}
	if c.IdempotencyWait == 0 {
		c.IdempotencyWait = DefaultIdempotencyWait
	}
	if c.IdempotencyMaxResponse == 0 {
		c.IdempotencyMaxResponse = DefaultIdempotencyMaxResponse
	}
	if c.JWKSRefresh == 0 {
		c.JWKSRefresh = DefaultJWKSRefresh
	}
	if c.JWKSMinRefetch == 0 {
		c.JWKSMinRefetch = DefaultJWKSMinRefetch
	}
	if c.SSEHeartbeat == 0 {
		c.SSEHeartbeat = DefaultSSEHeartbeat
	}
	if c.MaxStreamsPerUser == 0 {
		c.MaxStreamsPerUser = DefaultMaxStreamsPerUser
	}
	if c.MaxStreams == 0 {
		c.MaxStreams = DefaultMaxStreams
	}
	if c.SSEBuffer == 0 {
		c.SSEBuffer = DefaultSSEBuffer
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.TracerProvider == nil {
		c.TracerProvider = noop.NewTracerProvider()
	}
	if c.Metrics == nil {
		reg := prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		c.Metrics = reg
	}
	if c.Gatherer == nil {
		if g, ok := c.Metrics.(prometheus.Gatherer); ok {
			c.Gatherer = g
		}
	}
	return c
}

// Validate reports the first setting that does not fit; New calls it on
// c.WithDefaults(), and so should any caller that wants a config checked
// before building the server (the kumiko facade does, before it connects
// anything).
func (c Config) Validate() error {
	switch {
	case len(c.JWTSecret) == 0 && c.JWKSURL == "" && c.OIDCIssuer == "":
		return errors.New("http: Config.JWTSecret is required unless Config.JWKSURL or Config.OIDCIssuer is set")
	case len(c.JWTSecret) > 0 && len(c.JWTSecret) < MinSecretLen:
		return fmt.Errorf("http: Config.JWTSecret must be at least %d bytes for HS256, got %d", MinSecretLen, len(c.JWTSecret))
	case c.JWKSRefresh < 0 || c.JWKSMinRefetch < 0:
		return errors.New("http: Config.JWKSRefresh and Config.JWKSMinRefetch must not be negative")
	case c.BodyLimit < 0:
		return fmt.Errorf("http: Config.BodyLimit must not be negative, got %d", c.BodyLimit)
	case c.MaxDepth < 0:
		return fmt.Errorf("http: Config.MaxDepth must not be negative, got %d", c.MaxDepth)
	case c.IdempotencyWait < 0:
		return fmt.Errorf("http: Config.IdempotencyWait must not be negative, got %s", c.IdempotencyWait)
	case c.IdempotencyMaxResponse < 0:
		return fmt.Errorf("http: Config.IdempotencyMaxResponse must not be negative, got %d", c.IdempotencyMaxResponse)
	case c.SSEHeartbeat < 0:
		return fmt.Errorf("http: Config.SSEHeartbeat must not be negative, got %s", c.SSEHeartbeat)
	case c.RequestTimeout < 0:
		return fmt.Errorf("http: Config.RequestTimeout must not be negative, got %s", c.RequestTimeout)
	case c.SSEBuffer < 0:
		return fmt.Errorf("http: Config.SSEBuffer must not be negative, got %d", c.SSEBuffer)
	case c.Gatherer == nil:
		return errors.New("http: Config.Gatherer is required when Config.Metrics is not a prometheus.Gatherer")
	}
	return nil
}

// Server is the HTTP adapter: an Echo instance with the routes of docs/http.md.
// It is safe for concurrent use.
type Server struct {
	cfg     Config
	d       *pipeline.Executor
	store   *eventstore.Store
	e       *echo.Echo
	log     *slog.Logger
	tracer  trace.Tracer
	auth    *authenticator
	metrics *metrics
	// routes are the registered route paths, the only values the route
	// label of the metrics takes besides "unmatched".
	routes map[string]bool
	// hub fans the live event feed out to GET /api/events streams.
	hub sseHub
	// openAPIDoc is what GET /api/openapi.json serves, built once.
	openAPIDoc []byte
	// records counts the idempotency records being written after their
	// requests were answered (see WaitRecords).
	records lifecycle.Work
}

// NewServer builds the server for d, inspecting streams in store (the
// store d writes to). It registers its metrics on cfg.Metrics; a second
// server on the same registerer shares them.
func NewServer(cfg Config, d *pipeline.Executor, store *eventstore.Store) (*Server, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if d == nil || store == nil {
		return nil, errors.New("http: an executor and an event store are required")
	}
	m, err := newMetrics(cfg.Metrics)
	if err != nil {
		return nil, err
	}
	s := &Server{
		cfg: cfg, d: d, store: store, log: cfg.Logger, metrics: m, tracer: cfg.TracerProvider.Tracer(TracerName),
		auth: newAuthenticator(cfg), routes: map[string]bool{},
	}
	s.hub.guard, s.hub.settled = newReadGuard(d.Registry()), s.settled
	s.hub.buffer, s.hub.maxPerUser, s.hub.maxTotal = cfg.SSEBuffer, max(cfg.MaxStreamsPerUser, 0), max(cfg.MaxStreams, 0)
	if s.openAPIDoc, err = OpenAPI(d.Registry(), cfg.Title); err != nil {
		return nil, err
	}
	s.e = s.routeAll()
	return s, nil
}

// Handler serves the API.
func (s *Server) Handler() http.Handler { return s.e }

// Echo returns the underlying Echo instance, to add routes next to the API.
// Routes added there pass the request-id, logging and metrics middleware and
// the central error handler, but not authentication.
func (s *Server) Echo() *echo.Echo { return s.e }

// metricsFor serves h (the Prometheus handler) to the OperatorRole.
func (s *Server) metricsFor(h http.Handler) echo.HandlerFunc {
	return func(c echo.Context) error {
		if err := s.requireOperator(c, "the metrics"); err != nil {
			return err
		}
		h.ServeHTTP(c.Response(), c.Request())
		return nil
	}
}

func (s *Server) routeAll() *echo.Echo {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = s.handleError
	e.Use(s.observe)
	if len(s.cfg.CORSOrigins) > 0 {
		e.Use(middleware.CORSWithConfig(middleware.CORSConfig{
			AllowOrigins: s.cfg.CORSOrigins,
			AllowMethods: []string{http.MethodGet, http.MethodPost},
			AllowHeaders: []string{echo.HeaderAuthorization, echo.HeaderContentType, HeaderIdempotencyKey,
				HeaderRequestID, HeaderCorrelationID, "Last-Event-ID"},
			ExposeHeaders: []string{HeaderRequestID, HeaderCorrelationID, HeaderIdempotentReplayed, echo.HeaderRetryAfter},
			MaxAge:        600,
		}))
	}
	e.Use(s.refuseContentEncoding)

	// Route-level middleware, not a group's: a group's catch-all would turn
	// every 405 under /api into a 404.
	single, batch := s.readBody(1), s.readBody(3) // envelope levels above the payload
	e.POST("/api/write", s.write, s.deadline, s.authenticate, single, s.idempotent)
	e.POST("/api/batch", s.batch, s.deadline, s.authenticate, batch, s.idempotent)
	e.POST("/api/query", s.query, s.deadline, s.authenticate, single)
	e.POST("/api/command", s.command, s.deadline, s.authenticate, single, s.idempotent)
	e.GET("/api/inspect/:aggregateType/:id", s.inspect, s.deadline, s.authenticate)
	e.GET("/api/events", s.events, s.authenticate)
	e.GET("/api/consumers", s.consumers, s.deadline, s.authenticate)
	e.GET("/api/consumers/parked", s.parkedStreams, s.deadline, s.authenticate)
	e.POST("/api/consumers/:name/parked/:stream/retry", s.parkedAction((*consumer.Ops).RetryParked), s.deadline, s.authenticate)
	e.POST("/api/consumers/:name/parked/:stream/skip", s.parkedAction((*consumer.Ops).SkipParked), s.deadline, s.authenticate)
	e.GET("/api/projections", s.projections, s.deadline, s.authenticate)
	e.GET("/api/projections/:name/events", s.projectionEvents, s.authenticate)
	e.POST("/api/subjects/:subject/forget", s.forgetSubject, s.deadline, s.authenticate, s.idempotent)
	e.GET("/api/subjects/:subject/export", s.exportSubject, s.deadline, s.authenticate)
	e.GET("/api/openapi.json", s.openapi)

	if !s.cfg.SeparateMetrics {
		e.GET("/metrics", s.metricsFor(promhttp.HandlerFor(s.cfg.Gatherer, promhttp.HandlerOpts{})), s.authenticate)
	}
	e.GET("/healthz", s.healthz)
	e.GET("/readyz", s.readyz)

	for _, r := range e.Routes() {
		if r.Method != echo.RouteNotFound {
			s.routes[r.Path] = true
		}
	}
	return e
}

package http

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// maxIDLen is the longest client-chosen request or correlation id kept.
const maxIDLen = 128

// Keys of the values the middleware leaves on the echo.Context.
const (
	keyInfo = "kumiko.request"
	keyUser = "kumiko.user"
	keyBody = "kumiko.body"
)

// requestInfo is what the middleware learns about a request.
type requestInfo struct {
	id, correlation string
	log             *slog.Logger
	// idempotencyKey and requestHash are set for keyed writes of an
	// authenticated caller.
	idempotencyKey, requestHash string
}

// infoOf returns the request's info; a context the middleware never saw
// (impossible through Handler) gets a fresh id.
func infoOf(c echo.Context) *requestInfo {
	if info, ok := c.Get(keyInfo).(*requestInfo); ok {
		return info
	}
	id := newID()
	return &requestInfo{id: id, correlation: id, log: slog.Default().With("requestId", id)}
}

// observe runs around every request: it settles the request and correlation
// ids (echoed in the response), recovers panics, writes errors through the
// central handler, then counts, times and logs the request.
func (s *Server) observe(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		start := time.Now()
		req := c.Request()
		id := cleanID(req.Header.Get(HeaderRequestID))
		if id == "" {
			id = newID()
		}
		corr := cleanID(req.Header.Get(HeaderCorrelationID))
		if corr == "" {
			corr = id
		}
		route := c.Path()
		if !s.routes[route] {
			route = "unmatched"
		}
		ctx := propagation.TraceContext{}.Extract(req.Context(), propagation.HeaderCarrier(req.Header))
		ctx, span := s.tracer.Start(ctx, req.Method+" "+route, trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(attribute.String("http.request.method", req.Method), attribute.String("http.route", route),
				attribute.String("kumiko.request_id", id)))
		defer span.End()
		req = req.WithContext(ctx)
		c.SetRequest(req)
		logger := s.log.With("requestId", id, "correlationId", corr)
		if sc := span.SpanContext(); sc.IsValid() {
			logger = logger.With("traceId", sc.TraceID().String())
		}
		info := &requestInfo{id: id, correlation: corr, log: logger}
		c.Set(keyInfo, info)
		h := c.Response().Header()
		h.Set(HeaderRequestID, id)
		h.Set(HeaderCorrelationID, corr)
		h.Set("X-Content-Type-Options", "nosniff")

		if err := runSafely(next, c); err != nil {
			c.Error(err)
		}

		status := c.Response().Status
		span.SetAttributes(attribute.Int("http.response.status_code", status))
		if status >= 500 {
			span.SetStatus(codes.Error, http.StatusText(status))
		}
		elapsed := time.Since(start)
		s.metrics.observe(route, req.Method, status, elapsed)
		level := slog.LevelInfo
		if probes[route] && status < 500 {
			level = slog.LevelDebug // scraped every few seconds: not worth a line each
		}
		attrs := []any{"method", req.Method, "route", route, "path", req.URL.Path,
			"status", status, "bytes", c.Response().Size, "duration", elapsed}
		if u := userOf(c); u.Authenticated {
			attrs = append(attrs, "tenant", u.TenantID.String(), "user", u.ID)
		}
		info.log.Log(req.Context(), level, "request", attrs...)
		return nil
	}
}

// deadline ends the request's context after Config.RequestTimeout.
func (s *Server) deadline(next echo.HandlerFunc) echo.HandlerFunc {
	if s.cfg.RequestTimeout <= 0 {
		return next
	}
	return func(c echo.Context) error {
		req := c.Request()
		ctx, cancel := context.WithTimeout(req.Context(), s.cfg.RequestTimeout)
		defer cancel()
		c.SetRequest(req.WithContext(ctx))
		// The error this returns is answered after cancel ran: the error
		// handler must see the request's own context, which tells a client
		// that went away (see clientClosed) from this bound.
		defer c.SetRequest(req)
		return next(c)
	}
}

// clientClosed reports whether err is the end of a request whose client
// closed its connection: the request's context ctx was cancelled by
// net/http, which cancels it when the connection's reading side ends, and
// err is that cancellation. A request past RequestTimeout ended with
// DeadlineExceeded instead and stays a 503 timeout; a context that ended
// with a cause of its own, or any cancel while the server is stopping, is
// not the client's doing either. (A server whose owner cancels requests
// without calling CloseStreams first cannot be told from its clients.)
func (s *Server) clientClosed(ctx context.Context, err error) bool {
	return errors.Is(err, context.Canceled) && errors.Is(ctx.Err(), context.Canceled) &&
		context.Cause(ctx) == context.Canceled && //nolint:errorlint // equal, not wrapping: any cause of its own is not net/http's
		!s.stopping()
}

// stopping reports whether the server is shutting down: CloseStreams ran,
// which the facade registers with http.Server.RegisterOnShutdown, so a
// request cancelled from now on may have been cancelled by the stop.
func (s *Server) stopping() bool {
	s.hub.mu.Lock()
	defer s.hub.mu.Unlock()
	return s.hub.closed
}

// probes are the routes of monitoring systems.
var probes = map[string]bool{"/healthz": true, "/readyz": true, "/metrics": true}

// runSafely calls next and turns a panic into an error carrying the stack,
// so it is logged and answered as internal_error. http.ErrAbortHandler keeps
// its meaning.
func runSafely(next echo.HandlerFunc, c echo.Context) (err error) {
	defer func() {
		if p := recover(); p != nil {
			if pe, ok := p.(error); ok && errors.Is(pe, http.ErrAbortHandler) {
				panic(p)
			}
			err = fmt.Errorf("panic: %v\n%s", p, debug.Stack())
		}
	}()
	return next(c)
}

// cleanID returns a client-sent id if it is 1–128 printable ASCII
// characters (after trimming spaces), else "".
func cleanID(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > maxIDLen || !printable(s) {
		return ""
	}
	return s
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

func newID() string {
	if id, err := uuid.NewV7(); err == nil {
		return id.String()
	}
	return uuid.NewString()
}

// metrics are the adapter's Prometheus collectors.
type metrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kumiko_http_requests_total",
		Help: "HTTP requests answered, by route template, method and status.",
	}, []string{"route", "method", "status"})
	duration := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "kumiko_http_request_duration_seconds",
		Help:    "Time from receiving a request to its answer, by route template, method and status.",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
	}, []string{"route", "method", "status"})
	m := &metrics{}
	var err error
	if m.requests, err = register(reg, requests); err != nil {
		return nil, err
	}
	if m.duration, err = register(reg, duration); err != nil {
		return nil, err
	}
	return m, nil
}

// register registers c, or returns the collector of the same description a
// server registered before on reg.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	err := reg.Register(c)
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	if err != nil {
		var zero C
		return zero, fmt.Errorf("http: register metrics: %w", err)
	}
	return c, nil
}

// methods are the method label values; anything else counts as OTHER, so a
// client cannot grow the label set.
var methods = map[string]bool{
	http.MethodGet: true, http.MethodHead: true, http.MethodPost: true, http.MethodPut: true,
	http.MethodPatch: true, http.MethodDelete: true, http.MethodOptions: true,
}

func (m *metrics) observe(route, method string, status int, d time.Duration) {
	if !methods[method] {
		method = "OTHER"
	}
	st := strconv.Itoa(status)
	m.requests.WithLabelValues(route, method, st).Inc()
	m.duration.WithLabelValues(route, method, st).Observe(d.Seconds())
}

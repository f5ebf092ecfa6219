package http

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/kumiko-go/kumiko/idempotency"
	"github.com/kumiko-go/kumiko/kumikotype"
	"github.com/kumiko-go/kumiko/pipeline"
)

// idempotent is the middleware of keyed writes. Without an Idempotency-Key
// it does nothing. With one (and an authenticated caller) the key and the
// request's fingerprint go into the pipeline caller, and, when a store is
// configured, the request runs once per (tenant, user, key): a retry
// replays the first response with Idempotent-Replayed: true, a concurrent
// duplicate waits up to IdempotencyWait and then answers 409
// request_in_progress, and the key sent with another request answers 422
// key_reused. 2xx and 4xx responses are recorded; a 5xx, or a client that
// closed its connection before the answer, releases the key so a retry
// runs again. A response body larger than IdempotencyMaxResponse is
// not kept: a 2xx is recorded as applied without it (see responseOmitted), a
// 4xx releases the key.
//
// Keys of anonymous callers are ignored: there is no principal to scope
// them to, and a key space shared by every anonymous client would let one
// client's request collide with another's.
func (s *Server) idempotent(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		req := c.Request()
		values := req.Header.Values(HeaderIdempotencyKey)
		if len(values) == 0 {
			return next(c)
		}
		key := values[0]
		if len(values) > 1 || key == "" || len(key) > maxKeyLen || !printable(key) {
			return invalidInput(kumikotype.ReasonIdempotencyKey, "the Idempotency-Key must be one value of 1 to 255 printable ASCII characters")
		}
		u := userOf(c)
		if !u.Authenticated {
			return next(c)
		}
		info := infoOf(c)
		info.idempotencyKey = key
		info.requestHash = fingerprint(req.Method, req.URL.Path, bodyOf(c))
		store := s.cfg.Idempotency
		if store == nil {
			return next(c)
		}

		k := idempotency.Key{Tenant: u.TenantID.String(), User: u.ID, Key: key}
		resp, err := s.claim(req.Context(), k, info.requestHash)
		switch {
		case errors.Is(err, idempotency.ErrKeyReused):
			return newAPIError(pipeline.CodeIdempotencyConflict, kumikotype.ReasonKeyReused, "the idempotency key was used for a different request")
		case errors.Is(err, idempotency.ErrInProgress):
			return newAPIError(pipeline.CodeIdempotencyConflict, kumikotype.ReasonRequestInProgress, "a request with this idempotency key is still in progress; retry later")
		case errors.Is(err, idempotency.ErrUnavailable) && s.cfg.IdempotencyFailOpen:
			info.log.Warn("idempotency store unavailable; running the keyed request without replay", "err", err)
			return next(c)
		case errors.Is(err, idempotency.ErrUnavailable):
			return newAPIError(pipeline.CodeUnavailable, kumikotype.ReasonIdempotencyUnavailable, "idempotent requests cannot be served right now; retry later").WithCause(err)
		case err != nil:
			return pipeline.AsError(err) // the client went away, or a store that broke its contract
		case resp != nil:
			return replay(c, resp)
		}
		return s.runClaimed(c, next, store, k, info)
	}
}

// claim asks the store for k, waiting while a duplicate is in flight.
func (s *Server) claim(ctx context.Context, k idempotency.Key, fp string) (*idempotency.Response, error) {
	deadline := time.Now().Add(s.cfg.IdempotencyWait)
	for {
		resp, err := s.cfg.Idempotency.Claim(ctx, k, fp)
		if !errors.Is(err, idempotency.ErrInProgress) {
			return resp, err
		}
		left := time.Until(deadline)
		if left <= 0 {
			return nil, err
		}
		t := time.NewTimer(min(left, idempotencyPoll))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

// runClaimed runs the request that owns k and records its response: the
// error, if any, is written by the central handler into the recording. The
// record is written after the handler returns, in a goroutine of its own
// (see settleLater), so the client has its answer one store round trip
// sooner; a retry arriving before the record finds the claim still pending
// and waits for it (IdempotencyWait), as for a request in flight.
func (s *Server) runClaimed(c echo.Context, next echo.HandlerFunc, store idempotency.Store, k idempotency.Key, info *requestInfo) error {
	res := c.Response()
	rec := &recorder{ResponseWriter: res.Writer, limit: s.cfg.IdempotencyMaxResponse}
	res.Writer = rec
	settled := false
	defer func() {
		res.Writer = rec.ResponseWriter
		if !settled { // a panic: free the key for a retry
			s.settle(s.settlement(c, store, k, info, 0, rec))
		}
	}()
	if err := next(c); err != nil {
		c.Error(err)
	}
	settled = true
	s.settleLater(s.settlement(c, store, k, info, res.Status, rec))
	return nil
}

// responseOmitted is the ContentType of a record whose 2xx body was larger
// than IdempotencyMaxResponse: the request was applied, its body was not
// kept. Replay answers it with 409 already_applied; it never reaches a
// client as a content type.
const responseOmitted = "application/x.kumiko.response-omitted"

// settlement is what settle needs of a request, taken while its echo
// context is still the request's.
type settlement struct {
	ctx         context.Context
	store       idempotency.Store
	key         idempotency.Key
	fingerprint string
	log         *slog.Logger
	status      int
	contentType string
	body        []byte
	overflow    bool
}

func (s *Server) settlement(c echo.Context, store idempotency.Store, k idempotency.Key, info *requestInfo, status int, rec *recorder) settlement {
	return settlement{
		ctx: context.WithoutCancel(c.Request().Context()), store: store, key: k, fingerprint: info.requestHash,
		log: info.log, status: status, contentType: c.Response().Header().Get(echo.HeaderContentType),
		body: rec.body.Bytes(), overflow: rec.overflow,
	}
}

// settleLater settles st in a goroutine the server tracks: WaitRecords
// waits for it. Until it is done the claim stays pending, so retries wait
// rather than run.
func (s *Server) settleLater(st settlement) {
	end := s.records.Begin("idempotency record")
	go func() {
		defer end()
		s.settle(st)
	}()
}

// WaitRecords waits until the idempotency records of answered requests are
// written, or ctx ends. Call it after the HTTP server stopped serving and
// before closing the idempotency store's client.
func (s *Server) WaitRecords(ctx context.Context) error {
	idle := s.records.Idle() // closed at once when nothing is being recorded
	select {
	case <-idle:
		return nil
	default:
	}
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("http: idempotency records still being written: %w", ctx.Err())
	}
}

// settle completes the key with a 2xx or 4xx response (but the 499 of a
// client that went away) and releases it otherwise; a 2xx too large to keep
// is completed as responseOmitted, a 4xx too large is released.
func (s *Server) settle(st settlement) {
	ctx, cancel := context.WithTimeout(st.ctx, storeTimeout)
	defer cancel()
	if st.status < 200 || st.status >= 500 || st.status == statusClientClosed || (st.overflow && st.status >= 300) {
		if err := st.store.Release(ctx, st.key, st.fingerprint); err != nil {
			st.log.Warn("idempotency: release the key", "err", err)
		}
		return
	}
	resp := idempotency.Response{Status: st.status, ContentType: st.contentType, Body: st.body}
	if st.overflow {
		resp = idempotency.Response{Status: http.StatusConflict, ContentType: responseOmitted}
		st.log.Info("idempotency: the response is too large to keep for replay; a retry answers already_applied",
			"limit", s.cfg.IdempotencyMaxResponse)
	}
	if err := st.store.Complete(ctx, st.key, st.fingerprint, resp); err != nil {
		st.log.Warn("idempotency: record the response", "err", err)
	}
}

// replay answers with a recorded response.
func replay(c echo.Context, resp *idempotency.Response) error {
	c.Response().Header().Set(HeaderIdempotentReplayed, "true")
	if resp.ContentType == responseOmitted {
		return newAPIError(pipeline.CodeIdempotencyConflict, kumikotype.ReasonAlreadyApplied,
			"this request was already applied; its response was too large to keep for replay")
	}
	ct, status := resp.ContentType, resp.Status
	if status == 0 {
		status = http.StatusOK
	}
	if ct == "" && len(resp.Body) == 0 {
		return c.NoContent(status) // a 204: no body, so no type either
	}
	if ct == "" {
		ct = contentTypeJSON
	}
	return c.Blob(status, ct, resp.Body)
}

// fingerprint identifies a request: the same key with another fingerprint
// is a reused key.
func fingerprint(method, path string, body []byte) string {
	h := sha256.New()
	h.Write([]byte(method))
	h.Write([]byte{'\n'})
	h.Write([]byte(path))
	h.Write([]byte{'\n'})
	h.Write(body)
	return hex.EncodeToString(h.Sum(nil))
}

// recorder keeps a copy of what is written, for the idempotency store, up to
// limit bytes: past it, the copy is dropped and overflow set.
type recorder struct {
	http.ResponseWriter
	body     bytes.Buffer
	limit    int
	overflow bool
}

func (r *recorder) Write(b []byte) (int, error) {
	switch {
	case r.overflow:
	case r.body.Len()+len(b) > r.limit:
		r.overflow = true
		r.body = bytes.Buffer{}
	default:
		r.body.Write(b)
	}
	return r.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection.
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

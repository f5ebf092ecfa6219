package http

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/kumiko-go/kumiko/kumikotype"
	"github.com/kumiko-go/kumiko/pipeline"
	"github.com/kumiko-go/kumiko/registry"
)

// Codes the adapter answers on its own, next to the pipeline's codes (all
// of them kumikotype's), and other wire constants of the error contract.
// Its reasons and field problem codes are kumikotype's constants.
const (
	codePayloadTooLarge      = string(kumikotype.CodePayloadTooLarge)
	codeRateLimited          = string(kumikotype.CodeRateLimited)
	codeMethodNotAllowed     = string(kumikotype.CodeMethodNotAllowed)
	codeClientClosed         = string(kumikotype.CodeClientClosed)
	codeUnsupportedMediaType = string(kumikotype.CodeUnsupportedMediaType)
	problemTypeBase          = kumikotype.ProblemTypeBase
	contentTypeProblem       = kumikotype.ContentTypeProblem
	contentTypeJSON          = "application/json"
	retryAfterSeconds        = "1"
	genericInternalDetail    = "internal error"
	detailFailedIndex        = "failedIndex"
)

// statusClientClosed is the status of a request whose client closed its
// connection before the answer (nginx's 499): what the request log and the
// kumiko_http_* metrics record, so a client that went away is neither a
// server error nor a 2xx. The answer goes to a closed connection; only a
// client that merely closed its sending side could read it.
const statusClientClosed = kumikotype.StatusClientClosed

// statusOf is the HTTP status of an error code (and, for
// idempotency_conflict, its reason): kumikotype's mapping, which the ops
// console shares. An unknown code is a 500.
func statusOf(code, reason string) int { return kumikotype.Code(code).Status(reason) }

// problem is the application/problem+json body of every error.
type problem = kumikotype.Problem

type fieldProblem = kumikotype.FieldProblem

// apiError is a failure the adapter detects itself: the contract's one
// error type. Its cause is logged, never shown.
type apiError = kumikotype.Error

// contractError is what every error the adapter answers with its own code
// has: the pipeline's, the consumer operations', the event store's and the
// adapter's own. Fields, Details and a WWW-Authenticate challenge are
// optional behaviours on top.
type contractError interface {
	error
	Code() string
	Reason() string
	Detail() string
}

func newAPIError(code string, reason kumikotype.Reason, detail string) *apiError {
	return kumikotype.NewError(kumikotype.Code(code), reason, detail, nil)
}

func invalidInput(reason kumikotype.Reason, detail string, fields ...registry.FieldError) *apiError {
	return newAPIError(pipeline.CodeValidation, reason, detail).WithFields(fields)
}

// challenge is the WWW-Authenticate value of a 401 of reason: a token that
// was sent and refused (any reason finer than the code) says so.
func challenge(reason string) string {
	if reason == "" || reason == pipeline.CodeUnauthenticated {
		return `Bearer realm="kumiko"`
	}
	return `Bearer realm="kumiko", error="invalid_token"`
}

// toProblem classifies err into the problem to answer, the headers to add
// and the error to log (nil when there is nothing worth logging).
func toProblem(err error) (p problem, header http.Header, cause error) {
	header = http.Header{}
	var (
		ce contractError
		he *echo.HTTPError
	)
	switch {
	case errors.As(err, &ce):
		p = problem{Code: ce.Code(), Reason: ce.Reason(), Detail: ce.Detail()}
		if f, ok := ce.(interface{ Fields() []registry.FieldError }); ok {
			p.Fields = fieldProblems(f.Fields())
		}
		if d, ok := ce.(interface{ Details() map[string]any }); ok {
			p.Details = d.Details()
		}
		if p.Code == pipeline.CodeUnauthenticated {
			header.Set("WWW-Authenticate", challenge(p.Reason))
		}
		cause = ce
	case errors.As(err, &he):
		p = echoProblem(he)
		cause = he
	default:
		p = problem{Code: pipeline.CodeInternal}
		cause = err
	}
	if p.Reason == "" {
		p.Reason = p.Code
	}
	p.Status = statusOf(p.Code, p.Reason)
	if p.Status == http.StatusInternalServerError {
		// Whatever the code claimed, a 500 shows nothing of its origin but
		// the failing command of a batch, which is the client's own input.
		var details map[string]any
		if i, ok := p.Details[detailFailedIndex].(int); ok {
			details = map[string]any{detailFailedIndex: i}
		}
		reason, detail := pipeline.CodeInternal, genericInternalDetail
		if p.Code == pipeline.CodeInternal && p.Reason == string(kumikotype.ReasonEventSchemaUnknownVersion) {
			// The one 500 whose reason is contract: the client learns
			// that the server is older than the data, in a fixed sentence.
			reason, detail = p.Reason, p.Detail
		}
		p.Code, p.Reason, p.Detail, p.Fields, p.Details = pipeline.CodeInternal, reason, detail, nil, details
	}
	p.Fields, p.FieldsTotal = capFields(p.Fields, err)
	p.Type = problemTypeBase + p.Code
	p.Title = kumikotype.Code(p.Code).Title()
	switch p.Status {
	case http.StatusServiceUnavailable, http.StatusTooManyRequests:
		header.Set("Retry-After", retryAfterSeconds)
	case http.StatusConflict:
		if p.Reason == string(kumikotype.ReasonRequestInProgress) {
			header.Set("Retry-After", retryAfterSeconds)
		}
	case http.StatusUnsupportedMediaType:
		header.Set("Accept-Encoding", "identity") // RFC 9110 §15.5.16
	}
	return p, header, cause
}

func fieldProblems(fs []registry.FieldError) []fieldProblem {
	if len(fs) == 0 {
		return nil
	}
	out := make([]fieldProblem, len(fs))
	for i, f := range fs {
		out[i] = fieldProblem(f)
	}
	return out
}

// capFields bounds a list of field problems to registry.MaxFieldErrors and
// returns it with the total count: the listed ones, plus those a
// registry.ValidationError in err's chain found but did not list.
func capFields(fs []fieldProblem, err error) ([]fieldProblem, int) {
	if len(fs) == 0 {
		return nil, 0
	}
	total := len(fs)
	var ve *registry.ValidationError
	if errors.As(err, &ve) {
		total += ve.Omitted
	}
	return fs[:min(len(fs), registry.MaxFieldErrors)], total
}

// echoProblem maps Echo's own errors (no route, wrong method, …).
func echoProblem(he *echo.HTTPError) problem {
	switch he.Code {
	case http.StatusNotFound:
		return problem{Code: pipeline.CodeNotFound, Reason: string(kumikotype.ReasonRouteNotFound), Detail: "no such route"}
	case http.StatusMethodNotAllowed:
		return problem{Code: codeMethodNotAllowed, Detail: "the route does not accept this method"}
	case http.StatusRequestEntityTooLarge:
		return problem{Code: codePayloadTooLarge, Detail: "the request body is too large"}
	case http.StatusUnauthorized:
		return problem{Code: pipeline.CodeUnauthenticated, Detail: "authentication is required"}
	case http.StatusForbidden:
		return problem{Code: pipeline.CodeAccessDenied, Detail: "access denied"}
	case http.StatusTooManyRequests:
		return problem{Code: codeRateLimited, Detail: "too many requests; retry later"}
	case http.StatusServiceUnavailable:
		return problem{Code: pipeline.CodeUnavailable, Detail: "the service is unavailable; retry later"}
	}
	if he.Code >= 400 && he.Code < 500 {
		return problem{Code: pipeline.CodeValidation, Reason: string(kumikotype.ReasonBadRequest), Detail: http.StatusText(he.Code)}
	}
	return problem{Code: pipeline.CodeInternal}
}

// handleError is the one place errors become responses.
func (s *Server) handleError(err error, c echo.Context) {
	info := infoOf(c)
	if s.clientClosed(c.Request().Context(), err) {
		err = newAPIError(codeClientClosed, "", "the client closed the connection before the answer").WithCause(err)
	}
	p, header, cause := toProblem(err)
	p.RequestID = info.id
	log := info.log
	switch {
	case p.Status == statusClientClosed:
		log.Info("request abandoned by the client", "status", p.Status, "code", p.Code, "reason", p.Reason, "err", cause)
	case p.Status >= 500:
		log.Error("request failed", "status", p.Status, "code", p.Code, "reason", p.Reason, "err", cause)
	default:
		log.Debug("request refused", "status", p.Status, "code", p.Code, "reason", p.Reason, "err", cause)
	}
	res := c.Response()
	if res.Committed {
		log.Warn("error after the response was committed", "err", err)
		return
	}
	body, merr := json.Marshal(p)
	if merr != nil { // cannot happen with these field types
		log.Error("encode problem", "err", merr)
		body = []byte(`{"code":"internal_error"}`)
	}
	for k, v := range header {
		res.Header()[k] = v
	}
	res.Header().Set(echo.HeaderContentType, contentTypeProblem)
	res.WriteHeader(p.Status)
	if c.Request().Method != http.MethodHead {
		if _, werr := res.Write(body); werr != nil {
			log.Debug("write problem", "err", werr)
		}
	}
}

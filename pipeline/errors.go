package pipeline

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/kumiko-go/kumiko/consumer"
	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/internal/author"
	"github.com/kumiko-go/kumiko/registry"
)

// Stable error codes of the error contract. The HTTP layer maps each to its
// status; the pipeline never speaks HTTP.
const (
	CodeValidation      = "validation_error"
	CodeUnauthenticated = "unauthenticated"
	CodeAccessDenied    = "access_denied"
	CodeNotFound        = "not_found"
	CodeVersionConflict = "version_conflict"
	CodeStreamArchived  = "stream_archived"
	CodeUniqueViolation = "unique_violation"
	CodeUnprocessable   = "unprocessable"
	CodeUnavailable     = "unavailable"
	CodeInternal        = "internal_error"
)

// Error is a request failure as the client may see it: a stable Code, a finer
// Reason, a Detail sentence safe to show, and structured extras. The cause is
// kept for logs (Unwrap) and never shown.
type Error struct {
	Code   string
	Reason string
	Detail string
	// Fields lists payload problems (validation_error).
	Fields []registry.FieldError
	// Details carries structured extras: expectedVersion/currentVersion on
	// conflicts, failedIndex in batches, field on unique violations.
	Details map[string]any
	cause   error
}

func (e *Error) Error() string {
	msg := e.Code
	if e.Reason != "" && e.Reason != e.Code {
		msg += " (" + e.Reason + ")"
	}
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	if e.cause != nil {
		msg += ": " + e.cause.Error()
	}
	return msg
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.cause }

func newError(code, reason, detail string, cause error) *Error {
	if reason == "" {
		reason = code
	}
	return &Error{Code: code, Reason: reason, Detail: detail, cause: cause}
}

// with sets a detail and returns e, for chaining.
func (e *Error) with(key string, v any) *Error {
	e.set(key, v)
	return e
}

func (e *Error) set(key string, v any) {
	if e.Details == nil {
		e.Details = map[string]any{}
	}
	e.Details[key] = v
}

// AsError classifies any error of a request into an *Error: the framework's
// typed errors keep their codes, a handler's feature.Refuse becomes
// unprocessable, a handler's panic becomes internal_error (ReasonHandlerPanic),
// a database outage (eventstore.ErrUnavailable, as eventstore.TranslateError
// marks it where the error occurs) becomes unavailable, and everything else
// is internal_error with a generic detail.
func AsError(err error) *Error {
	if err == nil {
		return nil
	}
	var pe *Error
	if errors.As(err, &pe) {
		return pe
	}
	var ce *consumer.Error
	if errors.As(err, &ce) {
		return &Error{Code: ce.Code(), Reason: ce.Reason(), Detail: ce.Detail(), Details: ce.Details(), cause: err}
	}
	var (
		ve  *registry.ValidationError
		vc  *eventstore.VersionConflictError
		ref *feature.RefusedError
		pg  *pgconn.PgError
		pp  *author.PanicError
	)
	switch {
	case errors.As(err, &pp):
		return newError(CodeInternal, ReasonHandlerPanic, "internal error", err)
	case errors.As(err, &ve):
		e := newError(CodeValidation, "", "the payload is not valid", err)
		e.Fields = ve.Fields
		return e
	case errors.Is(err, registry.ErrUnknownType):
		return newError(CodeNotFound, "handler_not_found", "no such handler", err)
	case errors.As(err, &vc):
		e := newError(CodeVersionConflict, "event_version_conflict", "the aggregate was changed by someone else; reload and retry", err)
		e.set("expectedVersion", vc.Expected)
		if vc.Current >= 0 {
			e.set("currentVersion", vc.Current)
		}
		return e
	case errors.Is(err, eventstore.ErrStreamArchived):
		return newError(CodeStreamArchived, "", "the aggregate is archived", err)
	case errors.Is(err, eventstore.ErrAggregateNotFound):
		return newError(CodeNotFound, "aggregate_not_found", "no such aggregate", err)
	case errors.As(err, &ref):
		return newError(CodeUnprocessable, ref.Reason(), ref.Detail(), err)
	case errors.As(err, &pg) && pg.Code == "23505":
		return newError(CodeUniqueViolation, "", "a value that must be unique is already taken", err)
	case errors.Is(err, eventstore.ErrUnavailable):
		return newError(CodeUnavailable, "database_unavailable", "the database is unreachable; retry later", err)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return newError(CodeUnavailable, "timeout", "the request was cancelled or timed out", err)
	}
	return newError(CodeInternal, "", "internal error", err)
}

func notFoundf(reason, format string, args ...any) *Error {
	return newError(CodeNotFound, reason, fmt.Sprintf(format, args...), nil)
}

// ReasonHandlerPanic is the Reason of the internal_error that a panic in a
// feature's code (a command or query handler, an inline or multi-stream
// projection's apply function) becomes in a request. The panic's value never
// reaches the client; it is logged with its stack.
const ReasonHandlerPanic = author.ReasonPanic

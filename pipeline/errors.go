package pipeline

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/kumikotype"
	"github.com/kumiko-go/kumiko/registry"
)

// Stable error codes of the error contract, as strings: the codes are
// kumikotype's (a new code is added there), which also maps each to its
// HTTP status; the pipeline never speaks HTTP.
const (
	CodeValidation      = string(kumikotype.CodeValidation)
	CodeUnauthenticated = string(kumikotype.CodeUnauthenticated)
	CodeAccessDenied    = string(kumikotype.CodeAccessDenied)
	CodeNotFound        = string(kumikotype.CodeNotFound)
	CodeVersionConflict = string(kumikotype.CodeVersionConflict)
	CodeStreamArchived  = string(kumikotype.CodeStreamArchived)
	CodeUniqueViolation = string(kumikotype.CodeUniqueViolation)
	CodeUnprocessable   = string(kumikotype.CodeUnprocessable)
	CodeUnavailable     = string(kumikotype.CodeUnavailable)
	// CodeProjectionRebuilding answers a query of a projection whose table
	// is still being built for the first time: it would return partial
	// rows. Retry later.
	CodeProjectionRebuilding = string(kumikotype.CodeProjectionRebuilding)
	CodeInternal             = string(kumikotype.CodeInternal)
)

// Error is a request failure as the client may see it: a stable Code, a finer
// Reason, a Detail sentence safe to show, and structured extras. The cause is
// kept for logs (Unwrap) and never shown. It is kumikotype.Error, the one
// error type of the contract, which the consumer operations answer too.
type Error = kumikotype.Error

func newError(code string, reason kumikotype.Reason, detail string, cause error) *Error {
	return kumikotype.NewError(kumikotype.Code(code), reason, detail, cause)
}

// contractError is an error that carries the error contract by behaviour:
// the event store's errors, the consumer operations', a handler's panic.
type contractError interface {
	error
	Code() string
	Reason() string
	Detail() string
}

// AsError classifies any error of a request into an *Error: the framework's
// typed errors keep their codes (an error with Code, Reason and Detail
// methods — the event store's, the consumer operations' — keeps them and
// its Details), a handler's feature.Refuse becomes
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
	var (
		ce  contractError
		ve  *registry.ValidationError
		ref *feature.RefusedError
		pg  *pgconn.PgError
	)
	switch {
	case errors.As(err, &ce):
		e := newError(ce.Code(), kumikotype.Reason(ce.Reason()), ce.Detail(), err)
		if d, ok := ce.(interface{ Details() map[string]any }); ok {
			for k, v := range d.Details() {
				_ = e.With(k, v)
			}
		}
		return e
	case errors.As(err, &ve):
		return newError(CodeValidation, "", "the payload is not valid", err).WithFields(ve.Fields)
	case errors.Is(err, eventstore.ErrUnknownEventVersion):
		return newError(CodeInternal, kumikotype.ReasonEventSchemaUnknownVersion,
			"a stored event is of a newer version than this server knows; run the newer release", err)
	case errors.Is(err, registry.ErrUnknownType):
		return newError(CodeNotFound, kumikotype.ReasonHandlerNotFound, "no such handler", err)
	case errors.As(err, &ref):
		return newError(CodeUnprocessable, kumikotype.Reason(ref.Reason()), ref.Detail(), err)
	case errors.As(err, &pg) && pg.Code == "23505":
		return newError(CodeUniqueViolation, "", "a value that must be unique is already taken", err)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return newError(CodeUnavailable, kumikotype.ReasonTimeout, "the request was cancelled or timed out", err)
	}
	return newError(CodeInternal, "", "internal error", err)
}

// writeError is AsError for the failure of a write transaction. A stored
// event of a newer version than this binary knows, met by the write's load
// or by the check of its append, is a conflict there, not a server error:
// 409 version_conflict with reason event_schema_unknown_version, naming the
// event (details eventType, eventVersion and knownVersion, the newest this
// binary knows) — during a rolling deploy a retry reaches a newer instance.
// A read that meets such an event stays an internal_error of that reason.
func writeError(err error) *Error {
	var unknown *eventstore.UnknownEventVersionError
	var pe *Error
	if errors.As(err, &pe) || !errors.As(err, &unknown) {
		return AsError(err)
	}
	return newError(CodeVersionConflict, kumikotype.ReasonEventSchemaUnknownVersion,
		fmt.Sprintf("the aggregate holds event %s at version %d, newer than version %d this server knows; retry on the newer release",
			unknown.Type, unknown.Version, unknown.Current), err).
		With("eventType", unknown.Type).With("eventVersion", unknown.Version).With("knownVersion", unknown.Current)
}

func notFoundf(reason kumikotype.Reason, format string, args ...any) *Error {
	return newError(CodeNotFound, reason, fmt.Sprintf(format, args...), nil)
}

// ReasonUnknownEventVersion is the Reason of the internal_error of a read
// that met a stored event of a version newer than the registry's: written by
// a newer release, it cannot be upcast, and is never guessed at. A write to
// a stream holding such an event is refused with a version_conflict of this
// reason (see writeError): it would write over history it cannot read.
const ReasonUnknownEventVersion = string(kumikotype.ReasonEventSchemaUnknownVersion)

// ReasonHandlerPanic is the Reason of the internal_error that a panic in a
// feature's code (a command or query handler, an inline or multi-stream
// projection's apply function) becomes in a request. The panic's value never
// reaches the client; it is logged with its stack.
const ReasonHandlerPanic = string(kumikotype.ReasonHandlerPanic)

// Reasons of idempotency_conflict: the key was used for a request with
// another body, or the request was applied and its response is gone.
const (
	ReasonKeyReused      = string(kumikotype.ReasonKeyReused)
	ReasonAlreadyApplied = string(kumikotype.ReasonAlreadyApplied)
)

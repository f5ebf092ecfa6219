package eventstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/kumiko-go/kumiko/kumikotype"
)

// Sentinel errors. Match them with errors.Is; the concrete errors carry
// details. Those a client may see carry the error contract by behaviour:
// Code(), Reason() and Detail(), a sentence safe to show.
var (
	// ErrVersionConflict: the stream is not at the expected version. The
	// concrete error is a *VersionConflictError.
	ErrVersionConflict error = &sentinel{msg: "version conflict", code: kumikotype.CodeVersionConflict, reason: kumikotype.ReasonEventVersionConflict}
	// ErrStreamArchived: the stream is archived and refuses appends.
	ErrStreamArchived error = &sentinel{msg: "stream archived", code: kumikotype.CodeStreamArchived, reason: kumikotype.ReasonStreamArchived,
		detail: "the aggregate is archived"}
	// ErrAggregateNotFound: the stream does not exist for this tenant (code
	// not_found, reason aggregate_not_found).
	ErrAggregateNotFound error = &sentinel{msg: "aggregate not found", code: kumikotype.CodeNotFound, reason: kumikotype.ReasonAggregateNotFound,
		detail: "no such aggregate"}
	// ErrUnknownEventVersion: a stored event has a version no upcaster can
	// bring to the current one. The concrete error is an *UnknownEventVersionError.
	ErrUnknownEventVersion = errors.New("unknown event version")
	// ErrInvalidEvent: an event to append is malformed (empty type, payload not
	// a JSON object, …). Nothing was written.
	ErrInvalidEvent = errors.New("invalid event")
	// ErrUnavailable: the database could not be reached or the connection
	// was lost (see TranslateError). Nothing of the failed work committed,
	// with one exception: a connection lost during COMMIT leaves the outcome
	// unknown, so a retry must be safe to repeat (an idempotency key).
	ErrUnavailable error = &sentinel{msg: "database unavailable", code: kumikotype.CodeUnavailable, reason: kumikotype.ReasonDatabaseUnavailable,
		detail: "the database is unreachable; retry later"}
)

// sentinel is a sentinel error with its place in the error contract. The
// one without a detail (version conflict) is only seen through its concrete
// error.
type sentinel struct {
	msg    string
	code   kumikotype.Code
	reason kumikotype.Reason
	detail string
}

func (e *sentinel) Error() string { return e.msg }

// Code is the stable error code.
func (e *sentinel) Code() string { return string(e.code) }

// Reason is the finer reason code.
func (e *sentinel) Reason() string { return string(e.reason) }

// Detail is a sentence safe to show to a client.
func (e *sentinel) Detail() string { return e.detail }

// Code returns the stable error code of err for the error contract — the
// Code() of the first error in its chain that has one — or "" when none
// has.
func Code(err error) string {
	var c interface{ Code() string }
	if errors.As(err, &c) {
		return c.Code()
	}
	switch {
	case errors.Is(err, ErrUnknownEventVersion):
		return string(kumikotype.ReasonEventSchemaUnknownVersion)
	case errors.Is(err, ErrInvalidEvent):
		return "invalid_event"
	}
	return ""
}

// VersionConflictError reports that a stream was not at the version the writer
// expected. Current is -1 when the id belongs to another tenant's stream: its
// version is not disclosed.
type VersionConflictError struct {
	AggregateID uuid.UUID
	Expected    int
	Current     int
}

func (e *VersionConflictError) Error() string {
	if e.Current < 0 {
		return fmt.Sprintf("version conflict on %s: expected version %d, the id is taken", e.AggregateID, e.Expected)
	}
	return fmt.Sprintf("version conflict on %s: expected version %d, current %d", e.AggregateID, e.Expected, e.Current)
}

// Unwrap makes errors.Is(err, ErrVersionConflict) hold.
func (e *VersionConflictError) Unwrap() error { return ErrVersionConflict }

// Code is the stable error code.
func (e *VersionConflictError) Code() string { return string(kumikotype.CodeVersionConflict) }

// Reason is the finer reason code.
func (e *VersionConflictError) Reason() string { return string(kumikotype.ReasonEventVersionConflict) }

// Detail is a sentence safe to show to a client.
func (e *VersionConflictError) Detail() string {
	return "the aggregate was changed by someone else; reload and retry"
}

// Details are the expected version and, unless the id belongs to another
// tenant's stream, the current one.
func (e *VersionConflictError) Details() map[string]any {
	d := map[string]any{"expectedVersion": e.Expected}
	if e.Current >= 0 {
		d["currentVersion"] = e.Current
	}
	return d
}

// UnknownEventVersionError reports a stored event whose schema version cannot
// be upcast to the version the application knows.
type UnknownEventVersionError struct {
	Type    string
	Version int
	Current int
}

func (e *UnknownEventVersionError) Error() string {
	return fmt.Sprintf("event %s: no upcast from version %d to %d", e.Type, e.Version, e.Current)
}

// Unwrap makes errors.Is(err, ErrUnknownEventVersion) hold.
func (e *UnknownEventVersionError) Unwrap() error { return ErrUnknownEventVersion }

// Code is the stable error code.
func (e *UnknownEventVersionError) Code() string {
	return string(kumikotype.ReasonEventSchemaUnknownVersion)
}

// BatchError names the stream of a batch append that made the whole batch fail.
type BatchError struct {
	Index int // index of the failing stream in the batch
	Err   error
}

func (e *BatchError) Error() string { return fmt.Sprintf("batch stream %d: %v", e.Index, e.Err) }

// Unwrap returns the stream's error.
func (e *BatchError) Unwrap() error { return e.Err }

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidEvent}, args...)...)
}

// TranslateError returns err marked with ErrUnavailable (errors.Is holds, the
// cause stays reachable with errors.As) when it reports a database that is out
// of reach rather than a failed statement:
//   - any failure to open a connection: refused, reset, a FATAL at connect
//     (too many connections, the server starting up or shutting down, and
//     also a wrong password or a missing database — a running server that
//     cannot connect cannot serve, whatever the reason; the cause is logged
//     and /readyz fails, which is where a configuration error shows);
//   - a session ended by the server: admin or crash shutdown (57P01, 57P02),
//     cannot connect now (57P03), idle-session timeout (57P05), a connection
//     exception (class 08), insufficient resources (53000-53300, among them
//     53300 too_many_connections);
//   - a connection lost mid-statement: EOF, unexpected EOF, a network error,
//     a connection pgx has already closed.
//
// A cancelled or expired context of the caller is not an outage and is
// returned unchanged, as is every other error and nil. The store applies
// TranslateError to every error it returns; code that runs its own SQL on
// Store.Pool applies it where those errors come out, so callers classify by
// errors.Is(err, ErrUnavailable) alone.
func TranslateError(err error) error {
	if err == nil || errors.Is(err, ErrUnavailable) || !isOutage(err) {
		return err
	}
	return &unavailableError{cause: err}
}

func isOutage(err error) bool {
	var connect *pgconn.ConnectError
	if errors.As(err, &connect) {
		return true
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		switch pg.Code {
		case "57P01", "57P02", "57P03", "57P05", "53000", "53100", "53200", "53300":
			return true
		}
		return len(pg.Code) == 5 && pg.Code[:2] == "08"
	}
	var netErr net.Error
	return errors.As(err, &netErr) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, pgconn.ErrConnClosed)
}

// translated is TranslateError for functions that return a value too.
func translated[T any](v T, err error) (T, error) { return v, TranslateError(err) }

// unavailableError is an outage as TranslateError marks it.
type unavailableError struct{ cause error }

func (e *unavailableError) Error() string { return "database unavailable: " + e.cause.Error() }

// Unwrap makes errors.Is(err, ErrUnavailable) hold and keeps the cause.
func (e *unavailableError) Unwrap() []error { return []error{ErrUnavailable, e.cause} }

// Code is the stable error code.
func (e *unavailableError) Code() string { return string(kumikotype.CodeUnavailable) }

// Reason is the finer reason code.
func (e *unavailableError) Reason() string { return string(kumikotype.ReasonDatabaseUnavailable) }

// Detail is a sentence safe to show to a client.
func (e *unavailableError) Detail() string { return "the database is unreachable; retry later" }

package eventstore

import (
	"errors"
	"fmt"

	"github.com/google/uuid"
)

// Sentinel errors. Match them with errors.Is; the concrete errors carry details.
var (
	// ErrVersionConflict: the stream is not at the expected version. The
	// concrete error is a *VersionConflictError.
	ErrVersionConflict = errors.New("version conflict")
	// ErrStreamArchived: the stream is archived and refuses appends.
	ErrStreamArchived = errors.New("stream archived")
	// ErrAggregateNotFound: the stream does not exist for this tenant.
	ErrAggregateNotFound = errors.New("aggregate not found")
	// ErrUnknownEventVersion: a stored event has a version no upcaster can
	// bring to the current one. The concrete error is an *UnknownEventVersionError.
	ErrUnknownEventVersion = errors.New("unknown event version")
	// ErrInvalidEvent: an event to append is malformed (empty type, payload not
	// a JSON object, …). Nothing was written.
	ErrInvalidEvent = errors.New("invalid event")
)

// Code returns the stable error code of err for the error contract, or "" when
// err is not an event store error.
func Code(err error) string {
	switch {
	case errors.Is(err, ErrVersionConflict):
		return "version_conflict"
	case errors.Is(err, ErrStreamArchived):
		return "stream_archived"
	case errors.Is(err, ErrAggregateNotFound):
		return "aggregate_not_found"
	case errors.Is(err, ErrUnknownEventVersion):
		return "event_schema_unknown_version"
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
func (e *VersionConflictError) Code() string { return "version_conflict" }

// Reason is the finer reason code.
func (e *VersionConflictError) Reason() string { return "event_version_conflict" }

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
func (e *UnknownEventVersionError) Code() string { return "event_schema_unknown_version" }

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

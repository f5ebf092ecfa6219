package eventstore

import (
	"encoding/json"
	"time"

	"github.com/google/uuid"
)

// SystemTenant holds streams that belong to no customer.
var SystemTenant = uuid.MustParse("00000000-0000-4000-8000-000000000000")

// AnyVersion as an expected version appends after whatever the stream holds
// (creating it when missing). The unique (aggregate_id, version) constraint
// still refuses a concurrent writer that got there first.
const AnyVersion = -1

// Stream addresses one aggregate's event stream within a tenant.
type Stream struct {
	TenantID      uuid.UUID
	AggregateType string
	// AggregateID of the stream. When zero on an append with expected version
	// 0, a UUIDv7 is minted and returned in the result.
	AggregateID uuid.UUID
}

// Metadata travels with every event. Empty fields are omitted when stored, so a
// round trip returns exactly what was written.
type Metadata struct {
	UserID         string            `json:"userId,omitempty"`
	RequestID      string            `json:"requestId,omitempty"`
	CorrelationID  string            `json:"correlationId,omitempty"`
	CausationID    string            `json:"causationId,omitempty"`
	IdempotencyKey string            `json:"idempotencyKey,omitempty"`
	Headers        map[string]string `json:"headers,omitempty"`
}

// NewEvent is an event to append.
type NewEvent struct {
	Type string
	// EventVersion is the payload schema generation; 0 means 1.
	EventVersion int
	// Payload must encode to a JSON object: a json.RawMessage or []byte is
	// used as is, anything else is marshalled with encoding/json.
	Payload  any
	Metadata Metadata
}

// Event is a stored event as read back: upcast to the current event version
// when an upcaster is configured.
type Event struct {
	// ID is the global position: ascending in allocation order, not
	// necessarily in commit order.
	ID            int64
	AggregateID   uuid.UUID
	AggregateType string
	TenantID      uuid.UUID
	Version       int
	Type          string
	EventVersion  int
	Payload       json.RawMessage
	Metadata      Metadata
	CreatedAt     time.Time
	CreatedBy     string

	// StoredEventVersion and StoredPayload are the row as written, before
	// upcasting. They equal EventVersion and Payload when nothing was upcast.
	StoredEventVersion int
	StoredPayload      json.RawMessage
}

// Upcasted reports whether reading changed the event from its stored form.
func (e Event) Upcasted() bool { return e.EventVersion != e.StoredEventVersion }

// AppendResult describes what an append wrote to one stream.
type AppendResult struct {
	AggregateID uuid.UUID
	// Version is the stream version after the append.
	Version int
	// Events are the appended events with their ids, versions and timestamps.
	Events []Event
}

// StreamAppend is one stream's part of a batch append.
type StreamAppend struct {
	Stream Stream
	// Expected is the version the stream must be at: 0 for a new stream,
	// AnyVersion to skip the check.
	Expected int
	Events   []NewEvent
}

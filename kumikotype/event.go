package kumikotype

import (
	"encoding/json"
	"slices"
	"time"

	"github.com/google/uuid"
)

// Stream addresses one aggregate's event stream within a tenant
// (eventstore.Stream is this type).
type Stream struct {
	TenantID      uuid.UUID
	AggregateType string
	// AggregateID of the stream. When zero on an append with expected version
	// 0, a UUIDv7 is minted and returned in the result.
	AggregateID uuid.UUID
}

// User is the caller a request runs as, from the verified token
// (feature.User is this type). The zero User is an anonymous caller.
type User struct {
	ID            string
	TenantID      uuid.UUID
	Roles         []string
	Authenticated bool
}

// HasRole reports whether u holds role (case-sensitive).
func (u User) HasRole(role string) bool { return slices.Contains(u.Roles, role) }

// Event is a stored event as read back, one record for the event store,
// the dispatcher and feature code alike (eventstore.Event and
// feature.Event are this type): upcast to the current version of its type
// when the store has an upcaster, so Payload has the current shape.
type Event struct {
	// ID is the global position in the event log: ascending in allocation
	// order, not necessarily in commit order.
	ID            int64
	AggregateID   uuid.UUID
	AggregateType string
	TenantID      uuid.UUID
	// Version is the event's 1-based position in its stream.
	Version int
	Type    string
	// EventVersion is the payload schema generation (after upcasting).
	EventVersion int
	// Payload is the JSON object of the event; see feature.Decode.
	Payload   json.RawMessage
	Metadata  Metadata
	CreatedAt time.Time
	CreatedBy string

	// StoredEventVersion and StoredPayload are the row as written, before
	// upcasting. They equal EventVersion and Payload when nothing was upcast.
	StoredEventVersion int
	StoredPayload      json.RawMessage
}

// Upcasted reports whether reading changed the event from its stored form.
func (e Event) Upcasted() bool { return e.EventVersion != e.StoredEventVersion }

// Metadata travels with every event. Empty fields are omitted when stored,
// so a round trip returns exactly what was written.
type Metadata struct {
	UserID         string            `json:"userId,omitempty"`
	RequestID      string            `json:"requestId,omitempty"`
	CorrelationID  string            `json:"correlationId,omitempty"`
	CausationID    string            `json:"causationId,omitempty"`
	IdempotencyKey string            `json:"idempotencyKey,omitempty"`
	Headers        map[string]string `json:"headers,omitempty"`
}

package feature

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/kumiko-go/kumiko/internal/spec"
)

// Event is a stored event as apply functions see it: upcast to the current
// version of its type, so Payload always has the current shape.
type Event struct {
	// ID is the global position in the event log.
	ID            int64
	AggregateID   uuid.UUID
	AggregateType string
	TenantID      uuid.UUID
	// Version is the event's 1-based position in its stream.
	Version int
	Type    string
	// EventVersion is the payload schema generation (after upcasting).
	EventVersion int
	// Payload is the JSON object of the event; see [Decode].
	Payload   json.RawMessage
	Metadata  Metadata
	CreatedAt time.Time
	CreatedBy string
}

// Metadata travels with every event. Its fields mirror the event store's, so
// the two convert into each other directly.
type Metadata struct {
	UserID         string            `json:"userId,omitempty"`
	RequestID      string            `json:"requestId,omitempty"`
	CorrelationID  string            `json:"correlationId,omitempty"`
	CausationID    string            `json:"causationId,omitempty"`
	IdempotencyKey string            `json:"idempotencyKey,omitempty"`
	Headers        map[string]string `json:"headers,omitempty"`
}

// Decode unmarshals e's payload into a T. It is lenient about fields T does
// not have, so a consumer may decode another feature's event into a struct
// holding just the fields it needs; payloads were validated when appended.
func Decode[T any](e Event) (T, error) {
	var v T
	if err := json.Unmarshal(e.Payload, &v); err != nil {
		return v, fmt.Errorf("decode %s event %d: %w", e.Type, e.ID, err)
	}
	return v, nil
}

// EventOption configures an event definition; see [EventVersion] and
// [MessageKey].
type EventOption struct {
	apply func(*spec.Event)
}

// EventVersion sets the event's current payload version (default 1). New
// events are stored with it; older stored payloads are upcast through the
// event's migrations, one per version step.
func EventVersion(n int) EventOption {
	return EventOption{func(d *spec.Event) { d.Version = n }}
}

// MessageKey names the payload field (its JSON name, at the top level)
// whose value is the ordering key of an integration event's messages: the
// messages of one key reach a handler declared with [Ordered] in publish
// order. Without it a message's key is the stream the publishing
// transaction last appended to, or the stream of the event a multi-stream
// projection reacts to. It is an option of [Registrar.IntegrationEvent]
// only.
func MessageKey(field string) EventOption {
	return EventOption{func(d *spec.Event) { d.Key = field }}
}

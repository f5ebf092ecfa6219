package feature

import (
	"encoding/json"
	"fmt"

	"github.com/kumiko-go/kumiko/internal/spec"
	"github.com/kumiko-go/kumiko/kumikotype"
)

// Event is a stored event as apply functions see it: upcast to the current
// version of its type, so Payload always has the current shape. It is the
// event store's record (eventstore.Event, kumikotype.Event), handed over
// without a copy.
type Event = kumikotype.Event

// Metadata travels with every event (eventstore.Metadata,
// kumikotype.Metadata).
type Metadata = kumikotype.Metadata

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

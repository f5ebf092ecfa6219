package feature

import (
	"encoding/json"
	"fmt"
	"slices"

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

// EventOption configures an event definition; see [EventVersion],
// [MessageKey], [Personal] and [SubjectField].
type EventOption struct {
	apply func(*spec.Event)
	// problem is a misuse found when the option was built; it fails the
	// boot of the event the option is given to.
	problem string
}

// EventVersion sets the event's current payload version (default 1). New
// events are stored with it; older stored payloads are upcast through the
// event's migrations, one per version step.
func EventVersion(n int) EventOption {
	return EventOption{apply: func(d *spec.Event) { d.Version = n }}
}

// MessageKey names the payload field (its JSON name, at the top level)
// whose value is the ordering key of an integration event's messages: the
// messages of one key reach a handler declared with [Ordered] in publish
// order. Without it a message's key is the stream the publishing
// transaction last appended to, or the stream of the event a multi-stream
// projection reacts to. It is an option of [Registrar.IntegrationEvent]
// only.
func MessageKey(field string) EventOption {
	return EventOption{apply: func(d *spec.Event) { d.Key = field }}
}

// Personal names payload fields (their JSON names, at the top level) that
// hold personal data. The framework encrypts their values in stored events
// with the data key of the event's data subject (see [SubjectField]), so
// forgetting the subject makes them unreadable. Personal may be given more
// than once; the names add up. The registry refuses an empty name, a name
// listed twice and a name that is not a top-level field of the payload. It
// is an option of [Registrar.DefineEvent] and [Registrar.IntegrationEvent].
func Personal(fields ...string) EventOption {
	fields = slices.Clone(fields)
	o := EventOption{apply: func(d *spec.Event) { d.Personal = append(d.Personal, fields...) }}
	if len(fields) == 0 {
		o.problem = "Personal needs at least one field name"
	}
	return o
}

// SubjectField names the payload field (its JSON name, at the top level)
// holding the id of the data subject the event's [Personal] fields belong
// to. Without it the subject of a domain event is the event's stream: its
// aggregate id; an integration event with Personal fields must name it (a
// message is a stream of its own). The registry refuses SubjectField
// without Personal, a name that is not a
// top-level field of the payload and a name that is itself one of the
// personal fields. It is an option of [Registrar.DefineEvent] and
// [Registrar.IntegrationEvent].
func SubjectField(field string) EventOption {
	o := EventOption{apply: func(d *spec.Event) { d.Subject = field }}
	if field == "" {
		o.problem = "SubjectField needs a field name; without it the subject is the event's stream"
	}
	return o
}

// SubjectForgottenEvent is the type of the event every forget of a data
// subject appends (see CommandContext.ForgetSubject), in the forget's
// transaction, to a stream of aggregate type SubjectAggregate of its own
// per subject; its payload is SubjectForgotten. An inline projection may
// apply it — it runs in the forget's transaction, whatever its Source — and
// so may a multi-stream projection, to remove or null the personal values
// they copied into their tables.
const SubjectForgottenEvent = "kumiko.subject.forgotten"

// SubjectAggregate is the aggregate type of the streams SubjectForgottenEvent
// is appended to.
const SubjectAggregate = "kumiko.subject"

// SubjectForgotten is the payload of SubjectForgottenEvent: the forgotten
// subject's id (in the event's tenant).
type SubjectForgotten struct {
	Subject string `json:"subject"`
}

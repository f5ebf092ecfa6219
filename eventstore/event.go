package eventstore

import (
	"github.com/google/uuid"

	"github.com/kumiko-go/kumiko/kumikotype"
)

// SystemTenant holds streams that belong to no customer.
var SystemTenant = uuid.MustParse("00000000-0000-4000-8000-000000000000")

// AnyVersion as an expected version appends after whatever the stream holds
// (creating it when missing). The unique (aggregate_id, version) constraint
// still refuses a concurrent writer that got there first.
const AnyVersion = -1

// Stream addresses one aggregate's event stream within a tenant. It is
// kumikotype's record.
type Stream = kumikotype.Stream

// Metadata travels with every event. Empty fields are omitted when stored, so a
// round trip returns exactly what was written. It is kumikotype's record,
// which feature.Metadata is too.
type Metadata = kumikotype.Metadata

// NewEvent is an event to append.
type NewEvent struct {
	Type string
	// EventVersion is the payload schema generation; 0 means 1.
	EventVersion int
	// Payload must encode to a JSON object: a json.RawMessage or []byte is
	// used as is, anything else is marshalled with encoding/json.
	Payload  any
	Metadata Metadata
	// Personal names the payload's personal fields (top-level JSON names)
	// and the data subject each belongs to; "" is the stream's own
	// aggregate id. The store seals them with the subject's data key
	// (created in the same transaction when the subject has none yet); a
	// field the payload lacks or holds null is left as it is. Reads open
	// them while the subject's key exists and show null once it is
	// forgotten (Store.ForgetSubjectTx). Needs Config.Keys.
	Personal map[string]string
}

// Event is a stored event as read back: upcast to the current event version
// when an upcaster is configured (see kumikotype.Event). feature.Event is
// the same type: what the store reads reaches feature code as it is.
type Event = kumikotype.Event

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

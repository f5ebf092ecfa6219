package feature

import (
	"encoding/json"
	"fmt"
	"reflect"
	"time"

	"github.com/google/uuid"

	"github.com/kumiko-go/kumiko/internal/spec"
)

// IntegrationEvent declares a contract: an event that leaves the app (to its
// own handlers and to other apps) once the transaction that published it
// commits. Sender and receiver declare the same contract, best from a shared
// package. The payload is a value of a Go struct type with `json` and
// `validate` tags, checked on publish; the name is lowercase and dotted
// (`order.shipped`) and shares its namespace with domain events and handlers.
// [EventVersion] sets the contract's version (default 1), which travels with
// every message. A receiver brings messages of older versions to its own
// through the contract's migrations, declared with [Registrar.EventMigration]
// next to the contract; a message of a newer version than it knows is kept
// dead, not guessed at, until an upgraded app retries it.
//
// Any feature of the app may publish it with CommandContext.Publish or
// ApplyContext.Publish.
func (r *Registrar) IntegrationEvent(name string, payload any, opts ...EventOption) {
	def := spec.Event{Name: name, Payload: reflect.TypeOf(payload), Version: 1}
	for _, o := range opts {
		if o.apply == nil {
			r.problem(item("integration event", name), "zero EventOption; use the feature option constructors")
			continue
		}
		if o.problem != "" {
			r.problem(item("integration event", name), "%s", o.problem)
		}
		o.apply(&def)
	}
	r.record(item("integration event", name), func(d *spec.Definitions) { d.Contracts = append(d.Contracts, def) })
}

// OnIntegrationEvent declares handler, called handlerName, for the
// integration event (a contract declared in the app). It runs once per
// message in a write transaction of its own — its writes commit together with
// the record that it handled the message, so a redelivered message skips it —
// as the publishing user in the publishing tenant, with the message's
// correlation id and the message id as causation. A failing handler is
// retried; it never holds back the other handlers of the message.
// handlerName is lowercase (letters, digits, '-', '_', '.') and unique among
// the app's integration handlers: renaming it runs it again for messages
// still in flight. With [Ordered] it handles the messages of one key in
// publish order.
func (r *Registrar) OnIntegrationEvent(event, handlerName string, handler func(ctx CommandContext, m Message) error, opts ...IntegrationOption) {
	def := spec.IntegrationHandler{Event: event, Name: handlerName}
	if handler != nil {
		def.Handle = handler
	}
	for _, o := range opts {
		if o.apply == nil {
			r.problem(item("integration handler", handlerName), "zero IntegrationOption; use the feature option constructors")
			continue
		}
		o.apply(&def)
	}
	r.record(item("integration handler", handlerName), func(d *spec.Definitions) {
		d.IntegrationHandlers = append(d.IntegrationHandlers, def)
	})
}

// IntegrationOption configures an integration handler; see [Ordered].
type IntegrationOption struct {
	apply func(*spec.IntegrationHandler)
}

// Ordered makes an integration handler handle the messages of one key (see
// [MessageKey]; by default the publishing stream) in publish order, across
// the app's instances, while the messages of other keys run in parallel. A
// failing message holds back the later messages of its key, and only
// those, until it is handled or kept dead; a message kept dead no longer
// holds its key back. Over RabbitMQ the app's ordered handlers share a
// queue of their own (<queue>.ordered) that one instance at a time
// consumes (the others stand by to take over); see
// docs/integration-events.md#ordered-handling.
func Ordered() IntegrationOption {
	return IntegrationOption{func(d *spec.IntegrationHandler) { d.Ordered = true }}
}

// Message is an integration event as a handler receives it.
type Message struct {
	// ID is stable across redeliveries and retries.
	ID uuid.UUID `json:"id"`
	// Type is the contract's name, Version the contract version of
	// Payload. A handler sees its app's version of the contract: a message
	// published with an older one is upcast through the contract's
	// migrations (see [Registrar.EventMigration]) before it runs.
	Type    string `json:"type"`
	Version int    `json:"version"`
	// PublishedVersion is the contract version the sender published with,
	// set when the message was upcast to Version.
	PublishedVersion int `json:"publishedVersion,omitempty"`
	// Payload is the JSON object published; see Decode.
	Payload json.RawMessage `json:"payload"`
	// TenantID, UserID and CorrelationID are the publisher's.
	TenantID      uuid.UUID `json:"tenantId"`
	UserID        string    `json:"userId,omitempty"`
	CorrelationID string    `json:"correlationId,omitempty"`
	// CausationID is what the publisher reacted to, when it did: an event
	// id, or another message's id.
	CausationID string `json:"causationId,omitempty"`
	// Key orders the messages for handlers declared with [Ordered]: the
	// value of the contract's [MessageKey] field, else the stream the
	// publisher wrote to; "" when there is none (the message is ordered
	// with no other).
	Key string `json:"key,omitempty"`
	// Headers are the publishing request's event headers (trace context
	// among them).
	Headers map[string]string `json:"headers,omitempty"`
	// PublishedAt is when the publishing transaction appended it.
	PublishedAt time.Time `json:"publishedAt"`
}

// Decode unmarshals the payload into v, leniently about fields v lacks.
func (m Message) Decode(v any) error {
	if err := json.Unmarshal(m.Payload, v); err != nil {
		return fmt.Errorf("decode %s message %s: %w", m.Type, m.ID, err)
	}
	return nil
}

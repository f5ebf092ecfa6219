package registry

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/kumiko-go/kumiko/eventstore"
)

// Upcast brings a stored payload of eventType at version to the type's
// current version, applying the declared migrations one step at a time
// (1→2→3…). It implements eventstore.Upcaster:
//   - an unknown event type, or a payload already at the current version,
//     passes through unchanged (the same slice);
//   - a version below 1 or above the current one (written by a newer build)
//     returns an *eventstore.UnknownEventVersionError;
//   - a payload that is not a JSON object, or a failing MapFunc, returns an
//     error naming the event type and versions.
//
// The input slice is never modified; an upcast payload is a new slice.
// Numbers keep their exact text through the migration.
func (r *Registry) Upcast(eventType string, version int, payload json.RawMessage) (int, json.RawMessage, error) {
	ev, ok := r.events[eventType]
	if !ok {
		return version, payload, nil
	}
	return upcast(eventType, version, ev.Version, ev.steps, payload)
}

// UpcastMessage brings the payload of an integration message published
// with version of the contract name to the contract's version in this app,
// through the migrations declared for the contract (as [Registry.Upcast]
// does for events). A message of a version newer than the app knows — its
// sender runs a newer release — returns an
// *eventstore.UnknownEventVersionError, never a guess; so does an unknown
// contract or a version below 1.
func (r *Registry) UpcastMessage(name string, version int, payload json.RawMessage) (int, json.RawMessage, error) {
	c, ok := r.contracts[name]
	if !ok {
		return version, payload, &eventstore.UnknownEventVersionError{Type: name, Version: version}
	}
	return upcast(name, version, c.Version, r.contractSteps[name], payload)
}

// upcast applies steps (steps[k-1] migrates k to k+1) to bring payload
// from version to current.
func upcast(name string, version, current int, steps []*migration, payload json.RawMessage) (int, json.RawMessage, error) {
	if version == current {
		return version, payload, nil
	}
	unknown := &eventstore.UnknownEventVersionError{Type: name, Version: version, Current: current}
	if version < 1 || version > current {
		return version, payload, unknown
	}
	for k := version; k < current; k++ {
		if k > len(steps) || steps[k-1] == nil {
			return version, payload, unknown
		}
	}
	obj, err := decodeUpcastObject(payload)
	if err != nil {
		return version, payload, fmt.Errorf("upcast %s from v%d: %w", name, version, err)
	}
	for k := version; k < current; k++ {
		for _, step := range steps[k-1].steps {
			if obj, err = step.Apply(obj); err != nil {
				return version, payload, fmt.Errorf("upcast %s v%d→v%d (%s): %w", name, k, k+1, step, err)
			}
		}
	}
	out, err := json.Marshal(obj)
	if err != nil {
		return version, payload, fmt.Errorf("upcast %s from v%d: encode result: %w", name, version, err)
	}
	return current, out, nil
}

// decodeUpcastObject decodes a stored payload into a fresh map, numbers as
// json.Number.
func decodeUpcastObject(payload []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.UseNumber()
	var obj map[string]any
	if err := dec.Decode(&obj); err != nil {
		return nil, fmt.Errorf("payload is not a JSON object: %w", err)
	}
	if obj == nil {
		return nil, errors.New("payload is not a JSON object: null")
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("payload has data after the JSON object")
	}
	return obj, nil
}

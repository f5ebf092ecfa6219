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
	if !ok || version == ev.Version {
		return version, payload, nil
	}
	unknown := &eventstore.UnknownEventVersionError{Type: eventType, Version: version, Current: ev.Version}
	if version < 1 || version > ev.Version {
		return version, payload, unknown
	}
	for k := version; k < ev.Version; k++ {
		if ev.steps[k-1] == nil {
			return version, payload, unknown
		}
	}
	obj, err := decodeUpcastObject(payload)
	if err != nil {
		return version, payload, fmt.Errorf("upcast %s from v%d: %w", eventType, version, err)
	}
	for k := version; k < ev.Version; k++ {
		for _, step := range ev.steps[k-1].steps {
			if obj, err = step.Apply(obj); err != nil {
				return version, payload, fmt.Errorf("upcast %s v%d→v%d (%s): %w", eventType, k, k+1, step, err)
			}
		}
	}
	out, err := json.Marshal(obj)
	if err != nil {
		return version, payload, fmt.Errorf("upcast %s from v%d: encode result: %w", eventType, version, err)
	}
	return ev.Version, out, nil
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

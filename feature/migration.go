package feature

import (
	"encoding/json"
	"fmt"
	"reflect"

	"github.com/kumiko-go/kumiko/internal/spec"
)

// MigrationStep is one declarative operation of an event migration, applied
// to the payload's top-level JSON object. Numbers in the object are
// json.Number values, so no precision is lost on the way through. Build steps
// with [Rename], [DefaultValue], [Drop] and [MapFunc].
type MigrationStep struct {
	step spec.Step
}

// Rename moves field from to field to. Absent from leaves the payload as it
// is; when both exist, from's value replaces to's.
func Rename(from, to string) MigrationStep { return MigrationStep{spec.Rename(from, to)} }

// DefaultValue sets field to value when the field is absent (a present null
// stays null). value must encode to JSON; each payload gets a fresh copy.
func DefaultValue(field string, value any) MigrationStep {
	return MigrationStep{spec.DefaultValue(field, value)}
}

// Drop removes field.
func Drop(field string) MigrationStep { return MigrationStep{spec.Drop(field)} }

// MapFunc transforms the whole object, for what the declarative steps cannot
// express (nested fields, computed values). fn may modify and return its
// argument; returning nil or an error fails the read of the event. fn must be
// deterministic: it runs on every read, rebuild and delivery.
func MapFunc(fn func(obj map[string]any) (map[string]any, error)) MigrationStep {
	return MigrationStep{spec.MapFunc(fn)}
}

// MapAs is MapFunc with types: the object is decoded into From (through its
// JSON, as Decode reads a payload), fn turns it into To, and To's JSON
// object is the result. Fields neither type names are dropped, so From and
// To describe the whole payload of the versions they read and write. A
// payload that does not decode into From, and a To that does not encode to
// a JSON object, fail the read of the event, as fn's error does.
//
//	r.EventMigration("customer.moved", 1, 2, feature.MapAs(splitAddress))
func MapAs[From, To any](fn func(From) (To, error)) MigrationStep {
	if fn == nil {
		return MapFunc(nil)
	}
	return MapFunc(func(obj map[string]any) (map[string]any, error) {
		raw, err := json.Marshal(obj)
		if err != nil {
			return nil, err
		}
		var from From
		if err := json.Unmarshal(raw, &from); err != nil {
			return nil, fmt.Errorf("decode into %s: %w", reflect.TypeFor[From](), err)
		}
		to, err := fn(from)
		if err != nil {
			return nil, err
		}
		if raw, err = json.Marshal(to); err != nil {
			return nil, fmt.Errorf("encode %s: %w", reflect.TypeFor[To](), err)
		}
		var out map[string]any
		if err := spec.UnmarshalNumbers(raw, &out); err != nil || out == nil {
			return nil, fmt.Errorf("%s does not encode to a JSON object", reflect.TypeFor[To]())
		}
		return out, nil
	})
}

// Err reports a step that was built wrong (empty names, nil function, a
// default that does not encode); the registry refuses such a migration.
func (s MigrationStep) Err() error { return s.step.Err() }

// String describes the step, e.g. `rename "by" → "completedBy"`.
func (s MigrationStep) String() string { return s.step.String() }

// Apply runs the step on obj, which it may modify, and returns the result. A
// panic inside a MapFunc is returned as an error.
func (s MigrationStep) Apply(obj map[string]any) (map[string]any, error) {
	return s.step.Apply(obj)
}

package spec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// Step is one declarative operation of an event migration, applied to the
// payload's top-level JSON object, as built by feature.Rename,
// feature.DefaultValue, feature.Drop and feature.MapFunc. Numbers in the
// object are json.Number values, so no precision is lost on the way through.
type Step struct {
	op       string
	from, to string
	value    json.RawMessage
	fn       func(map[string]any) (map[string]any, error)
	err      error
}

// Rename moves field from to field to. Absent from leaves the payload as it
// is; when both exist, from's value replaces to's.
func Rename(from, to string) Step {
	s := Step{op: "rename", from: from, to: to}
	switch {
	case from == "" || to == "":
		s.err = errors.New("Rename needs two field names")
	case from == to:
		s.err = fmt.Errorf("Rename(%q, %q) renames a field to itself", from, to)
	}
	return s
}

// DefaultValue sets field to value when the field is absent (a present null
// stays null). value must encode to JSON; each payload gets a fresh copy.
func DefaultValue(field string, value any) Step {
	s := Step{op: "default", to: field}
	if field == "" {
		s.err = errors.New("DefaultValue needs a field name")
		return s
	}
	raw, err := json.Marshal(value)
	if err != nil {
		s.err = fmt.Errorf("DefaultValue(%q): value does not encode to JSON: %w", field, err)
		return s
	}
	s.value = raw
	return s
}

// Drop removes field.
func Drop(field string) Step {
	s := Step{op: "drop", from: field}
	if field == "" {
		s.err = errors.New("Drop needs a field name")
	}
	return s
}

// MapFunc transforms the whole object, for what the declarative steps cannot
// express (nested fields, computed values). fn may modify and return its
// argument; returning nil or an error fails the read of the event. fn must be
// deterministic: it runs on every read, rebuild and delivery.
func MapFunc(fn func(obj map[string]any) (map[string]any, error)) Step {
	s := Step{op: "map", fn: fn}
	if fn == nil {
		s.err = errors.New("MapFunc needs a function")
	}
	return s
}

// Err reports a step that was built wrong (empty names, nil function, a
// default that does not encode); the registry refuses such a migration.
func (s Step) Err() error {
	if s.op == "" {
		return errors.New("zero MigrationStep; use Rename, DefaultValue, Drop or MapFunc")
	}
	return s.err
}

// String describes the step, e.g. `rename "by" → "completedBy"`.
func (s Step) String() string {
	switch s.op {
	case "rename":
		return fmt.Sprintf("rename %q → %q", s.from, s.to)
	case "default":
		return fmt.Sprintf("default %q = %s", s.to, s.value)
	case "drop":
		return fmt.Sprintf("drop %q", s.from)
	case "map":
		return "map func"
	}
	return "invalid step"
}

// Apply runs the step on obj, which it may modify, and returns the result. A
// panic inside a MapFunc is returned as an error.
func (s Step) Apply(obj map[string]any) (out map[string]any, err error) {
	if err := s.Err(); err != nil {
		return nil, err
	}
	if obj == nil {
		return nil, errors.New("migration step applied to a nil object")
	}
	switch s.op {
	case "rename":
		if v, ok := obj[s.from]; ok {
			delete(obj, s.from)
			obj[s.to] = v
		}
		return obj, nil
	case "default":
		if _, ok := obj[s.to]; !ok {
			var v any
			if err := UnmarshalNumbers(s.value, &v); err != nil {
				return nil, err
			}
			obj[s.to] = v
		}
		return obj, nil
	case "drop":
		delete(obj, s.from)
		return obj, nil
	}
	defer func() {
		if p := recover(); p != nil {
			out, err = nil, fmt.Errorf("migration map func panicked: %v", p)
		}
	}()
	out, err = s.fn(obj)
	if err != nil {
		return nil, fmt.Errorf("migration map func: %w", err)
	}
	if out == nil {
		return nil, errors.New("migration map func returned a nil object")
	}
	return out, nil
}

// UnmarshalNumbers decodes JSON keeping numbers as json.Number, as
// migration steps see them.
func UnmarshalNumbers(raw []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	return dec.Decode(v)
}

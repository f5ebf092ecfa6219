package feature

import "github.com/kumiko-go/kumiko/internal/spec"

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

// Package codec is the registry's payload codec: it decodes and validates
// event payloads and handler inputs from JSON (Go struct types through their
// json and validate tags, CRUD payloads through the entity's fields),
// reports every problem with its JSON path, and describes each payload as a
// JSON Schema (invopop/jsonschema plus what the validate tags say).
//
// A Codec learns the struct types at boot, through Analyze, and is only read
// afterwards, so it is safe for concurrent decoding once the registry is
// built.
package codec

import (
	"encoding/json"
	"fmt"
	"reflect"

	"github.com/go-playground/validator/v10"

	"github.com/kumiko-go/kumiko/internal/spec"
)

// Codec decodes and describes payloads of the struct types it analysed.
type Codec struct {
	structs      map[reflect.Type]*structInfo
	typeProblems map[reflect.Type][]problem // analysed types, boot only
	validate     *validator.Validate
}

// New returns an empty Codec.
func New() *Codec {
	return &Codec{
		structs:      map[reflect.Type]*structInfo{},
		typeProblems: map[reflect.Type][]problem{},
		validate:     validator.New(validator.WithRequiredStructEnabled()),
	}
}

// StructPayload checks Go type t as the payload of an event or the input of
// a handler (what names it in problems: "payload", "input"), learns every
// struct type reachable from it and returns the Payload with its JSON
// Schema. It returns nil and every problem, as sentences, when t is unusable:
// nil, not a struct or a pointer to one, decoding itself, holding
// unsupported kinds, ambiguous JSON names, invalid validate tags or slices of
// tagged structs without dive. Boot only.
func (c *Codec) StructPayload(t reflect.Type, what string) (*Payload, []string) {
	if t == nil {
		return nil, []string{what + " is nil; pass a value of its struct type (struct{}{} for none)"}
	}
	base := deref(t)
	if base.Kind() != reflect.Struct || (t.Kind() == reflect.Pointer && t.Elem().Kind() == reflect.Pointer) {
		return nil, []string{fmt.Sprintf("%s must be a struct or a pointer to a struct, not %s", what, t)}
	}
	if opaque(base) {
		return nil, []string{fmt.Sprintf("%s type %s decodes itself; use a plain struct with json tags", what, t)}
	}
	var problems []string
	for _, p := range c.analyze(base, "") {
		problems = append(problems, fmt.Sprintf("%s type %s: %s", what, t, p))
	}
	if len(problems) > 0 {
		return nil, problems
	}
	schema, err := c.structSchema(base)
	if err != nil {
		return nil, []string{fmt.Sprintf("%s type %s: %v", what, t, err)}
	}
	return &Payload{Kind: Struct, Type: t, Schema: schema}, nil
}

// Kind is how a payload is decoded.
type Kind int

// Payload kinds.
const (
	Struct  Kind = iota // a Go payload or input type
	Create              // <entity>.create
	Update              // <entity>.update
	ID                  // <entity>.delete, .restore
	Detail              // <entity>.detail
	List                // <entity>.list
	Created             // <entity>.created
	Updated             // <entity>.updated
	Empty               // <entity>.deleted, .restored
	Search              // <entity>.search
)

// Payload decodes and describes the payload of one event or handler type.
type Payload struct {
	Kind Kind
	// Type is the Go type Decode returns: the author's type, or the CRUD
	// input type of Create, Update, ID, Detail and List; nil for CRUD events.
	Type reflect.Type
	// Entity is set for CRUD kinds.
	Entity *Entity
	// Schema is the JSON Schema (draft 2020-12) of the payload.
	Schema json.RawMessage
}

// Entity is what decoding needs of an entity, or of a projection's table
// (Table). It is shared with the registry and never changed after boot.
type Entity struct {
	Name string
	// Fields by JSON name, defaults normalised. A table's are its columns
	// but tenant_id; one whose type is no field type's (an array, a date,
	// json…) has the zero Type: it shows in rows but filters nothing.
	Fields map[string]spec.Field
	// Names are the field names, sorted.
	Names      []string
	SoftDelete bool
	// Table marks a projection's table: its rows are its columns, with no
	// id, version or timestamps of the framework's.
	Table bool
}

package registry

import (
	"encoding/json"
	"fmt"

	"github.com/kumiko-go/kumiko/registry/internal/codec"
)

// List limits of CRUD list queries.
const (
	DefaultListLimit = codec.DefaultListLimit
	MaxListLimit     = codec.MaxListLimit
)

// Limits of a search's query text (see feature.Registrar.Search): at most
// MaxSearchText bytes; only its first MaxSearchWords words are looked for.
const (
	MaxSearchText  = codec.MaxSearchText
	MaxSearchWords = codec.MaxSearchWords
)

// MaxVersion is the largest stream version a client may send as the version
// it last saw (2147483646): one below the largest value of the integer
// version column, so that the version a write appends still fits. Larger
// versions are refused at decoding, with field code "max".
const MaxVersion = codec.MaxVersion

// The decoded payloads of CRUD handlers, as DecodePayload returns them.
type (
	// CreateInput is the decoded payload of <entity>.create: the entity's
	// fields plus an optional client-chosen id.
	CreateInput = codec.CreateInput
	// UpdateInput is the decoded payload of <entity>.update:
	// {"id","version","changes"}.
	UpdateInput = codec.UpdateInput
	// IDInput is the decoded payload of <entity>.delete and
	// <entity>.restore: {"id","version"?}.
	IDInput = codec.IDInput
	// DetailInput is the decoded payload of <entity>.detail.
	DetailInput = codec.DetailInput
	// ListInput is the decoded payload of <entity>.list.
	ListInput = codec.ListInput
	// SearchInput is the decoded payload of <entity>.search.
	SearchInput = codec.SearchInput
	// SortKey is one ordering key of a list.
	SortKey = codec.SortKey
)

// DecodePayload decodes and validates the payload of an event type or the
// input of a handler. For Go payload types it returns a new value of that
// type (a T, or a *T when the type was declared as a pointer); for CRUD
// handlers a CreateInput, UpdateInput, IDInput, DetailInput or ListInput; for
// CRUD events a normalised map[string]any. Empty input and null read as {}.
//
// Problems of the payload (malformed JSON, unknown fields, wrong types,
// failed validate tags, entity rules) are returned together as a
// *ValidationError with JSON paths; a name the registry does not know wraps
// ErrUnknownType. The pipeline must store what this returns (re-encoded),
// never the raw input, and must not store anything when it fails.
func (r *Registry) DecodePayload(name string, raw json.RawMessage) (any, error) {
	p, ok := r.payloads[name]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownType, name)
	}
	return r.codec.Decode(p, raw)
}

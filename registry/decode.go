package registry

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/internal/spec"
)

// List limits of CRUD list queries.
const (
	DefaultListLimit = 50
	MaxListLimit     = 200
)

// CreateInput is the decoded payload of <entity>.create: the entity's fields
// plus an optional client-chosen id.
type CreateInput struct {
	// ID is the client's UUID, or uuid.Nil: mint a UUIDv7.
	ID uuid.UUID
	// Fields are normalised, with defaults applied (see ValidateEntityInput).
	Fields map[string]any
}

// UpdateInput is the decoded payload of <entity>.update:
// {"id","version","changes"}.
type UpdateInput struct {
	ID uuid.UUID
	// Version is the stream version the client last saw (≥ 1); a stale one
	// is a version conflict.
	Version int
	// Changes are the normalised changed fields, at least one.
	Changes map[string]any
}

// IDInput is the decoded payload of <entity>.delete and <entity>.restore:
// {"id","version"?}.
type IDInput struct {
	ID uuid.UUID
	// Version is the stream version the client last saw, or 0 when it sent
	// none. A given version is checked like an update's: a stale one is a
	// version conflict and nothing is written.
	Version int
}

// DetailInput is the decoded payload of <entity>.detail.
type DetailInput struct {
	ID uuid.UUID
	// AsOf asks for the state at that time; zero = now.
	AsOf time.Time
}

// ListInput is the decoded payload of <entity>.list.
type ListInput struct {
	// Limit is 1…MaxListLimit (DefaultListLimit when absent).
	Limit int
	// Cursor is the opaque keyset cursor of the previous page ("" = first).
	Cursor string
	// Filter are equality conditions by field name ("id" included), with
	// normalised values; a nil value means IS NULL.
	Filter map[string]any
	// Sort keys, in order, at most MaxSortKeys, each field once; each is a
	// sortable field, id, createdAt or updatedAt.
	Sort []SortKey
	// IncludeDeleted lists soft-deleted rows too (soft-delete entities only).
	IncludeDeleted bool
	// AsOf asks for the rows as they were at that time; zero = now. Like
	// every timestamp it lies in years 1 to 9999 (see ParseTime).
	AsOf time.Time
}

// SortKey is one ordering key of a list.
type SortKey struct {
	// Field is a JSON field name; its column is feature.ColumnName(Field).
	Field string
	Desc  bool
}

type codecKind int

const (
	codecStruct  codecKind = iota // a Go payload or input type
	codecCreate                   // <entity>.create
	codecUpdate                   // <entity>.update
	codecID                       // <entity>.delete, .restore
	codecDetail                   // <entity>.detail
	codecList                     // <entity>.list
	codecCreated                  // <entity>.created
	codecUpdated                  // <entity>.updated
	codecEmpty                    // <entity>.deleted, .restored
)

// codec decodes and describes the payload of one event or handler type.
type codec struct {
	kind   codecKind
	typ    reflect.Type
	entity *Entity
	schema json.RawMessage
}

var crudInputTypes = map[codecKind]reflect.Type{
	codecCreate: reflect.TypeFor[CreateInput](),
	codecUpdate: reflect.TypeFor[UpdateInput](),
	codecID:     reflect.TypeFor[IDInput](),
	codecDetail: reflect.TypeFor[DetailInput](),
	codecList:   reflect.TypeFor[ListInput](),
}

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
	c, ok := r.codecs[name]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownType, name)
	}
	if hasNULEscape(raw) {
		// PostgreSQL cannot store U+0000 in text or jsonb.
		return nil, invalid(FieldError{Path: "", Code: "invalid_character", Message: "text must not contain the NUL character (\\u0000)"})
	}
	if c.kind == codecStruct {
		return r.decodeStruct(c.typ, raw)
	}
	obj, verr := parseObject(raw)
	if verr != nil {
		return nil, verr
	}
	out, errs := c.decodeCrud(obj)
	if !errs.empty() {
		return nil, errs.err()
	}
	return out, nil
}

func (c *codec) decodeCrud(obj map[string]any) (any, problems) {
	e := c.entity
	var errs problems
	fail := errs.fail
	only := func(allowed ...string) {
		for _, k := range slices.Sorted(maps.Keys(obj)) {
			if !slices.Contains(allowed, k) {
				fail(joinKey("", k), "unknown_field", "is not a known field")
			}
		}
	}
	id := func(required bool) uuid.UUID {
		v, given := obj["id"]
		if !given || v == nil {
			if required {
				fail("id", "required", "is required")
			}
			return uuid.Nil
		}
		parsed, ok := toUUID(v)
		if !ok || parsed == uuid.Nil {
			fail("id", "type", "must be a non-nil UUID")
		}
		return parsed
	}
	// version reads a stream version: an integer from 1 to the largest
	// int4, the width of the version column; 0 when absent.
	version := func(required bool) int {
		switch v := obj["version"].(type) {
		case nil:
			if required {
				fail("version", "required", "is required")
			}
		case json.Number:
			n, err := v.Int64()
			switch {
			case err != nil:
				fail("version", "type", "must be an integer")
			case n > math.MaxInt32:
				fail("version", "max", "must be at most 2147483647")
			case n < 1:
				fail("version", "min", "must be at least 1")
			default:
				return int(n)
			}
		default:
			fail("version", "type", "must be an integer")
		}
		return 0
	}
	asOf := func() time.Time {
		v, given := obj["asOf"]
		if !given || v == nil {
			return time.Time{}
		}
		t, code, msg := parseAsOf(v)
		if code != "" {
			fail("asOf", code, msg)
		}
		return t
	}

	switch c.kind {
	case codecCreate:
		in := CreateInput{ID: id(false)}
		fields := maps.Clone(obj)
		delete(fields, "id")
		var ferrs problems
		in.Fields, ferrs = e.validateFields(feature.VerbCreate, fields, "")
		errs.merge(ferrs)
		return in, errs
	case codecCreated:
		out, ferrs := e.validateFields(feature.VerbCreate, obj, "")
		return out, ferrs
	case codecUpdated:
		out, ferrs := e.validateFields(feature.VerbUpdate, obj, "")
		return out, ferrs
	case codecEmpty:
		only()
		return map[string]any{}, errs
	case codecID:
		only("id", "version")
		return IDInput{ID: id(true), Version: version(false)}, errs
	case codecDetail:
		only("id", "asOf")
		return DetailInput{ID: id(true), AsOf: asOf()}, errs
	case codecUpdate:
		only("id", "version", "changes")
		in := UpdateInput{ID: id(true)}
		in.Version = version(true)
		switch ch := obj["changes"].(type) {
		case nil:
			fail("changes", "required", "is required")
		case map[string]any:
			if len(ch) == 0 {
				fail("changes", "required", "must change at least one field")
				break
			}
			var ferrs problems
			in.Changes, ferrs = e.validateFields(feature.VerbUpdate, ch, "changes")
			errs.merge(ferrs)
		default:
			fail("changes", "type", "must be an object")
		}
		return in, errs
	case codecList:
		return c.decodeList(obj)
	}
	fail("", "type", "cannot be decoded")
	return nil, errs
}

func (c *codec) decodeList(obj map[string]any) (any, problems) {
	e := c.entity
	var errs problems
	fail := errs.fail
	in := ListInput{Limit: DefaultListLimit}
	for _, k := range slices.Sorted(maps.Keys(obj)) {
		v := obj[k]
		if v == nil {
			continue
		}
		switch k {
		case "limit":
			n, ok := v.(json.Number)
			i, err := n.Int64()
			switch {
			case !ok || err != nil:
				fail(k, "type", "must be an integer")
			case i < 1:
				fail(k, "min", "must be at least 1")
			case i > MaxListLimit:
				fail(k, "max", fmt.Sprintf("must be at most %d", MaxListLimit))
			default:
				in.Limit = int(i)
			}
		case "cursor":
			s, ok := v.(string)
			if !ok {
				fail(k, "type", "must be a string")
			}
			in.Cursor = s
		case "includeDeleted":
			if !e.def.SoftDelete {
				fail(k, "unknown_field", "is only known for soft-delete entities")
				continue
			}
			b, ok := v.(bool)
			if !ok {
				fail(k, "type", "must be a boolean")
			}
			in.IncludeDeleted = b
		case "asOf":
			t, code, msg := parseAsOf(v)
			if code != "" {
				fail(k, code, msg)
			}
			in.AsOf = t
		case "filter":
			f, ok := v.(map[string]any)
			if !ok {
				fail(k, "type", "must be an object")
				continue
			}
			in.Filter = map[string]any{}
			for _, name := range slices.Sorted(maps.Keys(f)) {
				path := joinKey("filter", name)
				fs, ok := e.def.Fields[name]
				if name == "id" {
					fs, ok = spec.Field{Type: spec.TypeUUID}, true
				}
				if !ok {
					fail(path, "unknown_field", "is not a field of "+e.name)
					continue
				}
				if f[name] == nil {
					in.Filter[name] = nil
					continue
				}
				fs.MaxLen = 0 // a filter value may be anything the column could hold
				nv, code, msg := normalizeValue(fs, f[name])
				if code != "" {
					fail(path, code, msg)
					continue
				}
				in.Filter[name] = nv
			}
		case "sort":
			keys, ok := v.([]any)
			if !ok {
				fail(k, "type", "must be an array")
				continue
			}
			if len(keys) > MaxSortKeys {
				fail(k, "max", fmt.Sprintf("must have at most %d keys", MaxSortKeys))
				continue
			}
			for i, kv := range keys {
				path := joinIndex("sort", i)
				m, ok := kv.(map[string]any)
				if !ok {
					fail(path, "type", "must be an object")
					continue
				}
				var key SortKey
				for _, mk := range slices.Sorted(maps.Keys(m)) {
					switch mk {
					case "field":
						key.Field, _ = m[mk].(string)
					case "desc":
						if m[mk] != nil {
							if key.Desc, ok = m[mk].(bool); !ok {
								fail(path+".desc", "type", "must be a boolean")
							}
						}
					default:
						fail(joinKey(path, mk), "unknown_field", "is not a known field")
					}
				}
				fs, known := e.def.Fields[key.Field]
				switch {
				case key.Field == "":
					fail(path+".field", "required", "is required")
				case key.Field == "id" || key.Field == "createdAt" || key.Field == "updatedAt":
				case !known:
					fail(path+".field", "unknown_field", "is not a field of "+e.name)
					continue
				case !fs.Sortable:
					fail(path+".field", "not_sortable", "is not a sortable field")
					continue
				}
				if slices.ContainsFunc(in.Sort, func(s SortKey) bool { return s.Field == key.Field }) {
					fail(path+".field", "duplicate", "is already a sort key")
					continue
				}
				in.Sort = append(in.Sort, key)
			}
		default:
			fail(joinKey("", k), "unknown_field", "is not a known field")
		}
	}
	return in, errs
}

// hasNULEscape reports whether raw JSON holds the escape \u0000 (a raw NUL
// byte is invalid JSON already). A backslash that is itself escaped does not
// start an escape.
func hasNULEscape(raw []byte) bool {
	for i := 0; ; {
		j := bytes.Index(raw[i:], []byte(`\u0000`))
		if j < 0 {
			return false
		}
		at := i + j
		n := 0
		for k := at; k >= 0 && raw[k] == '\\'; k-- {
			n++
		}
		if n%2 == 1 {
			return true
		}
		i = at + 1
	}
}

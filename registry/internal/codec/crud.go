package codec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/google/uuid"

	"github.com/kumiko-go/kumiko/internal/spec"
	"github.com/kumiko-go/kumiko/kumikotype"
)

// List limits of CRUD list queries.
const (
	DefaultListLimit = 50
	MaxListLimit     = 200
)

// Limits of a search's query text: bytes, and the words it is split into.
const (
	MaxSearchText  = 500
	MaxSearchWords = 16
)

// MaxVersion is the largest stream version a client may send as the
// version it last saw: one below the largest int4, the width of the version
// column, so that the version the write appends (+1) still fits the column.
// Every version from 1 to MaxVersion is safe to subtract 1 from as well.
const MaxVersion = math.MaxInt32 - 1

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

// SearchInput is the decoded payload of <name>.search, an entity's or a
// projection's.
type SearchInput struct {
	// Q is the text searched for: 1 to MaxSearchText bytes with a letter or
	// digit.
	Q string
	// Limit is 1…MaxListLimit (DefaultListLimit when absent).
	Limit int
	// Cursor is the opaque cursor of the previous page ("" = first).
	Cursor string
	// Filter are equality conditions as a list's; a projection's by its
	// columns' JSON names.
	Filter map[string]any
}

// SortKey is one ordering key of a list.
type SortKey struct {
	// Field is a JSON field name; its column is spec.ColumnName(Field).
	Field string
	Desc  bool
}

var crudInputTypes = map[Kind]reflect.Type{
	Create: reflect.TypeFor[CreateInput](),
	Update: reflect.TypeFor[UpdateInput](),
	ID:     reflect.TypeFor[IDInput](),
	Detail: reflect.TypeFor[DetailInput](),
	List:   reflect.TypeFor[ListInput](),
	Search: reflect.TypeFor[SearchInput](),
}

// CrudPayload is the payload of a CRUD handler or event of kind k on entity
// e, with its hand-built schema.
func CrudPayload(e *Entity, k Kind) (*Payload, error) {
	schema, err := crudSchema(e, k)
	return &Payload{Kind: k, Type: crudInputTypes[k], Entity: e, Schema: schema}, err
}

// Decode decodes and validates raw as a payload of p; see
// registry.DecodePayload for what it returns.
func (c *Codec) Decode(p *Payload, raw json.RawMessage) (any, error) {
	if hasNULEscape(raw) {
		// PostgreSQL cannot store U+0000 in text or jsonb.
		return nil, invalid(FieldError{Path: "", Code: string(kumikotype.FieldCodeInvalidCharacter), Message: "text must not contain the NUL character (\\u0000)"})
	}
	if p.Kind == Struct {
		return c.decodeStruct(p.Type, raw)
	}
	obj, verr := parseObject(raw)
	if verr != nil {
		return nil, verr
	}
	out, errs := decodeCrud(p.Kind, p.Entity, obj)
	if !errs.empty() {
		return nil, errs.err()
	}
	return out, nil
}

// crudObject reads the members of a CRUD payload object that several kinds
// share, collecting their problems.
type crudObject struct {
	obj  map[string]any
	errs problems
}

// only refuses every member not in allowed.
func (o *crudObject) only(allowed ...string) {
	for _, k := range slices.Sorted(maps.Keys(o.obj)) {
		if !slices.Contains(allowed, k) {
			o.errs.fail(joinKey("", k), kumikotype.FieldCodeUnknownField, "is not a known field")
		}
	}
}

// id reads "id": a non-nil UUID; uuid.Nil when absent.
func (o *crudObject) id(required bool) uuid.UUID {
	v, given := o.obj["id"]
	if !given || v == nil {
		if required {
			o.errs.fail("id", kumikotype.FieldCodeRequired, "is required")
		}
		return uuid.Nil
	}
	parsed, ok := toUUID(v)
	if !ok || parsed == uuid.Nil {
		o.errs.fail("id", kumikotype.FieldCodeType, "must be a non-nil UUID")
	}
	return parsed
}

// version reads a stream version: an integer from 1 to MaxVersion; 0 when
// absent.
func (o *crudObject) version(required bool) int {
	v := o.obj["version"]
	if v == nil {
		if required {
			o.errs.fail("version", kumikotype.FieldCodeRequired, "is required")
		}
		return 0
	}
	n, ok := boundedInt(v, "version", 1, MaxVersion, versionMaxMessage, &o.errs)
	if !ok {
		return 0
	}
	return n
}

// boundedInt reads a JSON integer from lo to hi at path; false, with a
// problem, when v is no integer ("type": a fraction, an exponent, a string)
// or lies outside the bounds ("min", "max", however large: an integer past
// int64 is out of range, not mistyped). maxMsg explains hi.
func boundedInt(v any, path string, lo, hi int64, maxMsg string, errs *problems) (int, bool) {
	num, ok := v.(json.Number)
	if !ok {
		errs.fail(path, kumikotype.FieldCodeType, "must be an integer")
		return 0, false
	}
	n, err := num.Int64()
	tooSmall := n < lo
	if errors.Is(err, strconv.ErrRange) {
		err, tooSmall = nil, strings.HasPrefix(num.String(), "-")
		n = hi + 1
	}
	switch {
	case err != nil:
		errs.fail(path, kumikotype.FieldCodeType, "must be an integer")
	case tooSmall:
		errs.fail(path, kumikotype.FieldCodeMin, fmt.Sprintf("must be at least %d", lo))
	case n > hi:
		errs.fail(path, kumikotype.FieldCodeMax, maxMsg)
	default:
		return int(n), true
	}
	return 0, false
}

var versionMaxMessage = fmt.Sprintf("must be at most %d (the next version must fit the version column)", MaxVersion)

// asOf reads "asOf"; the zero time when absent.
func (o *crudObject) asOf() time.Time {
	v, given := o.obj["asOf"]
	if !given || v == nil {
		return time.Time{}
	}
	t, code, msg := parseAsOf(v)
	if code != "" {
		o.errs.fail("asOf", code, msg)
	}
	return t
}

// changes reads the "changes" of an update: at least one field.
func (o *crudObject) changes(e *Entity) map[string]any {
	switch ch := o.obj["changes"].(type) {
	case nil:
		o.errs.fail("changes", kumikotype.FieldCodeRequired, "is required")
	case map[string]any:
		if len(ch) == 0 {
			o.errs.fail("changes", kumikotype.FieldCodeRequired, "must change at least one field")
			break
		}
		out, ferrs := validateFields(e, false, ch, "changes")
		o.errs.merge(ferrs)
		return out
	default:
		o.errs.fail("changes", kumikotype.FieldCodeType, "must be an object")
	}
	return nil
}

func decodeCrud(kind Kind, e *Entity, obj map[string]any) (any, problems) {
	o := &crudObject{obj: obj}
	switch kind {
	case Create:
		in := CreateInput{ID: o.id(false)}
		fields := maps.Clone(obj)
		delete(fields, "id")
		var ferrs problems
		in.Fields, ferrs = validateFields(e, true, fields, "")
		o.errs.merge(ferrs)
		return in, o.errs
	case Created:
		return validateFields(e, true, obj, "")
	case Updated:
		return validateFields(e, false, obj, "")
	case Empty:
		o.only()
		return map[string]any{}, o.errs
	case ID:
		o.only("id", "version")
		return IDInput{ID: o.id(true), Version: o.version(false)}, o.errs
	case Detail:
		o.only("id", "asOf")
		return DetailInput{ID: o.id(true), AsOf: o.asOf()}, o.errs
	case Update:
		o.only("id", "version", "changes")
		in := UpdateInput{ID: o.id(true)}
		in.Version = o.version(true)
		in.Changes = o.changes(e)
		return in, o.errs
	case List:
		return decodeList(e, obj)
	case Search:
		return decodeSearch(e, obj)
	}
	o.errs.fail("", kumikotype.FieldCodeType, "cannot be decoded")
	return nil, o.errs
}

func decodeList(e *Entity, obj map[string]any) (any, problems) {
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
			in.Limit = listLimit(v, &errs)
		case "cursor":
			s, ok := v.(string)
			if !ok {
				fail(k, kumikotype.FieldCodeType, "must be a string")
			}
			in.Cursor = s
		case "includeDeleted":
			if !e.SoftDelete {
				fail(k, kumikotype.FieldCodeUnknownField, "is only known for soft-delete entities")
				continue
			}
			b, ok := v.(bool)
			if !ok {
				fail(k, kumikotype.FieldCodeType, "must be a boolean")
			}
			in.IncludeDeleted = b
		case "asOf":
			t, code, msg := parseAsOf(v)
			if code != "" {
				fail(k, code, msg)
			}
			in.AsOf = t
		case "filter":
			in.Filter = listFilter(e, v, &errs)
		case "sort":
			in.Sort = listSort(e, v, &errs)
		default:
			fail(joinKey("", k), kumikotype.FieldCodeUnknownField, "is not a known field")
		}
	}
	return in, errs
}

func decodeSearch(e *Entity, obj map[string]any) (any, problems) {
	var errs problems
	in := SearchInput{Limit: DefaultListLimit}
	if obj["q"] == nil {
		errs.fail("q", kumikotype.FieldCodeRequired, "is required")
	}
	for _, k := range slices.Sorted(maps.Keys(obj)) {
		v := obj[k]
		if v == nil {
			continue
		}
		switch k {
		case "q":
			s, ok := v.(string)
			switch {
			case !ok:
				errs.fail(k, kumikotype.FieldCodeType, "must be a string")
			case len(s) > MaxSearchText:
				errs.fail(k, kumikotype.FieldCodeMax, fmt.Sprintf("must be at most %d bytes", MaxSearchText))
			case !hasWord(s):
				errs.fail(k, kumikotype.FieldCodeRequired, "must hold a letter or a digit")
			}
			in.Q = s
		case "limit":
			in.Limit = listLimit(v, &errs)
		case "cursor":
			s, ok := v.(string)
			if !ok {
				errs.fail(k, kumikotype.FieldCodeType, "must be a string")
			}
			in.Cursor = s
		case "filter":
			in.Filter = listFilter(e, v, &errs)
		default:
			errs.fail(joinKey("", k), kumikotype.FieldCodeUnknownField, "is not a known field")
		}
	}
	return in, errs
}

// hasWord reports whether s holds a letter or a digit: something a search
// can look for.
func hasWord(s string) bool {
	return strings.IndexFunc(s, func(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) }) >= 0
}

// listLimit reads a list's "limit"; DefaultListLimit when it does not fit.
func listLimit(v any, errs *problems) int {
	n, ok := boundedInt(v, "limit", 1, MaxListLimit, fmt.Sprintf("must be at most %d", MaxListLimit), errs)
	if !ok {
		return DefaultListLimit
	}
	return n
}

// listFilter reads a list's or a search's "filter": equality conditions on
// the entity's fields and id, or on a table's columns, normalised like
// field values (a nil value means IS NULL).
func listFilter(e *Entity, v any, errs *problems) map[string]any {
	f, ok := v.(map[string]any)
	if !ok {
		errs.fail("filter", kumikotype.FieldCodeType, "must be an object")
		return nil
	}
	out := map[string]any{}
	for _, name := range slices.Sorted(maps.Keys(f)) {
		path := joinKey("filter", name)
		fs, ok := e.Fields[name]
		if name == "id" && !e.Table {
			fs, ok = spec.Field{Type: spec.TypeUUID}, true
		}
		switch {
		case !ok && e.Table:
			errs.fail(path, kumikotype.FieldCodeUnknownField, "is not a column of "+e.Name)
			continue
		case !ok:
			errs.fail(path, kumikotype.FieldCodeUnknownField, "is not a field of "+e.Name)
			continue
		case fs.Type == "":
			errs.fail(path, kumikotype.FieldCodeType, "is a column of a type a filter cannot compare")
			continue
		}
		if f[name] == nil {
			out[name] = nil
			continue
		}
		fs.MaxLen = 0 // a filter value may be anything the column could hold
		nv, code, msg := NormalizeValue(fs, f[name])
		if code != "" {
			errs.fail(path, code, msg)
			continue
		}
		out[name] = nv
	}
	return out
}

// listSort reads a list's "sort": at most MaxSortKeys keys, each a sortable
// field, id, createdAt or updatedAt, each once.
func listSort(e *Entity, v any, errs *problems) []SortKey {
	keys, ok := v.([]any)
	if !ok {
		errs.fail("sort", kumikotype.FieldCodeType, "must be an array")
		return nil
	}
	if len(keys) > MaxSortKeys {
		errs.fail("sort", kumikotype.FieldCodeMax, fmt.Sprintf("must have at most %d keys", MaxSortKeys))
		return nil
	}
	var out []SortKey
	for i, kv := range keys {
		path := joinIndex("sort", i)
		key, ok := sortKey(kv, path, errs)
		if !ok {
			continue
		}
		fs, known := e.Fields[key.Field]
		switch {
		case key.Field == "":
			errs.fail(path+".field", kumikotype.FieldCodeRequired, "is required")
		case key.Field == "id" || key.Field == "createdAt" || key.Field == "updatedAt":
		case !known:
			errs.fail(path+".field", kumikotype.FieldCodeUnknownField, "is not a field of "+e.Name)
			continue
		case !fs.Sortable:
			errs.fail(path+".field", kumikotype.FieldCodeNotSortable, "is not a sortable field")
			continue
		}
		if slices.ContainsFunc(out, func(s SortKey) bool { return s.Field == key.Field }) {
			errs.fail(path+".field", kumikotype.FieldCodeDuplicate, "is already a sort key")
			continue
		}
		out = append(out, key)
	}
	return out
}

// sortKey reads one {"field","desc"} object of a list's sort at path; false
// when it is not an object.
func sortKey(v any, path string, errs *problems) (SortKey, bool) {
	m, ok := v.(map[string]any)
	if !ok {
		errs.fail(path, kumikotype.FieldCodeType, "must be an object")
		return SortKey{}, false
	}
	var key SortKey
	for _, mk := range slices.Sorted(maps.Keys(m)) {
		switch mk {
		case "field":
			key.Field, _ = m[mk].(string)
		case "desc":
			if m[mk] != nil {
				if key.Desc, ok = m[mk].(bool); !ok {
					errs.fail(path+".desc", kumikotype.FieldCodeType, "must be a boolean")
				}
			}
		default:
			errs.fail(joinKey(path, mk), kumikotype.FieldCodeUnknownField, "is not a known field")
		}
	}
	return key, true
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

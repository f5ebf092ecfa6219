// Package structmap fills a struct of a feature author's from a map of
// values by name: an entity's state (field values by JSON name) or a
// projection row (column values by JSON name), as the framework hands them
// over. It is what feature.StateAs, feature.RowsAs and feature.RowAs run.
//
// A struct field is matched by its json tag's name, else by its Go name
// compared case-insensitively ("Title" matches "title"); a json tag of "-"
// and unexported fields are left alone. Every matched field must have its
// value in the map, and every value must fit its field:
//
//   - string: a string (text, enum, a UUID or timestamp as its text).
//   - bool: a bool.
//   - integers: an integer of any width or an integral number, in range.
//   - float32, float64: any number.
//   - time.Time: a time.Time or an RFC 3339 string.
//   - uuid.UUID (or any [16]byte): a UUID string or 16 bytes.
//   - json.RawMessage: any value, as its JSON.
//   - any: the value as it is.
//   - maps, slices and structs: the value's JSON decoded into them (JSON
//     fields).
//   - a pointer to any of these: nil for NULL, else the value.
//
// A NULL (nil) value needs a pointer, interface, map, slice or
// json.RawMessage field; otherwise it is an error naming the field, as a
// mistyped value is.
//
// The package imports nothing of kumiko.
package structmap

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"time"

	"github.com/google/uuid"
)

// Plan is how a struct type is filled: its fields by the names they take.
// Make one with For and use it for any number of maps.
type Plan struct {
	typ    reflect.Type
	fields []field
}

type field struct {
	Field
	index []int
}

// For returns the plan of struct type t; an error when t is no struct.
func For(t reflect.Type) (*Plan, error) {
	if t.Kind() != reflect.Struct {
		return nil, fmt.Errorf("%s is not a struct type", t)
	}
	p := &Plan{typ: t}
	for i := range t.NumField() {
		sf := t.Field(i)
		if !sf.IsExported() {
			continue
		}
		name := ""
		if tag, ok := sf.Tag.Lookup("json"); ok {
			name, _, _ = strings.Cut(tag, ",")
			if name == "-" {
				continue
			}
		}
		p.fields = append(p.fields, field{Field: Field{GoName: sf.Name, Name: name, Type: sf.Type}, index: sf.Index})
	}
	return p, nil
}

// lookup finds f's value in m.
func (f field) lookup(m map[string]any) (any, bool) {
	if f.Name != "" {
		v, ok := m[f.Name]
		return v, ok
	}
	if v, ok := m[f.GoName]; ok {
		return v, true
	}
	for k, v := range m {
		if f.Takes(k) {
			return v, true
		}
	}
	return nil, false
}

// Fill sets the fields of dst, a pointer to a struct of the plan's type,
// from m. what names the map in errors ("row", "state").
func (p *Plan) Fill(dst any, m map[string]any, what string) error {
	rv := reflect.ValueOf(dst)
	if rv.Kind() != reflect.Pointer || rv.Elem().Type() != p.typ {
		return fmt.Errorf("fill: %T is not a *%s", dst, p.typ)
	}
	s := rv.Elem()
	for _, f := range p.fields {
		v, ok := f.lookup(m)
		if !ok {
			return fmt.Errorf("%s field %s: the %s has no %q", p.typ, f.GoName, what, f.Label())
		}
		if err := Set(s.FieldByIndex(f.index), v); err != nil {
			return fmt.Errorf("%s field %s: the %s's %q %w", p.typ, f.GoName, what, f.Label(), err)
		}
	}
	return nil
}

var (
	timeType = reflect.TypeFor[time.Time]()
	rawType  = reflect.TypeFor[json.RawMessage]()
	uuidType = reflect.TypeFor[[16]byte]()
)

// errNull is the error of a NULL for a field that cannot hold one.
var errNull = errors.New("is NULL: declare the field as a pointer to hold it")

// Set sets dst (settable) to v converted as the package doc says; the
// error reads after the value's name ("is NULL: …", "is a string, not …").
func Set(dst reflect.Value, v any) error {
	t := dst.Type()
	switch {
	case t == rawType:
		if v == nil {
			dst.SetZero()
			return nil
		}
		b, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("cannot be encoded as JSON: %w", err)
		}
		dst.SetBytes(b)
		return nil
	case t.Kind() == reflect.Pointer:
		if v == nil {
			dst.SetZero()
			return nil
		}
		elem := reflect.New(t.Elem())
		if err := Set(elem.Elem(), v); err != nil {
			return err
		}
		dst.Set(elem)
		return nil
	case t.Kind() == reflect.Interface:
		if v == nil {
			dst.SetZero()
			return nil
		}
		rv := reflect.ValueOf(v)
		if !rv.Type().AssignableTo(t) {
			return mismatch(v, t)
		}
		dst.Set(rv)
		return nil
	case v == nil:
		if t.Kind() == reflect.Map || t.Kind() == reflect.Slice {
			dst.SetZero()
			return nil
		}
		return errNull
	case t == timeType:
		return setTime(dst, v)
	case t.ConvertibleTo(uuidType) && t.Kind() == reflect.Array:
		return setUUID(dst, v)
	}
	switch t.Kind() {
	case reflect.String:
		s, ok := v.(string)
		if !ok {
			return mismatch(v, t)
		}
		dst.SetString(s)
	case reflect.Bool:
		b, ok := v.(bool)
		if !ok {
			return mismatch(v, t)
		}
		dst.SetBool(b)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n, ok := integer(v)
		if !ok {
			return mismatch(v, t)
		}
		if dst.OverflowInt(n) {
			return fmt.Errorf("is %d, out of the range of %s", n, t)
		}
		dst.SetInt(n)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		n, ok := integer(v)
		if !ok {
			return mismatch(v, t)
		}
		if n < 0 || dst.OverflowUint(uint64(n)) {
			return fmt.Errorf("is %d, out of the range of %s", n, t)
		}
		dst.SetUint(uint64(n))
	case reflect.Float32, reflect.Float64:
		f, ok := float(v)
		if !ok {
			return mismatch(v, t)
		}
		if dst.OverflowFloat(f) {
			return fmt.Errorf("is %g, out of the range of %s", f, t)
		}
		dst.SetFloat(f)
	case reflect.Map, reflect.Slice, reflect.Struct, reflect.Array:
		b, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("cannot be encoded as JSON: %w", err)
		}
		ptr := reflect.New(t)
		if err := json.Unmarshal(b, ptr.Interface()); err != nil {
			return fmt.Errorf("%s does not decode into %s: %w", describe(v), t, err)
		}
		dst.Set(ptr.Elem())
	default:
		return mismatch(v, t)
	}
	return nil
}

func setTime(dst reflect.Value, v any) error {
	switch x := v.(type) {
	case time.Time:
		dst.Set(reflect.ValueOf(x))
	case string:
		t, err := time.Parse(time.RFC3339Nano, x)
		if err != nil {
			return fmt.Errorf("is the string %q, not an RFC 3339 time", x)
		}
		dst.Set(reflect.ValueOf(t))
	default:
		return mismatch(v, dst.Type())
	}
	return nil
}

func setUUID(dst reflect.Value, v any) error {
	var id [16]byte
	switch x := v.(type) {
	case string:
		u, err := uuid.Parse(x)
		if err != nil {
			return fmt.Errorf("is the string %q, not a UUID", x)
		}
		id = u
	case [16]byte:
		id = x
	case uuid.UUID:
		id = x
	default:
		return mismatch(v, dst.Type())
	}
	dst.Set(reflect.ValueOf(id).Convert(dst.Type()))
	return nil
}

// integer is v as an int64 when v is an integer or an integral number.
func integer(v any) (int64, bool) {
	switch x := v.(type) {
	case int:
		return int64(x), true
	case int8:
		return int64(x), true
	case int16:
		return int64(x), true
	case int32:
		return int64(x), true
	case int64:
		return x, true
	case uint8:
		return int64(x), true
	case uint16:
		return int64(x), true
	case uint32:
		return int64(x), true
	case uint64:
		return int64(x), x <= math.MaxInt64
	case json.Number:
		n, err := x.Int64()
		if err == nil {
			return n, true
		}
		f, err := x.Float64()
		return integral(f, err == nil)
	case float64:
		return integral(x, true)
	case float32:
		return integral(float64(x), true)
	}
	return 0, false
}

func integral(f float64, ok bool) (int64, bool) {
	if !ok || f != math.Trunc(f) || f < math.MinInt64 || f >= math.MaxInt64 {
		return 0, false
	}
	return int64(f), true
}

// float is v as a float64 when v is a number.
func float(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, true
	case float32:
		return float64(x), true
	case json.Number:
		f, err := x.Float64()
		return f, err == nil
	}
	if n, ok := integer(v); ok {
		return float64(n), true
	}
	return 0, false
}

func mismatch(v any, t reflect.Type) error {
	return fmt.Errorf("is %s, which a field of type %s cannot hold", describe(v), t)
}

// describe names v's kind for errors without echoing long values.
func describe(v any) string {
	switch x := v.(type) {
	case string:
		if len(x) > 40 {
			x = x[:40] + "…"
		}
		return fmt.Sprintf("the string %q", x)
	case bool:
		return fmt.Sprintf("the bool %t", x)
	case json.Number:
		return "the number " + x.String()
	case float64, float32, int, int8, int16, int32, int64, uint8, uint16, uint32, uint64:
		return fmt.Sprintf("the number %v (%T)", x, x)
	case map[string]any:
		return "a JSON object"
	case []any:
		return "a JSON array"
	}
	return fmt.Sprintf("a %T", v)
}

// Field is one field of a plan, as a boot check sees it.
type Field struct {
	// GoName is the field's Go name.
	GoName string
	// Name is the json tag's name, or "" when the field is matched by its
	// Go name, case-insensitively.
	Name string
	Type reflect.Type
}

// Fields lists the plan's fields in declaration order.
func (p *Plan) Fields() []Field {
	out := make([]Field, len(p.fields))
	for i, f := range p.fields {
		out[i] = f.Field
	}
	return out
}

// Label is the name f is matched by: its json tag's, or its Go name.
func (f Field) Label() string {
	if f.Name != "" {
		return f.Name
	}
	return f.GoName
}

// Takes reports whether f takes the value named key.
func (f Field) Takes(key string) bool {
	if f.Name != "" {
		return f.Name == key
	}
	return strings.EqualFold(f.GoName, key)
}

// Kind is what a value handed over can be, as far as a struct field's type
// must fit it: the kinds of the entity field types and of column types.
type Kind int

// The kinds of values.
const (
	// Text is a string: text, enum.
	Text Kind = iota + 1
	// Number is any number: numeric, real, double precision.
	Number
	// Integer is an integer column: smallint, integer, bigint.
	Integer
	// Bool is a boolean.
	Bool
	// Time is a timestamp (handed over as its RFC 3339 text).
	Time
	// UUID is a UUID (handed over as its text).
	UUID
	// JSON is any JSON value: jsonb, json.
	JSON
)

// ColumnKind is the kind of the values of a column of PostgreSQL type
// sqlType; false for a type it does not know (a check skips the column).
func ColumnKind(sqlType string) (Kind, bool) {
	t := strings.ToLower(strings.TrimSpace(sqlType))
	if i := strings.IndexByte(t, '('); i >= 0 {
		t = strings.TrimSpace(t[:i])
	}
	switch t {
	case "text", "varchar", "character varying", "char", "character", "citext", "name":
		return Text, true
	case "smallint", "integer", "int", "bigint", "int2", "int4", "int8", "serial", "bigserial", "smallserial":
		return Integer, true
	case "numeric", "decimal", "real", "double precision", "float4", "float8":
		return Number, true
	case "boolean", "bool":
		return Bool, true
	case "timestamptz", "timestamp", "timestamp with time zone", "timestamp without time zone", "date":
		return Time, true
	case "uuid":
		return UUID, true
	case "jsonb", "json":
		return JSON, true
	}
	return 0, false
}

// Holds reports whether a field of Go type t can hold values of kind k
// (Set then converts them; an integer field may still refuse a number
// with a fraction, out of range, at run time).
func Holds(t reflect.Type, k Kind) bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t == rawType || (t.Kind() == reflect.Interface && t.NumMethod() == 0):
		return true
	case t == timeType:
		return k == Time
	case t.Kind() == reflect.Array && t.ConvertibleTo(uuidType):
		return k == UUID
	}
	switch t.Kind() {
	case reflect.String:
		return k == Text || k == Time || k == UUID
	case reflect.Bool:
		return k == Bool
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		return k == Number || k == Integer
	case reflect.Map, reflect.Slice, reflect.Struct, reflect.Array:
		return k == JSON
	}
	return false
}

package registry

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/internal/spec"
)

// ErrUnknownEntity is returned (wrapped) for a name that is not an entity.
var ErrUnknownEntity = errors.New("unknown entity")

// ValidateEntityInput checks entity field values for verb "create" or
// "update" and returns them normalised to their JSON-native form (the form
// stored in events and folded into state): text and enum as string, number as
// float64, bool, timestamp as an RFC 3339 UTC string with microsecond
// precision, uuid and reference as a canonical lowercase UUID string, json as
// decoded JSON. The input map is not modified.
//
// Create applies defaults to absent (or null) fields and requires the
// required ones; update checks only the given fields and refuses clearing a
// required one. Unknown fields, wrong types, over-long text and values
// outside an enum are reported together as a *ValidationError, the only kind
// of error besides an unknown entity or verb.
func (r *Registry) ValidateEntityInput(entity string, verb feature.CrudVerb, fields map[string]any) (map[string]any, error) {
	e, ok := r.entities[entity]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownEntity, entity)
	}
	if verb != feature.VerbCreate && verb != feature.VerbUpdate {
		return nil, fmt.Errorf("validate entity input: verb %q; want create or update", verb)
	}
	out, errs := e.validateFields(verb, fields, "")
	if !errs.empty() {
		return nil, errs.err()
	}
	return out, nil
}

// validateFields is ValidateEntityInput with the paths of problems prefixed
// by prefix.
func (e *Entity) validateFields(verb feature.CrudVerb, fields map[string]any, prefix string) (map[string]any, problems) {
	out := make(map[string]any, len(e.names))
	var errs problems
	fail := func(name, code, msg string) { errs.fail(joinKey(prefix, name), code, msg) }
	for _, name := range slices.Sorted(maps.Keys(fields)) {
		fs, ok := e.def.Fields[name]
		if !ok {
			fail(name, "unknown_field", "is not a field of "+e.name)
			continue
		}
		v := fields[name]
		if v == nil {
			switch {
			case verb == feature.VerbCreate && fs.HasDefault:
				// filled in below
			case fs.Required && verb == feature.VerbUpdate:
				fail(name, "required", "is required and cannot be cleared")
			case fs.Required:
				fail(name, "required", "is required")
			default:
				out[name] = nil
			}
			continue
		}
		nv, code, msg := normalizeValue(fs, v)
		if code != "" {
			fail(name, code, msg)
			continue
		}
		if fs.Required && nv == "" {
			fail(name, "required", "is required")
			continue
		}
		out[name] = nv
	}
	if verb == feature.VerbCreate {
		for _, name := range e.names {
			if fields[name] != nil {
				continue
			}
			fs := e.def.Fields[name]
			switch {
			case fs.HasDefault:
				out[name] = cloneJSONValue(fs.Default)
			case fs.Required:
				if _, given := fields[name]; !given {
					fail(name, "required", "is required")
				}
			}
		}
	}
	slices.SortStableFunc(errs.fields, func(a, b FieldError) int { return strings.Compare(a.Path, b.Path) })
	return out, errs
}

// normalizeValue checks v against the field and returns its JSON-native form,
// or a problem code and message.
func normalizeValue(fs spec.Field, v any) (out any, code, msg string) {
	switch fs.Type {
	case spec.TypeText:
		s, ok := v.(string)
		if !ok {
			return nil, "type", "must be a string"
		}
		if fs.MaxLen > 0 && utf8.RuneCountInString(s) > fs.MaxLen {
			return nil, "max", fmt.Sprintf("must be at most %d characters", fs.MaxLen)
		}
		return s, "", ""
	case spec.TypeNumber:
		f, ok := toFloat(v)
		if !ok {
			return nil, "type", "must be a number"
		}
		return f, "", ""
	case spec.TypeBool:
		b, ok := v.(bool)
		if !ok {
			return nil, "type", "must be a boolean"
		}
		return b, "", ""
	case spec.TypeEnum:
		s, ok := v.(string)
		if !ok {
			return nil, "type", "must be a string"
		}
		if !slices.Contains(fs.Enum, s) {
			return nil, "oneof", "must be one of: " + strings.Join(fs.Enum, ", ")
		}
		return s, "", ""
	case spec.TypeTimestamp:
		t, code, msg := parseTime(v)
		if code != "" {
			return nil, code, msg
		}
		return t.Format(time.RFC3339Nano), "", ""
	case spec.TypeUUID, spec.TypeReference:
		id, ok := toUUID(v)
		if !ok {
			return nil, "type", "must be a UUID"
		}
		return id.String(), "", ""
	case spec.TypeJSON:
		raw, err := json.Marshal(v)
		if err != nil {
			return nil, "type", "must be a JSON value"
		}
		var out any
		if err := json.Unmarshal(raw, &out); err != nil {
			return nil, "type", "must be a JSON value"
		}
		return out, "", ""
	}
	return nil, "type", "has a field type the registry does not know"
}

func toFloat(v any) (float64, bool) {
	var f float64
	switch n := v.(type) {
	case float64:
		f = n
	case float32:
		f = float64(n)
	case int:
		f = float64(n)
	case int8:
		f = float64(n)
	case int16:
		f = float64(n)
	case int32:
		f = float64(n)
	case int64:
		f = float64(n)
	case uint:
		f = float64(n)
	case uint8:
		f = float64(n)
	case uint16:
		f = float64(n)
	case uint32:
		f = float64(n)
	case uint64:
		f = float64(n)
	case json.Number:
		var err error
		if f, err = strconv.ParseFloat(n.String(), 64); err != nil {
			return 0, false
		}
	default:
		return 0, false
	}
	return f, !math.IsNaN(f) && !math.IsInf(f, 0)
}

func toTime(v any) (time.Time, bool) {
	switch t := v.(type) {
	case time.Time:
		return t, true
	case *time.Time:
		if t == nil {
			return time.Time{}, false
		}
		return *t, true
	case string:
		p, err := time.Parse(time.RFC3339Nano, t)
		return p, err == nil
	}
	return time.Time{}, false
}

func toUUID(v any) (uuid.UUID, bool) {
	switch id := v.(type) {
	case uuid.UUID:
		return id, true
	case string:
		if len(id) != 36 {
			return uuid.Nil, false // only the canonical 8-4-4-4-12 form
		}
		p, err := uuid.Parse(id)
		return p, err == nil
	}
	return uuid.Nil, false
}

// cloneJSONValue copies a JSON-native value so callers cannot change the
// registry's copy.
func cloneJSONValue(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = cloneJSONValue(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = cloneJSONValue(e)
		}
		return out
	}
	return v
}

func cloneSpec(s spec.Field) spec.Field {
	s.Enum = slices.Clone(s.Enum)
	s.ReadRoles = slices.Clone(s.ReadRoles)
	s.WriteRoles = slices.Clone(s.WriteRoles)
	s.Problems = slices.Clone(s.Problems)
	return s
}

// entityTable is the default read table of an entity.
func entityTable(def spec.Entity, names []string) feature.TableDef {
	t := feature.TableDef{
		Name: def.Table,
		Columns: []feature.Column{
			{Name: "id", Type: "uuid", NotNull: true},
			{Name: "tenant_id", Type: "uuid", NotNull: true},
			{Name: "version", Type: "integer", NotNull: true},
		},
		PrimaryKey: []string{"id"},
	}
	for _, name := range names {
		fs := def.Fields[name]
		col := feature.ColumnName(name)
		t.Columns = append(t.Columns, feature.Column{Name: col, Type: fs.Type.ColumnType(), NotNull: fs.Required})
		if fs.Unique {
			t.Indexes = append(t.Indexes, feature.Index{Columns: []string{"tenant_id", col}, Unique: true})
		}
		if fs.Sortable {
			t.Indexes = append(t.Indexes, feature.Index{Columns: []string{"tenant_id", col, "id"}})
		}
	}
	t.Columns = append(t.Columns,
		feature.Column{Name: "created_at", Type: "timestamptz", NotNull: true},
		feature.Column{Name: "updated_at", Type: "timestamptz", NotNull: true},
	)
	if def.SoftDelete {
		t.Columns = append(t.Columns, feature.Column{Name: "deleted_at", Type: "timestamptz"})
	}
	t.Indexes = append(t.Indexes, feature.Index{Columns: []string{"tenant_id", "created_at", "id"}})
	return t
}

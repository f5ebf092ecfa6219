package codec

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/kumiko-go/kumiko/internal/spec"
	"github.com/kumiko-go/kumiko/kumikotype"
)

// ValidateFields checks entity field values for verb create or update and
// returns them normalised; see registry.ValidateEntityInput.
func ValidateFields(e *Entity, create bool, fields map[string]any) (map[string]any, error) {
	out, errs := validateFields(e, create, fields, "")
	if !errs.empty() {
		return nil, errs.err()
	}
	return out, nil
}

// validateFields is ValidateFields with the paths of problems prefixed by
// prefix.
func validateFields(e *Entity, create bool, fields map[string]any, prefix string) (map[string]any, problems) {
	out := make(map[string]any, len(e.Names))
	var errs problems
	fail := func(name string, code kumikotype.FieldCode, msg string) { errs.fail(joinKey(prefix, name), code, msg) }
	for _, name := range slices.Sorted(maps.Keys(fields)) {
		fs, ok := e.Fields[name]
		if !ok {
			fail(name, kumikotype.FieldCodeUnknownField, "is not a field of "+e.Name)
			continue
		}
		v := fields[name]
		if v == nil {
			switch {
			case create && fs.HasDefault:
				// filled in below
			case fs.Required && !create:
				fail(name, kumikotype.FieldCodeRequired, "is required and cannot be cleared")
			case fs.Required:
				fail(name, kumikotype.FieldCodeRequired, "is required")
			default:
				out[name] = nil
			}
			continue
		}
		nv, code, msg := NormalizeValue(fs, v)
		if code != "" {
			fail(name, code, msg)
			continue
		}
		if fs.Required && nv == "" {
			fail(name, kumikotype.FieldCodeRequired, "is required")
			continue
		}
		out[name] = nv
	}
	if create {
		for _, name := range e.Names {
			if fields[name] != nil {
				continue
			}
			fs := e.Fields[name]
			switch {
			case fs.HasDefault:
				out[name] = CloneJSONValue(fs.Default)
			case fs.Required:
				if _, given := fields[name]; !given {
					fail(name, kumikotype.FieldCodeRequired, "is required")
				}
			}
		}
	}
	slices.SortStableFunc(errs.fields, func(a, b FieldError) int { return strings.Compare(a.Path, b.Path) })
	return out, errs
}

// NormalizeValue checks v against the field and returns its JSON-native form,
// or a problem code and message.
func NormalizeValue(fs spec.Field, v any) (out any, code kumikotype.FieldCode, msg string) {
	switch fs.Type {
	case spec.TypeText:
		s, ok := v.(string)
		if !ok {
			return nil, kumikotype.FieldCodeType, "must be a string"
		}
		if fs.MaxLen > 0 && utf8.RuneCountInString(s) > fs.MaxLen {
			return nil, kumikotype.FieldCodeMax, fmt.Sprintf("must be at most %d characters", fs.MaxLen)
		}
		return s, "", ""
	case spec.TypeNumber:
		f, ok := toFloat(v)
		if !ok {
			return nil, kumikotype.FieldCodeType, "must be a number"
		}
		return f, "", ""
	case spec.TypeBool:
		b, ok := v.(bool)
		if !ok {
			return nil, kumikotype.FieldCodeType, "must be a boolean"
		}
		return b, "", ""
	case spec.TypeEnum:
		s, ok := v.(string)
		if !ok {
			return nil, kumikotype.FieldCodeType, "must be a string"
		}
		if !slices.Contains(fs.Enum, s) {
			return nil, kumikotype.FieldCodeOneOf, "must be one of: " + strings.Join(fs.Enum, ", ")
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
			return nil, kumikotype.FieldCodeType, "must be a UUID"
		}
		return id.String(), "", ""
	case spec.TypeJSON:
		raw, err := json.Marshal(v)
		if err != nil {
			return nil, kumikotype.FieldCodeType, "must be a JSON value"
		}
		var out any
		if err := json.Unmarshal(raw, &out); err != nil {
			return nil, kumikotype.FieldCodeType, "must be a JSON value"
		}
		return out, "", ""
	}
	return nil, kumikotype.FieldCodeType, "has a field type the registry does not know"
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

// CloneJSONValue copies a JSON-native value so callers cannot change the
// registry's copy.
func CloneJSONValue(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = CloneJSONValue(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = CloneJSONValue(e)
		}
		return out
	}
	return v
}

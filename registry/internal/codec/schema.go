package codec

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/invopop/jsonschema"

	"github.com/kumiko-go/kumiko/internal/spec"
)

const schemaVersion = "https://json-schema.org/draft/2020-12/schema"

var unsafeNameRe = regexp.MustCompile(`[^A-Za-z0-9_.-]+`)

// TypeSchema is the JSON Schema of values of Go type t, such as a typed
// handler's result, reflected as payload schemas are.
func (c *Codec) TypeSchema(t reflect.Type) (json.RawMessage, error) {
	return c.structSchema(t)
}

// structSchema reflects the JSON Schema of payload type t with invopop, then
// adds what the validate tags say (required, lengths, bounds, enums, formats),
// so the schema and the validation agree.
func (c *Codec) structSchema(t reflect.Type) (out json.RawMessage, err error) {
	defer func() {
		if p := recover(); p != nil {
			out, err = nil, fmt.Errorf("JSON Schema reflection failed: %v", p)
		}
	}()
	base := deref(t)
	names := map[reflect.Type]string{}
	taken := map[string]bool{}
	namer := func(t reflect.Type) string {
		if t.Name() == "" {
			return ""
		}
		if n, ok := names[t]; ok {
			return n
		}
		n := unsafeNameRe.ReplaceAllString(t.Name(), "_")
		for i := 2; taken[n]; i++ {
			n = unsafeNameRe.ReplaceAllString(t.Name(), "_") + "_" + strconv.Itoa(i)
		}
		names[t], taken[n] = n, true
		return n
	}
	r := &jsonschema.Reflector{
		ExpandedStruct:             true,
		RequiredFromJSONSchemaTags: true,
		Anonymous:                  true,
		Namer:                      namer,
		Mapper:                     schemaMapper,
	}
	s := r.ReflectFromType(base)
	if s.Definitions == nil {
		s.Definitions = jsonschema.Definitions{}
	}
	rootRef := "#/$defs/" + namer(base)
	raw, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	if base.Name() != "" && bytes.Contains(raw, []byte(`"`+rootRef+`"`)) {
		// A recursive root refers to itself: keep a definition to point at.
		def := *s
		def.Definitions, def.Version = nil, ""
		s.Definitions[namer(base)] = &def
	}
	c.annotate(base, s, s.Definitions, map[*jsonschema.Schema]bool{})
	if len(s.Definitions) == 0 {
		s.Definitions = nil
	}
	return json.Marshal(s)
}

func schemaMapper(t reflect.Type) *jsonschema.Schema {
	if t == uuidType {
		return &jsonschema.Schema{Type: "string", Format: "uuid"}
	}
	if t == timeType || t == rawMessageType {
		return nil
	}
	if _, ok := t.MethodByName("JSONSchema"); ok {
		return nil
	}
	if opaque(t) {
		if t.Implements(textUnmarshalerType) || reflect.PointerTo(t).Implements(textUnmarshalerType) {
			return &jsonschema.Schema{Type: "string"}
		}
		return &jsonschema.Schema{} // decodes itself: any JSON value
	}
	return nil
}

func resolve(node *jsonschema.Schema, defs jsonschema.Definitions) *jsonschema.Schema {
	for node != nil && node.Ref != "" {
		name, ok := strings.CutPrefix(node.Ref, "#/$defs/")
		if !ok {
			return nil
		}
		node = defs[name]
	}
	return node
}

// annotate walks Go type t and its schema node together, adding required
// properties and constraints from validate tags.
func (c *Codec) annotate(t reflect.Type, node *jsonschema.Schema, defs jsonschema.Definitions, seen map[*jsonschema.Schema]bool) {
	t = deref(t)
	node = resolve(node, defs)
	if node == nil || node == jsonschema.TrueSchema || node == jsonschema.FalseSchema || seen[node] || opaque(t) {
		return
	}
	seen[node] = true
	switch t.Kind() {
	case reflect.Struct:
		info := c.structs[t]
		if info == nil || node.Properties == nil {
			return
		}
		for _, f := range info.fields {
			prop, ok := node.Properties.Get(f.name)
			if !ok {
				continue
			}
			tags := leadingTags(f.tag.Get("validate"))
			if slices.Contains(tags, "required") && !slices.Contains(node.Required, f.name) {
				node.Required = append(node.Required, f.name)
			}
			constrain(prop, tags)
			c.annotate(f.typ, prop, defs, seen)
		}
	case reflect.Slice, reflect.Array:
		if node.Items != nil {
			c.annotate(t.Elem(), node.Items, defs, seen)
		}
	case reflect.Map:
		if node.AdditionalProperties != nil {
			c.annotate(t.Elem(), node.AdditionalProperties, defs, seen)
		}
		for _, p := range node.PatternProperties {
			c.annotate(t.Elem(), p, defs, seen)
		}
	}
}

// leadingTags are the validate tags that apply to the field itself (those
// before dive/keys), without or-groups.
func leadingTags(tag string) []string {
	var out []string
	for _, t := range strings.Split(tag, ",") {
		if t == "dive" || t == "keys" {
			break
		}
		if t != "" && !strings.Contains(t, "|") {
			out = append(out, t)
		}
	}
	return out
}

func constrain(s *jsonschema.Schema, tags []string) {
	if s == nil || s.Ref != "" || s == jsonschema.TrueSchema || s == jsonschema.FalseSchema || len(s.OneOf) > 0 {
		return
	}
	// With omitempty the zero value passes every other tag, which a lower
	// bound or an enum in the schema could not express.
	omitEmpty := slices.Contains(tags, "omitempty")
	for _, tag := range tags {
		name, param, _ := strings.Cut(tag, "=")
		if omitEmpty && (name == "min" || name == "gte" || name == "gt" || name == "len" || name == "oneof") {
			continue
		}
		n, nerr := strconv.ParseUint(param, 10, 64)
		num := json.Number(param)
		_, ferr := strconv.ParseFloat(param, 64)
		switch s.Type {
		case "string":
			switch {
			case (name == "min" || name == "gte") && nerr == nil:
				s.MinLength = &n
			case (name == "max" || name == "lte") && nerr == nil:
				s.MaxLength = &n
			case name == "len" && nerr == nil:
				s.MinLength, s.MaxLength = &n, &n
			case name == "oneof":
				s.Enum = nil
				for _, v := range strings.Fields(param) {
					s.Enum = append(s.Enum, v)
				}
			case name == "email":
				s.Format = "email"
			case name == "url" || name == "uri" || name == "http_url":
				s.Format = "uri"
			case strings.HasPrefix(name, "uuid"):
				s.Format = "uuid"
			}
		case "integer", "number":
			if ferr != nil {
				if name == "oneof" {
					s.Enum = nil
					for _, v := range strings.Fields(param) {
						s.Enum = append(s.Enum, json.Number(v))
					}
				}
				continue
			}
			switch name {
			case "min", "gte":
				s.Minimum = num
			case "max", "lte":
				s.Maximum = num
			case "gt":
				s.ExclusiveMinimum = num
			case "lt":
				s.ExclusiveMaximum = num
			}
		case "array":
			switch {
			case (name == "min" || name == "gte") && nerr == nil:
				s.MinItems = &n
			case (name == "max" || name == "lte") && nerr == nil:
				s.MaxItems = &n
			case name == "len" && nerr == nil:
				s.MinItems, s.MaxItems = &n, &n
			case name == "unique":
				s.UniqueItems = true
			}
		}
	}
}

// fieldSchema is the JSON Schema of an entity field's value. nullable adds
// null to the allowed values.
func fieldSchema(fs spec.Field, nullable bool) map[string]any {
	s := map[string]any{}
	typ := ""
	switch fs.Type {
	case spec.TypeText:
		typ = "string"
		if fs.MaxLen > 0 {
			s["maxLength"] = fs.MaxLen
		}
		if fs.Required {
			s["minLength"] = 1
		}
	case spec.TypeNumber:
		typ = "number"
	case spec.TypeBool:
		typ = "boolean"
	case spec.TypeEnum:
		typ = "string"
		enum := make([]any, 0, len(fs.Enum)+1)
		for _, v := range fs.Enum {
			enum = append(enum, v)
		}
		if nullable {
			enum = append(enum, nil)
		}
		s["enum"] = enum
	case spec.TypeTimestamp:
		typ, s["format"] = "string", "date-time"
	case spec.TypeUUID, spec.TypeReference:
		typ, s["format"] = "string", "uuid"
	}
	if typ != "" {
		if nullable {
			s["type"] = []string{typ, "null"}
		} else {
			s["type"] = typ
		}
	}
	if fs.HasDefault {
		s["default"] = fs.Default
	}
	return s
}

func objectSchema(props map[string]any, required []string) map[string]any {
	s := map[string]any{"type": "object", "properties": props, "additionalProperties": false}
	if len(required) > 0 {
		slices.Sort(required)
		s["required"] = required
	}
	return s
}

func uuidSchema() map[string]any { return map[string]any{"type": "string", "format": "uuid"} }

// versionSchema is a stream version as a client sends it: the width of the
// version column bounds it (see MaxVersion).
func versionSchema() map[string]any {
	return map[string]any{"type": "integer", "minimum": 1, "maximum": MaxVersion}
}

func timeSchema() map[string]any { return map[string]any{"type": "string", "format": "date-time"} }

// fieldsSchema is the object of an entity's fields: for create (required
// fields without a default are required) or for changes (nothing required,
// at least one field).
func fieldsSchema(e *Entity, forCreate bool) map[string]any {
	props := map[string]any{}
	var required []string
	for _, name := range e.Names {
		fs := e.Fields[name]
		if !forCreate {
			fs.HasDefault = false // defaults only apply on create
		}
		props[name] = fieldSchema(fs, !fs.Required)
		if forCreate && fs.Required && !fs.HasDefault {
			required = append(required, name)
		}
	}
	s := objectSchema(props, required)
	if !forCreate {
		s["minProperties"] = 1
	}
	return s
}

func rootSchema(s map[string]any) (json.RawMessage, error) {
	s["$schema"] = schemaVersion
	return json.Marshal(s)
}

// crudSchema is the hand-built schema of a CRUD handler's input or a CRUD
// event's payload.
func crudSchema(e *Entity, kind Kind) (json.RawMessage, error) {
	switch kind {
	case Create:
		s := fieldsSchema(e, true)
		s["properties"].(map[string]any)["id"] = uuidSchema()
		return rootSchema(s)
	case Created:
		return rootSchema(fieldsSchema(e, true))
	case Update:
		return rootSchema(objectSchema(map[string]any{
			"id":      uuidSchema(),
			"version": versionSchema(),
			"changes": fieldsSchema(e, false),
		}, []string{"id", "version", "changes"}))
	case Updated:
		s := fieldsSchema(e, false)
		delete(s, "minProperties")
		return rootSchema(s)
	case ID:
		return rootSchema(objectSchema(map[string]any{"id": uuidSchema(), "version": versionSchema()}, []string{"id"}))
	case Detail:
		return rootSchema(objectSchema(map[string]any{"id": uuidSchema(), "asOf": timeSchema()}, []string{"id"}))
	case List:
		filter := map[string]any{"id": uuidSchema()}
		sortable := []any{"id", "createdAt", "updatedAt"}
		for _, name := range e.Names {
			fs := e.Fields[name]
			filter[name] = fieldSchema(spec.Field{Type: fs.Type, Enum: fs.Enum}, true)
			if fs.Sortable {
				sortable = append(sortable, name)
			}
		}
		props := map[string]any{
			"limit":  map[string]any{"type": "integer", "minimum": 1, "maximum": MaxListLimit, "default": DefaultListLimit},
			"cursor": map[string]any{"type": "string"},
			"filter": objectSchema(filter, nil),
			"sort": map[string]any{"type": "array", "maxItems": MaxSortKeys, "items": objectSchema(map[string]any{
				"field": map[string]any{"type": "string", "enum": sortable},
				"desc":  map[string]any{"type": "boolean"},
			}, []string{"field"})},
			"asOf": timeSchema(),
		}
		if e.SoftDelete {
			props["includeDeleted"] = map[string]any{"type": "boolean"}
		}
		return rootSchema(objectSchema(props, nil))
	case Search:
		filter := map[string]any{}
		if !e.Table {
			filter["id"] = uuidSchema()
		}
		for _, name := range e.Names {
			if fs := e.Fields[name]; fs.Type != "" {
				filter[name] = fieldSchema(spec.Field{Type: fs.Type, Enum: fs.Enum}, true)
			}
		}
		return rootSchema(objectSchema(map[string]any{
			"q":      map[string]any{"type": "string", "minLength": 1, "maxLength": MaxSearchText},
			"limit":  map[string]any{"type": "integer", "minimum": 1, "maximum": MaxListLimit, "default": DefaultListLimit},
			"cursor": map[string]any{"type": "string"},
			"filter": objectSchema(filter, nil),
		}, []string{"q"}))
	}
	return rootSchema(objectSchema(map[string]any{}, nil))
}

// StateSchema is the JSON Schema of an entity's state as the API answers it:
// the state after a write, a detail, a row of a list. Fields that are not
// required may be null; deletedAt is there with soft delete.
func StateSchema(e *Entity) (json.RawMessage, error) {
	return rootSchema(stateSchema(e))
}

// tableRowSchema is a row of a projection's table as a search answers it:
// its columns, each of which may be null or, when the caller may not read
// it, missing.
func tableRowSchema(e *Entity) map[string]any {
	props := map[string]any{}
	for _, name := range e.Names {
		props[name] = fieldSchema(e.Fields[name], true)
	}
	return objectSchema(props, nil)
}

func stateSchema(e *Entity) map[string]any {
	props := map[string]any{
		"id":        uuidSchema(),
		"version":   versionSchema(),
		"createdAt": timeSchema(),
		"updatedAt": timeSchema(),
	}
	required := []string{"id", "version", "createdAt", "updatedAt"}
	for _, name := range e.Names {
		fs := e.Fields[name]
		fs.HasDefault = false
		props[name] = fieldSchema(fs, !fs.Required)
		required = append(required, name)
	}
	if e.SoftDelete {
		props["deletedAt"] = map[string]any{"type": []string{"string", "null"}, "format": "date-time"}
		required = append(required, "deletedAt")
	}
	return objectSchema(props, required)
}

// ResultSchema is the JSON Schema of the data a CRUD handler of kind k on e
// answers: the state after a write (a hard delete answers only id and
// version), the state or null for a detail, a page of states for a list,
// a page of hits for a search (of a table's rows, for a Table).
func ResultSchema(e *Entity, k Kind) (json.RawMessage, error) {
	state := stateSchema(e)
	if e.Table {
		state = tableRowSchema(e)
	}
	switch k {
	case ID:
		if !e.SoftDelete {
			return rootSchema(map[string]any{"anyOf": []any{state, objectSchema(map[string]any{
				"id": uuidSchema(), "version": versionSchema(),
			}, []string{"id", "version"})}})
		}
	case Detail:
		return rootSchema(map[string]any{"anyOf": []any{state, map[string]any{"type": "null"}}})
	case List:
		return rootSchema(objectSchema(map[string]any{
			"rows":       map[string]any{"type": "array", "items": state},
			"nextCursor": map[string]any{"type": "string"},
		}, []string{"rows", "nextCursor"}))
	case Search:
		hit := objectSchema(map[string]any{
			"row":        state,
			"rank":       map[string]any{"type": "number"},
			"highlights": map[string]any{"type": "object", "additionalProperties": map[string]any{"type": "string"}},
		}, []string{"row", "rank", "highlights"})
		return rootSchema(objectSchema(map[string]any{
			"hits":       map[string]any{"type": "array", "items": hit},
			"nextCursor": map[string]any{"type": "string"},
		}, []string{"hits", "nextCursor"}))
	}
	return rootSchema(state)
}

package registry_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/registry"
)

func schemaOf(t *testing.T, reg *registry.Registry, name string) map[string]any {
	t.Helper()
	raw := reg.Schema(name)
	require.NotNil(t, raw, name)
	var s map[string]any
	require.NoError(t, json.Unmarshal(raw, &s), string(raw))
	require.Equal(t, "https://json-schema.org/draft/2020-12/schema", s["$schema"])
	return s
}

func TestPayloadSchemaFollowsValidateTags(t *testing.T) {
	t.Parallel()
	reg := orderRegistry(t)
	s := schemaOf(t, reg, "order.placed")
	require.Equal(t, "object", s["type"])
	require.Equal(t, false, s["additionalProperties"], "unknown fields are refused, and the schema says so")
	require.ElementsMatch(t, []any{"actor", "orderId", "customer", "items"}, s["required"], "required follows validate:\"required\", not omitempty")

	props := s["properties"].(map[string]any)
	require.Equal(t, map[string]any{"type": "string"}, props["actor"], "promoted fields sit at the top level")
	require.Equal(t, map[string]any{"type": "string", "format": "uuid"}, props["orderId"])
	require.Equal(t, map[string]any{"type": "string", "format": "email"}, props["customer"])
	require.Equal(t, map[string]any{"type": "string", "enum": []any{"new", "paid"}}, props["status"])
	require.Equal(t, map[string]any{"type": "string", "format": "date-time"}, props["placedAt"])
	require.NotContains(t, props, "Ignored")
	require.NotContains(t, props, "unexposed")
	items := props["items"].(map[string]any)
	require.Equal(t, "array", items["type"])
	require.Equal(t, float64(1), items["minItems"])

	defs := s["$defs"].(map[string]any)
	line := defs["Line"].(map[string]any)
	require.Equal(t, []any{"name"}, line["required"])
	lineProps := line["properties"].(map[string]any)
	require.Equal(t, float64(10), lineProps["name"].(map[string]any)["maxLength"])
	require.Equal(t, float64(1), lineProps["qty"].(map[string]any)["minimum"])
	addr := defs["Address"].(map[string]any)
	require.Equal(t, []any{"street"}, addr["required"])
	zip := addr["properties"].(map[string]any)["zip"].(map[string]any)
	require.Equal(t, float64(5), zip["minLength"])
	require.Equal(t, float64(5), zip["maxLength"])
}

func TestSchemaOfRecursiveAndAnonymousTypes(t *testing.T) {
	t.Parallel()
	type Node struct {
		Name     string  `json:"name" validate:"required"`
		Children []*Node `json:"children" validate:"dive"`
	}
	type Pair struct {
		X struct {
			In string `json:"in" validate:"required"`
		} `json:"x"`
	}
	reg, err := registry.Build(feature.Define("f", func(r *feature.Registrar) {
		r.DefineEvent("f.tree", Node{})
		r.DefineEvent("f.pair", Pair{})
	}))
	require.NoError(t, err)

	tree := schemaOf(t, reg, "f.tree")
	require.Equal(t, []any{"name"}, tree["required"])
	children := tree["properties"].(map[string]any)["children"].(map[string]any)
	require.Equal(t, "#/$defs/Node", children["items"].(map[string]any)["$ref"])
	def := tree["$defs"].(map[string]any)["Node"].(map[string]any)
	require.Equal(t, []any{"name"}, def["required"], "a recursive root keeps a definition to refer to")

	pair := schemaOf(t, reg, "f.pair")
	x := pair["properties"].(map[string]any)["x"].(map[string]any)
	require.Equal(t, []any{"in"}, x["required"], "anonymous nested structs are annotated in place")
}

func itemA() reflect.Type {
	type Item struct {
		A string `json:"a" validate:"required"`
	}
	return reflect.TypeFor[Item]()
}

func itemB() reflect.Type {
	type Item struct {
		B string `json:"b" validate:"required"`
	}
	return reflect.TypeFor[Item]()
}

func TestSchemaNamesDistinctTypesDistinctly(t *testing.T) {
	t.Parallel()
	// Two different types that are both called Item.
	clash := reflect.StructOf([]reflect.StructField{
		{Name: "A", Type: itemA(), Tag: `json:"a"`},
		{Name: "B", Type: itemB(), Tag: `json:"b"`},
	})
	require.Equal(t, itemA().Name(), itemB().Name())
	reg, err := registry.Build(feature.Define("f", func(r *feature.Registrar) {
		r.DefineEvent("f.clash", reflect.New(clash).Elem().Interface())
	}))
	require.NoError(t, err)
	s := schemaOf(t, reg, "f.clash")
	defs := s["$defs"].(map[string]any)
	require.Len(t, defs, 2)
	props := s["properties"].(map[string]any)
	a := strings.TrimPrefix(props["a"].(map[string]any)["$ref"].(string), "#/$defs/")
	b := strings.TrimPrefix(props["b"].(map[string]any)["$ref"].(string), "#/$defs/")
	require.NotEqual(t, a, b)
	require.Equal(t, []any{"a"}, defs[a].(map[string]any)["required"])
	require.Equal(t, []any{"b"}, defs[b].(map[string]any)["required"])
}

func TestCrudSchemas(t *testing.T) {
	t.Parallel()
	reg := buildApp(t)

	create := schemaOf(t, reg, "task.create")
	require.Equal(t, []any{"title"}, create["required"], "required fields without a default")
	props := create["properties"].(map[string]any)
	require.Equal(t, map[string]any{"type": "string", "format": "uuid"}, props["id"])
	require.Equal(t, map[string]any{"type": "string", "maxLength": float64(200), "minLength": float64(1)}, props["title"])
	require.Equal(t, map[string]any{"type": []any{"string", "null"}, "enum": []any{"low", "normal", "high", nil}, "default": "normal"}, props["priority"])
	require.Equal(t, map[string]any{}, props["labels"], "json fields take any value")

	update := schemaOf(t, reg, "task.update")
	require.Equal(t, []any{"changes", "id", "version"}, update["required"])
	changes := update["properties"].(map[string]any)["changes"].(map[string]any)
	require.Equal(t, float64(1), changes["minProperties"])
	require.NotContains(t, changes["properties"].(map[string]any)["done"], "default", "defaults only apply on create")

	created := schemaOf(t, reg, "task.created")
	require.NotContains(t, created["properties"], "id")
	deleted := schemaOf(t, reg, "task.deleted")
	require.Empty(t, deleted["properties"])

	list := schemaOf(t, reg, "task.list")
	sort := list["properties"].(map[string]any)["sort"].(map[string]any)
	field := sort["items"].(map[string]any)["properties"].(map[string]any)["field"].(map[string]any)
	require.Equal(t, []any{"id", "createdAt", "updatedAt", "title"}, field["enum"])
	require.Contains(t, list["properties"], "includeDeleted")
	require.NotContains(t, schemaOf(t, reg, "user.list")["properties"], "includeDeleted")

	require.Equal(t, []any{"id"}, schemaOf(t, reg, "task.detail")["required"])
	require.Equal(t, []any{"id"}, schemaOf(t, reg, "task.delete")["required"])
	require.Nil(t, reg.Schema("task.nope"))
}

func TestEverySchemaIsValidJSON(t *testing.T) {
	t.Parallel()
	reg := buildApp(t)
	for _, e := range reg.Events() {
		require.True(t, json.Valid(reg.Schema(e.Name)), e.Name)
	}
	for _, h := range reg.Handlers() {
		require.True(t, json.Valid(reg.Schema(h.Name)), h.Name)
	}
}

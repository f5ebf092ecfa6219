package registry

import (
	"reflect"

	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/internal/spec"
	"github.com/kumiko-go/kumiko/internal/structmap"
)

// fieldKinds are the kinds of an entity's field types.
var fieldKinds = map[spec.FieldType]structmap.Kind{
	spec.TypeText: structmap.Text, spec.TypeEnum: structmap.Text, spec.TypeNumber: structmap.Number,
	spec.TypeBool: structmap.Bool, spec.TypeTimestamp: structmap.Time, spec.TypeUUID: structmap.UUID,
	spec.TypeReference: structmap.UUID, spec.TypeJSON: structmap.JSON,
}

// kindNames name the kinds in boot errors.
var kindNames = map[structmap.Kind]string{
	structmap.Text: "text", structmap.Number: "number", structmap.Integer: "integer", structmap.Bool: "bool",
	structmap.Time: "timestamp", structmap.UUID: "uuid", structmap.JSON: "JSON",
}

// checkState checks the struct declared with feature.StateStruct against
// the entity's fields (see StateStruct).
func (b *builder) checkState(feat, item string, def spec.Entity) {
	kinds := map[string]structmap.Kind{
		"id": structmap.UUID, "version": structmap.Integer, "createdAt": structmap.Time, "updatedAt": structmap.Time,
	}
	if def.SoftDelete {
		kinds["deletedAt"] = structmap.Time
	}
	for name, f := range def.Fields {
		kinds[name] = fieldKinds[f.Type]
	}
	for _, typ := range def.States {
		b.checkStruct(feat, item, RuleEntity, typ, "state struct", "the entity has no field", kinds)
	}
}

// checkRow checks a table's Row struct against its columns (see
// feature.TableDef.Row).
func (b *builder) checkRow(feat, item string, t feature.TableDef) {
	typ := reflect.TypeOf(t.Row)
	for typ.Kind() == reflect.Pointer {
		typ = typ.Elem()
	}
	kinds := map[string]structmap.Kind{}
	for _, c := range t.Columns {
		if c.Name == "tenant_id" {
			continue
		}
		k, _ := structmap.ColumnKind(c.Type) // 0: a type not checked
		kinds[spec.JSONName(c.Name)] = k
	}
	b.checkStruct(feat, item, RuleProjection, typ, "row struct", "table "+t.Name+" has no column", kinds)
}

// checkStruct fails each field of typ that names nothing in kinds (by
// json tag, or Go name in any case) or cannot hold its values.
func (b *builder) checkStruct(feat, item, rule string, typ reflect.Type, what, missing string, kinds map[string]structmap.Kind) {
	plan, err := structmap.For(typ)
	if err != nil {
		b.fail(feat, item, rule, "%s: %v", what, err)
		return
	}
	for _, f := range plan.Fields() {
		name, kind, found := "", structmap.Kind(0), false
		for n, k := range kinds {
			if f.Takes(n) {
				name, kind, found = n, k, true
				break
			}
		}
		switch {
		case !found:
			b.fail(feat, item, rule, "%s %s field %s: %s %q", what, typ, f.GoName, missing, f.Label())
		case kind != 0 && !structmap.Holds(f.Type, kind):
			b.fail(feat, item, rule, "%s %s field %s: type %s cannot hold %q (%s)", what, typ, f.GoName, f.Type, name, kindNames[kind])
		}
	}
}

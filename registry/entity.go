package registry

import (
	"errors"
	"fmt"

	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/internal/spec"
	"github.com/kumiko-go/kumiko/registry/internal/codec"
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
func (r *Registry) ValidateEntityInput(entity string, verb CrudVerb, fields map[string]any) (map[string]any, error) {
	e, ok := r.entities[entity]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownEntity, entity)
	}
	if verb != VerbCreate && verb != VerbUpdate {
		return nil, fmt.Errorf("validate entity input: verb %q; want create or update", verb)
	}
	return codec.ValidateFields(e.codec, verb == VerbCreate, fields)
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
		col := spec.ColumnName(name)
		t.Columns = append(t.Columns, feature.Column{Name: col, Type: fs.Type.ColumnType(), NotNull: fs.Required && !fs.Personal})
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

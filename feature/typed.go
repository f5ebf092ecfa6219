package feature

import (
	"fmt"
	"reflect"

	"github.com/kumiko-go/kumiko/internal/spec"
	"github.com/kumiko-go/kumiko/internal/structmap"
)

// StateAs reads an entity aggregate's state into a T, a struct of the
// author's: each exported field takes the entity field (or id, version,
// createdAt, updatedAt, deletedAt) its json tag names, or else the one
// its Go name names, compared case-insensitively. A field that names
// nothing in the state, or whose type cannot hold the value, is an error
// naming it; a field the entity may leave empty must be a pointer (nil
// when empty). Which Go types fit which field types is listed in
// docs/reference.md ("Typed state and rows").
//
//	type Task struct {
//		Title string     `json:"title"`
//		Done  bool       `json:"done"`
//		DueAt *time.Time `json:"dueAt"` // nil while not set
//	}
//	t, err := feature.StateAs[Task](task)
func StateAs[T any](a Aggregate) (T, error) {
	var v T
	state := a.State()
	if state == nil {
		return v, fmt.Errorf("state of %s %s: none (not an entity, or no such %s)", a.Type(), a.ID(), a.Type())
	}
	p, err := structmap.For(reflect.TypeFor[T]())
	if err != nil {
		return v, fmt.Errorf("state of %s: %w", a.Type(), err)
	}
	return v, p.Fill(&v, state, "state")
}

// StateStruct declares T as the struct the entity's state is read into
// with StateAs: registry.Build then checks, at boot, that each field of T
// names a field of the entity (or id, version, createdAt, updatedAt, and
// deletedAt with SoftDelete) and that its Go type can hold that field's
// values, and fails naming the feature, the entity and the field where
// one does not. StateAs reads into any struct; declaring it moves the
// mistakes from the first call to the boot. Declare each struct the
// feature reads the state into, one option each.
func StateStruct[T any]() EntityOption {
	return EntityOption{func(d *spec.Entity) { d.States = append(d.States, reflect.TypeFor[T]()) }}
}

// RowsAs reads the rows of q that f matches into Ts, by column: each
// exported field of T takes the column its json tag names (the column's
// JSON name, createdAt for created_at), or else the one its Go name names,
// compared case-insensitively — the way pgx's RowToStructByName does. A
// field that names no column, or whose type cannot hold a value, is an
// error naming it; a column that may be NULL needs a pointer field.
func RowsAs[T any](q ProjectionQuery, f ProjectionFilter) ([]T, error) {
	rows, err := q.Rows(f)
	if err != nil {
		return nil, err
	}
	p, err := structmap.For(reflect.TypeFor[T]())
	if err != nil {
		return nil, fmt.Errorf("rows: %w", err)
	}
	out := make([]T, len(rows))
	for i, r := range rows {
		if err := p.Fill(&out[i], r, "row"); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// RowAs is RowsAs of the first row f matches; nil when none does.
func RowAs[T any](q ProjectionQuery, f ProjectionFilter) (*T, error) {
	f.Limit = 1
	rows, err := RowsAs[T](q, f)
	if err != nil || len(rows) == 0 {
		return nil, err
	}
	return &rows[0], nil
}

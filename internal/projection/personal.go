package projection

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// SubjectOf reads the subject field field of the entity's row id in tenant
// (the current data subject of fields declared PersonalOf(field)); "" when
// the row is missing or the field is null.
func (t *Entity) SubjectOf(ctx context.Context, tx pgx.Tx, id, tenant uuid.UUID, field string) (string, error) {
	col, ok := t.cols[field]
	if !ok {
		return "", fmt.Errorf("%s has no field %s", t.e.Name(), field)
	}
	var v *string
	err := tx.QueryRow(ctx, fmt.Sprintf("SELECT %s::text FROM %s WHERE id = $1 AND tenant_id = $2", col, t.table),
		[16]byte(id), [16]byte(tenant)).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) || v == nil {
		return "", nil
	}
	return *v, err
}

// Forget nulls, in tx, the personal fields of the entity's rows in tenant
// that belong to subject: the fields of the row whose id is subject (those
// declared Personal) and those declared PersonalOf a field that holds
// subject. It returns how many rows it changed.
func (t *Entity) Forget(ctx context.Context, tx pgx.Tx, tenant uuid.UUID, subject string) (int64, error) {
	bySubject := map[string][]string{} // subject field ("": the id) → columns
	for _, f := range t.fields {
		if fs := t.specs[f]; fs.Personal {
			bySubject[fs.Subject] = append(bySubject[fs.Subject], t.cols[f])
		}
	}
	var n int64
	for _, field := range slices.Sorted(maps.Keys(bySubject)) {
		cols := bySubject[field]
		set := make([]string, len(cols))
		for i, c := range cols {
			set[i] = c + " = NULL"
		}
		var where string
		var arg any
		if field == "" {
			id, err := uuid.Parse(subject)
			if err != nil {
				continue // not an id: no row's own subject
			}
			where, arg = "id = $1", [16]byte(id)
		} else {
			where, arg = t.cols[field]+"::text = $1", subject
		}
		tag, err := tx.Exec(ctx, fmt.Sprintf("UPDATE %s SET %s WHERE %s AND tenant_id = $2", t.table, strings.Join(set, ", "), where),
			arg, [16]byte(tenant))
		if err != nil {
			return n, fmt.Errorf("forget %s in %s: %w", subject, t.e.Name(), err)
		}
		n += tag.RowsAffected()
	}
	return n, nil
}

// SubjectRows returns the personal fields of the entity's rows in tenant
// that belong to subject, by row id: those declared Personal of the row
// whose id is subject, those declared PersonalOf a field holding subject.
// A row without any is left out.
func (t *Entity) SubjectRows(ctx context.Context, tx pgx.Tx, tenant uuid.UUID, subject string) (map[uuid.UUID]map[string]any, error) {
	bySubject := map[string][]string{} // subject field ("": the id) → fields
	for _, f := range t.fields {
		if fs := t.specs[f]; fs.Personal {
			bySubject[fs.Subject] = append(bySubject[fs.Subject], f)
		}
	}
	out := map[uuid.UUID]map[string]any{}
	for _, field := range slices.Sorted(maps.Keys(bySubject)) {
		fields := bySubject[field]
		cols := make([]string, len(fields))
		for i, f := range fields {
			cols[i] = "to_jsonb(" + t.cols[f] + ")"
		}
		var where string
		var arg any
		if field == "" {
			id, err := uuid.Parse(subject)
			if err != nil {
				continue
			}
			where, arg = "id = $1", [16]byte(id)
		} else {
			where, arg = t.cols[field]+"::text = $1", subject
		}
		rows, err := tx.Query(ctx, fmt.Sprintf("SELECT id, jsonb_build_array(%s) FROM %s WHERE %s AND tenant_id = $2 ORDER BY id",
			strings.Join(cols, ", "), t.table, where), arg, [16]byte(tenant))
		if err != nil {
			return nil, fmt.Errorf("export %s from %s: %w", subject, t.e.Name(), err)
		}
		var (
			id     [16]byte
			values []any
		)
		if _, err := pgx.ForEachRow(rows, []any{&id, &values}, func() error {
			row := out[uuid.UUID(id)]
			for i, f := range fields {
				if values[i] == nil {
					continue
				}
				if row == nil {
					row = map[string]any{}
					out[uuid.UUID(id)] = row
				}
				row[f] = values[i]
			}
			return nil
		}); err != nil {
			return nil, fmt.Errorf("export %s from %s: %w", subject, t.e.Name(), err)
		}
	}
	return out, nil
}

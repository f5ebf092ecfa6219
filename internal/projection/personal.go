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

// subjectGroup is the personal fields of the entity that one subject field
// names the subject of ("": the row's own id), with the condition that
// selects the rows of a subject by it.
type subjectGroup struct {
	fields []string
	where  string // on $1
	arg    any    // $1
}

// subjectGroups are the entity's personal fields grouped by their subject
// field, each with the rows of subject to act on, in subject field order.
// Own-id fields are left out when subject is not an id: no row is its own.
func (t *Entity) subjectGroups(subject string) []subjectGroup {
	by := map[string][]string{}
	for _, f := range t.fields {
		if fs := t.specs[f]; fs.Personal {
			by[fs.Subject] = append(by[fs.Subject], f)
		}
	}
	var out []subjectGroup
	for _, field := range slices.Sorted(maps.Keys(by)) {
		g := subjectGroup{fields: by[field], where: t.cols[field] + "::text = $1", arg: subject}
		if field == "" {
			id, err := uuid.Parse(subject)
			if err != nil {
				continue
			}
			g.where, g.arg = "id = $1", [16]byte(id)
		}
		out = append(out, g)
	}
	return out
}

// Forget nulls, in tx, the personal fields of the entity's rows in tenant
// that belong to subject: the fields of the row whose id is subject (those
// declared Personal) and those declared PersonalOf a field that holds
// subject. It returns how many rows it changed.
func (t *Entity) Forget(ctx context.Context, tx pgx.Tx, tenant uuid.UUID, subject string) (int64, error) {
	var n int64
	for _, g := range t.subjectGroups(subject) {
		set := make([]string, len(g.fields))
		for i, f := range g.fields {
			set[i] = t.cols[f] + " = NULL"
		}
		tag, err := tx.Exec(ctx, fmt.Sprintf("UPDATE %s SET %s WHERE %s AND tenant_id = $2", t.table, strings.Join(set, ", "), g.where),
			g.arg, [16]byte(tenant))
		if err != nil {
			return n, fmt.Errorf("forget %s in %s: %w", subject, t.e.Name(), err)
		}
		n += tag.RowsAffected()
	}
	return n, nil
}

// subjectIDs are the ids of the entity's rows in tenant that hold personal
// fields of subject (its own row, those whose subject field holds it).
func (t *Entity) subjectIDs(ctx context.Context, tx pgx.Tx, tenant uuid.UUID, subject string) ([]uuid.UUID, error) {
	var out []uuid.UUID
	for _, g := range t.subjectGroups(subject) {
		rows, err := tx.Query(ctx, fmt.Sprintf("SELECT id FROM %s WHERE %s AND tenant_id = $2", t.table, g.where), g.arg, [16]byte(tenant))
		if err != nil {
			return nil, err
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[[16]byte])
		if err != nil {
			return nil, err
		}
		for _, id := range ids {
			out = append(out, id)
		}
	}
	return out, nil
}

// SubjectRows returns the personal fields of the entity's rows in tenant
// that belong to subject, by row id: those declared Personal of the row
// whose id is subject, those declared PersonalOf a field holding subject.
// A row without any is left out.
func (t *Entity) SubjectRows(ctx context.Context, tx pgx.Tx, tenant uuid.UUID, subject string) (map[uuid.UUID]map[string]any, error) {
	out := map[uuid.UUID]map[string]any{}
	for _, g := range t.subjectGroups(subject) {
		cols := make([]string, len(g.fields))
		for i, f := range g.fields {
			cols[i] = "to_jsonb(" + t.cols[f] + ")"
		}
		rows, err := tx.Query(ctx, fmt.Sprintf("SELECT id, jsonb_build_array(%s) FROM %s WHERE %s AND tenant_id = $2 ORDER BY id",
			strings.Join(cols, ", "), t.table, g.where), g.arg, [16]byte(tenant))
		if err != nil {
			return nil, fmt.Errorf("export %s from %s: %w", subject, t.e.Name(), err)
		}
		var (
			id     [16]byte
			values []any
		)
		if _, err := pgx.ForEachRow(rows, []any{&id, &values}, func() error {
			for i, f := range g.fields {
				if values[i] == nil {
					continue
				}
				if out[uuid.UUID(id)] == nil {
					out[uuid.UUID(id)] = map[string]any{}
				}
				out[uuid.UUID(id)][f] = values[i]
			}
			return nil
		}); err != nil {
			return nil, fmt.Errorf("export %s from %s: %w", subject, t.e.Name(), err)
		}
	}
	return out, nil
}

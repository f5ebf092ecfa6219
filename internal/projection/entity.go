package projection

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/internal/spec"
	"github.com/kumiko-go/kumiko/kumikotype"
	"github.com/kumiko-go/kumiko/registry"
)

// Entity is an entity's read table with the SQL that keeps it: one row
// per live stream, the fold of its CRUD events.
type Entity struct {
	e      *registry.Entity
	table  string   // schema-qualified
	fields []string // field names, sorted
	specs  map[string]spec.Field
	cols   map[string]string // field name → column
	soft   bool
	// writeRoles reports whether any field restricts who may write it.
	writeRoles bool
	// selectList is every column a row read returns, in scan order.
	selectList string
	insert     string
	// mustExist are the reference fields declared MustExist, sorted.
	mustExist []string
	// exists locks a live row of the table by id and tenant FOR SHARE: the
	// check of a MustExist reference to this entity.
	exists string
	// search is the entity's full-text search; nil without.
	search *searchPlan
}

// UniqueViolation turns a violation of a unique field's index into the
// unique_violation that names the field (details.field); other errors pass.
func (t *Entity) UniqueViolation(err error) error {
	var pg *pgconn.PgError
	if !errors.As(err, &pg) || pg.Code != "23505" {
		return err
	}
	def := t.e.Table()
	for _, ix := range def.Indexes {
		if !ix.Unique || len(ix.Columns) != 2 {
			continue
		}
		// The index name tableDDL gives it, as PostgreSQL stores it: cut to
		// 63 bytes.
		name := def.Name + "_" + strings.Join(ix.Columns, "_") + "_idx"
		if len(name) > 63 {
			name = name[:63]
		}
		if pg.ConstraintName != name {
			continue
		}
		col := pgx.Identifier{ix.Columns[1]}.Sanitize()
		for _, f := range t.fields {
			if t.cols[f] == col {
				return kumikotype.NewError(kumikotype.CodeUniqueViolation, "", f+" is already taken", err).With("field", f)
			}
		}
	}
	return err
}

func newEntity(schema string, e *registry.Entity) *Entity {
	t := &Entity{
		e:      e,
		table:  pgx.Identifier{schema, e.Table().Name}.Sanitize(),
		fields: e.FieldNames(),
		specs:  map[string]spec.Field{},
		cols:   map[string]string{},
		soft:   e.SoftDelete(),
	}
	sel := []string{"id", "version"}
	insCols := []string{"id", "tenant_id", "version", "created_at", "updated_at"}
	insVals := []string{"$1", "$2", "$3", "$4", "$4"}
	for i, f := range t.fields {
		fs, _ := e.Field(f)
		t.specs[f] = fs
		t.writeRoles = t.writeRoles || len(fs.WriteRoles) > 0
		if fs.Type == spec.TypeReference && fs.MustExist {
			t.mustExist = append(t.mustExist, f)
		}
		col := pgx.Identifier{spec.ColumnName(f)}.Sanitize()
		t.cols[f] = col
		sel = append(sel, col)
		insCols = append(insCols, col)
		insVals = append(insVals, fmt.Sprintf("$%d::text::%s", i+5, fs.Type.ColumnType()))
	}
	sel = append(sel, "created_at", "updated_at")
	if t.soft {
		sel = append(sel, "deleted_at")
	}
	t.selectList = strings.Join(sel, ", ")
	t.insert = fmt.Sprintf("INSERT INTO %s (%s) VALUES (%s)", t.table, strings.Join(insCols, ", "), strings.Join(insVals, ", "))
	t.exists = fmt.Sprintf("SELECT 1 FROM %s WHERE id = $1 AND tenant_id = $2%s FOR SHARE", t.table, t.liveOnly())
	return t
}

// ReasonReferenceNotFound is the Reason of the unprocessable answer to a
// write whose MustExist reference names no live row of the referenced
// entity in the writer's tenant. Details name the field; an id of another
// tenant answers exactly like one that names nothing.
const ReasonReferenceNotFound = string(kumikotype.ReasonReferenceNotFound)

// CheckReferences checks the MustExist references an entity's created or
// updated event sets (payload holds the fields it sets; fields, when not
// nil, is payload decoded) in db: each non-null value must name a live row
// of its entity in that entity's tenant for u. The row stays locked FOR
// SHARE until db ends, so it cannot be deleted before the write commits.
func (s *Side) CheckReferences(ctx context.Context, db pgx.Tx, u feature.User, t *Entity, payload json.RawMessage, fields map[string]any) error {
	fields, err := decoded(payload, fields)
	if err != nil {
		return err
	}
	for _, f := range t.mustExist {
		v := fields[f]
		if v == nil {
			continue
		}
		ref := s.entities[t.specs[f].Ref]
		notFound := func() error {
			return kumikotype.NewError(kumikotype.CodeUnprocessable, kumikotype.ReasonReferenceNotFound,
				fmt.Sprintf("%s does not name an existing %s", f, ref.e.Name()), nil).With("field", f)
		}
		str, ok := v.(string)
		if !ok {
			return notFound()
		}
		id, err := uuid.Parse(str)
		if err != nil {
			return notFound()
		}
		var one int
		err = db.QueryRow(ctx, ref.exists, [16]byte(id), [16]byte(ref.Tenant(u))).Scan(&one)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return notFound()
		case err != nil:
			return fmt.Errorf("check reference %s: %w", f, err)
		}
	}
	return nil
}

// Apply writes one event of the entity's stream to its row and returns the
// row afterwards (nil when the event removed it or found none to change).
// created inserts, updated sets the changed columns, deleted sets deleted_at
// or deletes the row, restored clears deleted_at; every other event on the
// stream only moves the row's version, so clients always see the stream
// version they must present on the next update.
func (t *Entity) Apply(ctx context.Context, db feature.DB, ev eventstore.Event) (map[string]any, error) {
	return t.ApplyDecoded(ctx, db, ev, nil)
}

// ApplyDecoded is Apply with ev's payload already decoded into fields, as
// the write path has it (the codec's normalised values are what decoding
// the stored payload gives); nil fields decodes the payload.
func (t *Entity) ApplyDecoded(ctx context.Context, db feature.DB, ev eventstore.Event, fields map[string]any) (map[string]any, error) {
	name := t.e.Name()
	var (
		sql  string
		args = []any{[16]byte(ev.AggregateID), [16]byte(ev.TenantID), ev.Version, ev.CreatedAt}
	)
	switch ev.Type {
	case registry.VerbCreate.EventType(name):
		fields, err := decoded(ev.Payload, fields)
		if err != nil {
			return nil, err
		}
		for _, f := range t.fields {
			args = append(args, toText(fields[f], t.specs[f].Type.ColumnType()))
		}
		// Nothing reads the insert's result: it travels with the next
		// statement, the commit at the latest.
		if err := eventstore.Enqueue(ctx, db, func(err error) error {
			return t.UniqueViolation(fmt.Errorf("%s: apply %s: %w", t.table, ev.Type, err))
		}, t.insert, args...); err != nil {
			return nil, err
		}
		// The new row is exactly the fold of its first event.
		return t.created(ev, fields), nil
	case registry.VerbUpdate.EventType(name):
		changes, err := decoded(ev.Payload, fields)
		if err != nil {
			return nil, err
		}
		sets := []string{"version = $3", "updated_at = $4"}
		for _, f := range t.fields {
			v, ok := changes[f]
			if !ok {
				continue
			}
			args = append(args, toText(v, t.specs[f].Type.ColumnType()))
			sets = append(sets, fmt.Sprintf("%s = $%d::text::%s", t.cols[f], len(args), t.specs[f].Type.ColumnType()))
		}
		sql = fmt.Sprintf("UPDATE %s SET %s WHERE id = $1 AND tenant_id = $2%s RETURNING %s",
			t.table, strings.Join(sets, ", "), t.liveOnly(), t.selectList)
	case registry.VerbDelete.EventType(name):
		if t.soft {
			sql = fmt.Sprintf("UPDATE %s SET version = $3, updated_at = $4, deleted_at = $4 WHERE id = $1 AND tenant_id = $2 AND deleted_at IS NULL RETURNING %s",
				t.table, t.selectList)
		} else {
			sql, args = fmt.Sprintf("DELETE FROM %s WHERE id = $1 AND tenant_id = $2 RETURNING %s", t.table, t.selectList), args[:2]
		}
	case registry.VerbRestore.EventType(name):
		sql = fmt.Sprintf("UPDATE %s SET version = $3, updated_at = $4, deleted_at = NULL WHERE id = $1 AND tenant_id = $2 AND deleted_at IS NOT NULL RETURNING %s",
			t.table, t.selectList)
	default:
		sql = fmt.Sprintf("UPDATE %s SET version = $3, updated_at = $4 WHERE id = $1 AND tenant_id = $2 RETURNING %s", t.table, t.selectList)
	}
	rows, err := db.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: apply %s: %w", t.table, ev.Type, err)
	}
	out, err := t.scanRows(rows)
	if err != nil || len(out) == 0 {
		return nil, err
	}
	return out[0], nil
}

// Tenant is the tenant the entity's streams and rows live in for u: the
// system tenant for an entity of system streams, u's own otherwise.
func (t *Entity) Tenant(u feature.User) uuid.UUID {
	if t.e.SystemStream() {
		return eventstore.SystemTenant
	}
	return u.TenantID
}

func (t *Entity) liveOnly() string {
	if t.soft {
		return " AND deleted_at IS NULL"
	}
	return ""
}

// scanRows reads rows of selectList into their JSON-native form: the same
// form the reducer produces from events.
func (t *Entity) scanRows(rows pgx.Rows) ([]map[string]any, error) {
	defer rows.Close()
	var out []map[string]any
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			return nil, err
		}
		out = append(out, t.rowOf(vals))
	}
	return out, rows.Err()
}

// rowOf is a row of the table as the values of its selectList.
func (t *Entity) rowOf(vals []any) map[string]any {
	row := make(map[string]any, len(t.fields)+5)
	row["id"] = uuid.UUID(vals[0].([16]byte)).String()
	row["version"] = int(vals[1].(int32))
	for i, f := range t.fields {
		row[f] = fromDB(vals[i+2])
	}
	n := len(t.fields) + 2
	row["createdAt"] = fromDB(vals[n])
	row["updatedAt"] = fromDB(vals[n+1])
	if t.soft {
		row["deletedAt"] = fromDB(vals[n+2])
	}
	return row
}

// fromDB converts a value pgx decoded into the JSON-native form entity
// payloads use: uuids as lowercase strings, timestamps as RFC 3339 UTC with
// microseconds, numbers as float64.
func fromDB(v any) any {
	switch x := v.(type) {
	case [16]byte:
		return uuid.UUID(x).String()
	case time.Time:
		return formatTime(x)
	case pgtype.Numeric:
		f, err := x.Float64Value()
		if err != nil || !f.Valid {
			return nil
		}
		return f.Float64
	}
	return v
}

func formatTime(t time.Time) string {
	return t.UTC().Truncate(time.Microsecond).Format(time.RFC3339Nano)
}

// toText renders a normalised field value as the text the SQL casts to the
// column type colType; nil stays NULL. A jsonb column always gets the value's
// JSON text, so a string in a json field stays a string (the text "NaN"
// or "1" would otherwise be cast as JSON: an error, or a number).
func toText(v any, colType string) any {
	if v != nil && colType == spec.TypeJSON.ColumnType() {
		b, err := json.Marshal(v)
		if err != nil {
			return nil
		}
		return string(b)
	}
	switch x := v.(type) {
	case nil:
		return nil
	case string:
		return x
	case bool:
		return strconv.FormatBool(x)
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	case json.Number:
		return x.String()
	}
	b, err := json.Marshal(v) // json fields: any JSON value
	if err != nil {
		return nil
	}
	return string(b)
}

// decoded is fields, or payload decoded when fields is nil.
func decoded(payload json.RawMessage, fields map[string]any) (map[string]any, error) {
	if fields != nil {
		return fields, nil
	}
	return decodeFields(payload)
}

func decodeFields(payload json.RawMessage) (map[string]any, error) {
	var m map[string]any
	if err := json.Unmarshal(payload, &m); err != nil {
		return nil, fmt.Errorf("decode entity payload: %w", err)
	}
	return m, nil
}

// Fold is the entity reducer: the state a stream's events build, in the
// same form as a read-table row. nil when the stream holds no live entity
// (never created, or hard-deleted).
func (t *Entity) Fold(state map[string]any, events []eventstore.Event) (map[string]any, error) {
	name := t.e.Name()
	for _, ev := range events {
		switch ev.Type {
		case registry.VerbCreate.EventType(name):
			fields, err := decodeFields(ev.Payload)
			if err != nil {
				return nil, err
			}
			state = t.created(ev, fields)
		case registry.VerbUpdate.EventType(name):
			if state == nil {
				continue
			}
			changes, err := decodeFields(ev.Payload)
			if err != nil {
				return nil, err
			}
			for _, f := range t.fields {
				if v, ok := changes[f]; ok {
					state[f] = v
				}
			}
		case registry.VerbDelete.EventType(name):
			if state != nil && !t.soft {
				state = nil
				continue
			}
			if state != nil {
				state["deletedAt"] = formatTime(ev.CreatedAt)
			}
		case registry.VerbRestore.EventType(name):
			if state != nil {
				state["deletedAt"] = nil
			}
		}
		if state != nil {
			state["version"] = ev.Version
			state["updatedAt"] = formatTime(ev.CreatedAt)
		}
	}
	return state, nil
}

// created is the state the entity's created event ev builds, fields its
// decoded payload.
func (t *Entity) created(ev eventstore.Event, fields map[string]any) map[string]any {
	state := make(map[string]any, len(t.fields)+5)
	state["id"], state["createdAt"] = ev.AggregateID.String(), formatTime(ev.CreatedAt)
	for _, f := range t.fields {
		state[f] = fields[f]
	}
	if t.soft {
		state["deletedAt"] = nil
	}
	state["version"], state["updatedAt"] = ev.Version, state["createdAt"]
	return state
}

// Visible returns row without the fields user may not read; nil stays nil.
func (t *Entity) Visible(row map[string]any, u feature.User) map[string]any {
	if row == nil {
		return nil
	}
	for _, f := range t.fields {
		if !t.specs[f].CanRead(u.Authenticated, u.HasRole) {
			delete(row, f)
		}
	}
	return row
}

// readable is the entity's table def as u may read it, without the columns
// of the fields u may not read, and its select list; "" when u reads every
// column.
func (t *Entity) readable(def feature.TableDef, u feature.User) (feature.TableDef, string) {
	hidden := map[string]bool{}
	for _, f := range t.fields {
		if !t.specs[f].CanRead(u.Authenticated, u.HasRole) {
			hidden[spec.ColumnName(f)] = true
		}
	}
	return narrowed(def, func(c feature.Column) bool { return hidden[c.Name] })
}

// readableColumns is a projection table's def as u may read it, without the
// columns whose ReadRoles u holds none of, and its select list; "" when u
// reads every column.
func readableColumns(def feature.TableDef, u feature.User) (feature.TableDef, string) {
	return narrowed(def, func(c feature.Column) bool {
		return !spec.Field{ReadRoles: c.ReadRoles}.CanRead(u.Authenticated, u.HasRole)
	})
}

// narrowed is def without the columns hide reports, and the select list of
// the others; def itself and "" when none is hidden.
func narrowed(def feature.TableDef, hide func(feature.Column) bool) (feature.TableDef, string) {
	if !slices.ContainsFunc(def.Columns, hide) {
		return def, ""
	}
	def = def.Clone()
	def.Columns = slices.DeleteFunc(def.Columns, hide)
	cols := make([]string, len(def.Columns))
	for i, c := range def.Columns {
		cols[i] = pgx.Identifier{c.Name}.Sanitize()
	}
	return def, strings.Join(cols, ", ")
}

// Definition is the entity as the registry declares it.
func (t *Entity) Definition() *registry.Entity { return t.e }

// Table is the entity's schema-qualified read table.
func (t *Entity) Table() string { return t.table }

// SoftDelete reports whether a delete keeps the row (deletedAt set).
func (t *Entity) SoftDelete() bool { return t.soft }

// RestrictsWrites reports whether any field restricts who may write it.
func (t *Entity) RestrictsWrites() bool { return t.writeRoles }

// ChecksReferences reports whether the entity has MustExist references
// (see Side.CheckReferences).
func (t *Entity) ChecksReferences() bool { return len(t.mustExist) > 0 }

// LockRow locks the entity's row and returns its version; deleted selects a
// soft-deleted row (restore) instead of a live one. A missing row is
// not_found (aggregate_not_found).
func (t *Entity) LockRow(ctx context.Context, tx pgx.Tx, id, tenant uuid.UUID, deleted bool) (int, error) {
	cond := ""
	if t.soft {
		cond = " AND deleted_at IS NULL"
		if deleted {
			cond = " AND deleted_at IS NOT NULL"
		}
	}
	var v int
	err := tx.QueryRow(ctx, fmt.Sprintf("SELECT version FROM %s WHERE id = $1 AND tenant_id = $2%s FOR UPDATE", t.table, cond),
		[16]byte(id), [16]byte(tenant)).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, kumikotype.NewError(kumikotype.CodeNotFound, kumikotype.ReasonAggregateNotFound, fmt.Sprintf("no %s %s", t.e.Name(), id), nil)
	}
	return v, err
}

// CheckWrite refuses the first of fields (sorted) that u may not write,
// with access_denied (reason field_access, details.field); a field whose
// WrittenBy names command passes.
func (t *Entity) CheckWrite(u feature.User, fields []string, command string) *kumikotype.Error {
	slices.Sort(fields)
	for _, f := range fields {
		spec, ok := t.specs[f]
		if !ok || spec.CanWrite(u.Authenticated, u.HasRole) || (command != "" && slices.Contains(spec.WrittenBy, command)) {
			continue
		}
		return kumikotype.NewError(kumikotype.CodeAccessDenied, kumikotype.ReasonFieldAccess, "you may not write the field "+f, nil).With("field", f)
	}
	return nil
}

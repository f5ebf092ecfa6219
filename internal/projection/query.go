package projection

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/internal/spec"
	"github.com/kumiko-go/kumiko/registry"
)

// projectionContext is the feature.ProjectionContext of one inline apply.
type projectionContext struct {
	ctx    context.Context
	db     feature.DB
	tenant uuid.UUID
	table  string
}

func (p *projectionContext) Context() context.Context { return p.ctx }
func (p *projectionContext) DB() feature.DB           { return p.db }
func (p *projectionContext) Tenant() uuid.UUID        { return p.tenant }
func (p *projectionContext) Table() string            { return p.table }

// ApplyInline applies a freshly appended event inside its transaction to
// every inline projection fed by its stream's aggregate type.
func (s *Side) ApplyInline(ctx context.Context, tx pgx.Tx, ev eventstore.Event) error {
	return s.applyTo(ctx, tx, ev, s.reg.ProjectionsFor(ev.AggregateType))
}

// applyTo applies ev in tx to those of ps that apply its type.
func (s *Side) applyTo(ctx context.Context, tx pgx.Tx, ev eventstore.Event, ps []*registry.Projection) error {
	for _, p := range ps {
		apply, ok := p.Apply(ev.Type)
		if !ok {
			continue
		}
		pc := &projectionContext{ctx: ctx, db: tx, tenant: ev.TenantID, table: s.qualify(p.Table().Name)}
		if err := apply(pc, ev); err != nil {
			return fmt.Errorf("projection %s: %s: %w", p.Name(), ev.Type, err)
		}
	}
	return nil
}

// projectionQuery reads a projection table of one tenant.
type projectionQuery struct {
	ctx   context.Context
	db    feature.DB
	name  string           // the projection, for errors
	def   feature.TableDef // its declared columns
	table string           // schema-qualified
	// columns is the select list of the table's rows; "" is every
	// declared column (not a search's own: see searchsql).
	columns string
	tenant  uuid.UUID
	err     error
}

// sql builds the statement. The tenant filter is applied to the table in an
// inner query, so the author's Where only ever sees the tenant's rows (and
// only the columns the caller may read), whatever it says; it uses $1…$n for Args, and the tenant takes the next
// placeholder. Where must still be one condition (see checkWhere), OrderBy
// a list of the table's declared columns.
func (q *projectionQuery) sql(selectList string, f feature.ProjectionFilter, ordered bool) (string, []any, error) {
	if err := checkWhere(f.Where); err != nil {
		return "", nil, fmt.Errorf("projection %s: Where: %w", q.name, err)
	}
	order := ""
	if ordered {
		var err error
		if order, err = orderBy(q.def, f.OrderBy); err != nil {
			return "", nil, fmt.Errorf("projection %s: OrderBy: %w", q.name, err)
		}
	}
	args := append(slices.Clone(f.Args), [16]byte(q.tenant))
	var b strings.Builder
	fmt.Fprintf(&b, "SELECT %s FROM (SELECT %s FROM %s WHERE tenant_id = $%d) AS %s",
		selectList, cmp.Or(q.columns, declaredColumns(q.def)), q.table, len(args), pgx.Identifier{q.def.Name}.Sanitize())
	if f.Where != "" {
		fmt.Fprintf(&b, " WHERE (%s)", f.Where)
	}
	if order != "" {
		fmt.Fprintf(&b, " ORDER BY %s", order)
	}
	if f.Limit > 0 {
		fmt.Fprintf(&b, " LIMIT %d", f.Limit)
	}
	return b.String(), args, nil
}

// sqlFunctionWords are functions that run SQL text or read a table by name:
// a Where may not call them, as they read past the tenant filter.
var sqlFunctionWords = []string{"_to_xml", "dblink"}

// checkWhere refuses a Where that is not one condition over a row: an
// unclosed quote, a parenthesis closed before it was opened or left open,
// a statement separator, a comment, a dollar-quoted string, a subquery
// (SELECT or TABLE) or a function that runs SQL text. What stands inside
// quotes is not looked at.
func checkWhere(s string) error {
	depth := 0
	for i := 0; i < len(s); {
		c := s[i]
		next := byte(0)
		if i+1 < len(s) {
			next = s[i+1]
		}
		switch {
		case c == '\'' || c == '"':
			// E'…' strings escape with backslashes; all quotes double to escape.
			backslash := c == '\'' && i > 0 && (s[i-1] == 'e' || s[i-1] == 'E') && (i < 2 || !isIdentByte(s[i-2]))
			end := closingQuote(s, i, backslash)
			if end < 0 {
				return errors.New("a quote is not closed")
			}
			i = end + 1
			continue
		case c == '$':
			j := i + 1
			for j < len(s) && s[j] >= '0' && s[j] <= '9' {
				j++
			}
			if j == i+1 {
				return errors.New("$ may only start a placeholder ($1, $2, …); pass values through Args")
			}
			i = j
			continue
		case c == ';':
			return errors.New("; would end the statement")
		case c == '-' && next == '-', c == '/' && next == '*':
			return errors.New("comments are not allowed")
		case c == '(':
			depth++
		case c == ')':
			if depth--; depth < 0 {
				return errors.New("a parenthesis is closed that was not opened")
			}
		case isIdentByte(c) && (c < '0' || c > '9'):
			j := i
			for j < len(s) && isIdentByte(s[j]) {
				j++
			}
			word := strings.ToLower(s[i:j])
			if word == "select" || word == "table" {
				return errors.New("subqueries are not allowed: they read past the tenant filter")
			}
			for _, f := range sqlFunctionWords {
				if strings.Contains(word, f) {
					return fmt.Errorf("%s is not allowed: it reads past the tenant filter", word)
				}
			}
			i = j
			continue
		}
		i++
	}
	if depth != 0 {
		return errors.New("a parenthesis is not closed")
	}
	return nil
}

// closingQuote returns the index of the quote that closes the one at s[open],
// or -1; a doubled quote is part of the text, and so is a backslashed
// character when backslash is set.
func closingQuote(s string, open int, backslash bool) int {
	q := s[open]
	for j := open + 1; j < len(s); j++ {
		switch {
		case backslash && s[j] == '\\':
			j++
		case s[j] == q && j+1 < len(s) && s[j+1] == q:
			j++
		case s[j] == q:
			return j
		}
	}
	return -1
}

// isIdentByte reports whether c can be part of an unquoted SQL identifier or
// keyword (any non-ASCII byte can).
func isIdentByte(c byte) bool {
	return c == '_' || c >= 0x80 || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
}

// orderBy turns an OrderBy into SQL: a comma-separated list of the table's
// declared columns (bare, or double-quoted), each with an optional ASC or
// DESC and NULLS FIRST or NULLS LAST; "" is the primary key. Anything else
// is refused.
func orderBy(def feature.TableDef, s string) (string, error) {
	if strings.TrimSpace(s) == "" {
		key := make([]string, len(def.PrimaryKey))
		for i, col := range def.PrimaryKey {
			key[i] = pgx.Identifier{col}.Sanitize()
		}
		return strings.Join(key, ", "), nil
	}
	var out []string
	for item := range strings.SplitSeq(s, ",") {
		words := strings.Fields(item)
		if len(words) == 0 {
			return "", errors.New("an empty item")
		}
		col := words[0]
		if len(col) >= 2 && col[0] == '"' && col[len(col)-1] == '"' {
			col = col[1 : len(col)-1]
		} else {
			col = strings.ToLower(col)
		}
		if _, ok := def.Column(col); !ok {
			return "", fmt.Errorf("%q is not a column of %s", words[0], def.Name)
		}
		sql := pgx.Identifier{col}.Sanitize()
		rest := strings.ToUpper(strings.Join(words[1:], " "))
		for _, dir := range []string{"ASC", "DESC"} {
			if r, ok := strings.CutPrefix(rest, dir); ok && (r == "" || r[0] == ' ') {
				sql += " " + dir
				rest = strings.TrimSpace(r)
				break
			}
		}
		switch rest {
		case "":
		case "NULLS FIRST", "NULLS LAST":
			sql += " " + rest
		default:
			return "", fmt.Errorf("%q: a column may only be followed by ASC or DESC and NULLS FIRST or NULLS LAST", strings.TrimSpace(item))
		}
		out = append(out, sql)
	}
	return strings.Join(out, ", "), nil
}

func (q *projectionQuery) Rows(f feature.ProjectionFilter) ([]map[string]any, error) {
	if q.err != nil {
		return nil, q.err
	}
	sql, args, err := q.sql("*", f, true)
	if err != nil {
		return nil, err
	}
	rows, err := q.db.Query(q.ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("query projection: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (map[string]any, error) {
		m, err := pgx.RowToMap(r)
		row := make(map[string]any, len(m))
		for k, v := range m {
			if k != "tenant_id" {
				row[spec.JSONName(k)] = fromDB(v)
			}
		}
		return row, err
	})
	if err != nil {
		return nil, fmt.Errorf("query projection: %w", err)
	}
	return out, nil
}

func (q *projectionQuery) Row(f feature.ProjectionFilter) (map[string]any, error) {
	f.Limit = 1
	rows, err := q.Rows(f)
	if err != nil || len(rows) == 0 {
		return nil, err
	}
	return rows[0], nil
}

func (q *projectionQuery) Count(f feature.ProjectionFilter) (int64, error) {
	if q.err != nil {
		return 0, q.err
	}
	f.Limit = 0
	sql, args, err := q.sql("count(*)", f, false)
	if err != nil {
		return 0, err
	}
	var n int64
	if err := q.db.QueryRow(q.ctx, sql, args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("count projection: %w", err)
	}
	return n, nil
}

// Query reads the projection, table-backed multi-stream projection or
// entity read table called name in u's tenant, through db. With asCaller
// (a request's handler) it reads as u: the fields and columns u may not
// read are not columns of the table it sees, and a projection table still
// being built is refused; the system's own code (a projection's apply
// during its own catch-up) reads every column, as the table is.
func (s *Side) Query(ctx context.Context, db pgx.Tx, u feature.User, name string, asCaller bool) feature.ProjectionQuery {
	q := &projectionQuery{ctx: ctx, db: db, name: name, tenant: u.TenantID}
	checkBuilt := func(msp bool) error {
		if !asCaller {
			return nil
		}
		return s.checkBuilt(ctx, db, name, msp)
	}
	if t, ok := s.entities[name]; ok {
		q.def, q.table, q.tenant = t.e.Table(), t.table, t.Tenant(u)
		if asCaller {
			q.def, q.columns = t.readable(q.def, u)
		}
	} else if p, ok := s.reg.Projection(name); ok {
		q.def = p.Table()
		q.table = s.qualify(q.def.Name)
		q.err = checkBuilt(false)
	} else if m, ok := s.reg.MSP(name); ok {
		if td, ok := m.Table(); ok && hasColumn(td, "tenant_id") {
			q.def, q.table = td, s.qualify(td.Name)
			q.err = checkBuilt(true)
		} else {
			q.err = fmt.Errorf("projection %s has no table with a tenant_id column to filter by", name)
		}
	} else {
		q.err = fmt.Errorf("no projection %q", name)
	}
	if _, entity := s.entities[name]; !entity && q.err == nil && asCaller {
		// Columns with ReadRoles the caller holds none of are not part of
		// the table it sees.
		q.def, q.columns = readableColumns(q.def, u)
	}
	return q
}

// declaredColumns is the select list of def's columns.
func declaredColumns(def feature.TableDef) string {
	cols := make([]string, len(def.Columns))
	for i, c := range def.Columns {
		cols[i] = c.Name
	}
	return idents(cols)
}

func hasColumn(t feature.TableDef, name string) bool {
	_, ok := t.Column(name)
	return ok
}

// ApplyEverywhere applies ev inside its transaction to every inline
// projection that applies its type, whatever the projection's Source: the
// framework's own events (feature.SubjectForgottenEvent) reach every
// projection that asks for them.
func (s *Side) ApplyEverywhere(ctx context.Context, tx pgx.Tx, ev eventstore.Event) error {
	return s.applyTo(ctx, tx, ev, s.reg.Projections())
}

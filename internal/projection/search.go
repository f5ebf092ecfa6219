package projection

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/internal/searchsql"
	"github.com/kumiko-go/kumiko/internal/spec"
	"github.com/kumiko-go/kumiko/kumikotype"
	"github.com/kumiko-go/kumiko/registry"
	"github.com/kumiko-go/kumiko/search"
)

// A full-text search (feature.Registrar.Search) lives in the table it
// searches (internal/searchsql): its generated columns follow every write
// of a row in its transaction — an entity's write, an inline projection's
// apply in the write's transaction, a multi-stream projection's in its
// consumer's pass, a rebuild's replay, a forget that nulls a personal
// field.

// searchPlan is an entity's search as its read table holds it, or as its
// engine does.
type searchPlan struct {
	config string
	fields []searchsql.Field // by name; none with an engine
	// engine, when set, is the engine the search runs on (engineName in
	// the configuration), holding index.
	engine     search.Engine
	engineName string
	index      search.Index
}

// newSearchPlan is t's search; an engine it names must be in engines.
func newSearchPlan(t *Entity, engines map[string]search.Engine) (*searchPlan, error) {
	s, ok := t.e.Search()
	if !ok {
		return nil, nil
	}
	p := &searchPlan{config: s.Config}
	if s.Engine == "" {
		p.fields = searchsql.Fields(t.e.Table().Name, s.Config, s.Fields, func(name string) string { return t.cols[name] }, spec.ColumnName)
		return p, nil
	}
	if p.engine = engines[s.Engine]; p.engine == nil {
		return nil, fmt.Errorf("search of %s runs on the search engine %q, which the configuration does not register (SearchEngines)", t.e.Name(), s.Engine)
	}
	p.engineName, p.index = s.Engine, engineIndex(t, s)
	return p, nil
}

// runSearch runs in's search in target on the pool; a cursor of another
// search is a validation_error.
func (s *Side) runSearch(ctx context.Context, target searchsql.Target, in registry.SearchInput) ([]searchsql.Hit, string, error) {
	var err error
	if target.Trgm, err = s.trgm.Schema(ctx, s.pool); err != nil {
		return nil, "", err
	}
	hits, next, err := searchsql.Search(ctx, s.pool, target, in.Q, in.Limit, in.Cursor)
	return hits, next, cursorError(err)
}

// cursorError turns search.ErrInvalidCursor into the validation_error
// (invalid_cursor) a caller gets; other errors pass.
func cursorError(err error) error {
	if errors.Is(err, search.ErrInvalidCursor) {
		return kumikotype.NewError(kumikotype.CodeValidation, kumikotype.ReasonInvalidCursor, "the cursor does not belong to this search", err)
	}
	return err
}

// ensureSearch adds an entity's search columns and indexes to its read
// table and drops those of an earlier declaration (all of them when the
// search runs on an engine).
func (s *Side) ensureSearch(ctx context.Context, tx pgx.Tx, t *Entity) error {
	if t.search == nil {
		return nil
	}
	return s.ensureSearchOf(ctx, tx, t.e.Name(), t.table, t.search.config, t.search.fields)
}

// ensureSearchOf adds the search columns and indexes of fields to table
// (schema-qualified), the one of name's search, and drops those of an
// earlier declaration.
func (s *Side) ensureSearchOf(ctx context.Context, tx pgx.Tx, name, table, config string, fields []searchsql.Field) error {
	trgm, _, err := searchsql.Ensure(ctx, tx, s.schema, table, config, fields)
	if err != nil {
		return fmt.Errorf("search of %s: %w", name, err)
	}
	s.trgm.Set(trgm)
	return nil
}

// tableSearch is the search of an inline or multi-stream projection's
// table.
type tableSearch struct {
	name   string // the projection
	msp    bool
	def    feature.TableDef
	table  string // schema-qualified
	config string
	// weights are the searchable columns' weights, by column name.
	weights map[string]byte
	fields  []searchsql.Field // of the live table, by column name
	// key is the primary key, which orders equal ranks.
	key []searchsql.Key
	// byJSON maps the columns but tenant_id by their JSON names.
	byJSON map[string]feature.Column
}

func newTableSearch(schema, name string, msp bool, def feature.TableDef, s registry.Search) *tableSearch {
	ts := &tableSearch{name: name, msp: msp, def: def, table: pgx.Identifier{schema, def.Name}.Sanitize(),
		config: s.Config, weights: s.Fields, byJSON: map[string]feature.Column{}}
	ts.fields = ts.fieldsOf(def.Name)
	for _, col := range def.PrimaryKey {
		c, _ := def.Column(col)
		ts.key = append(ts.key, searchsql.Key{Col: pgx.Identifier{col}.Sanitize(), Type: c.Type})
	}
	for _, c := range def.Columns {
		if c.Name != "tenant_id" {
			ts.byJSON[spec.JSONName(c.Name)] = c
		}
	}
	return ts
}

// fieldsOf are the search's fields in the table called table (unquoted):
// the live table or its rebuild's shadow, whose index names differ.
func (ts *tableSearch) fieldsOf(table string) []searchsql.Field {
	return searchsql.Fields(table, ts.config, ts.weights,
		func(col string) string { return pgx.Identifier{col}.Sanitize() }, func(col string) string { return col })
}

// tableSearches are the searches of projection tables, in registry order.
func (s *Side) tableSearches() []*tableSearch {
	var out []*tableSearch
	for _, p := range s.reg.Projections() {
		if ts := s.tables[p.Name()]; ts != nil {
			out = append(out, ts)
		}
	}
	for _, m := range s.reg.MSPs() {
		if ts := s.tables[m.Name()]; ts != nil {
			out = append(out, ts)
		}
	}
	return out
}

// tableSearches are the searches of the registry's projection tables, by
// projection.
func tableSearches(schema string, reg *registry.Registry) map[string]*tableSearch {
	out := map[string]*tableSearch{}
	for _, p := range reg.Projections() {
		if s, ok := p.Search(); ok {
			out[p.Name()] = newTableSearch(schema, p.Name(), false, p.Table(), s)
		}
	}
	for _, m := range reg.MSPs() {
		s, ok := m.Search()
		if t, hasTable := m.Table(); ok && hasTable {
			out[m.Name()] = newTableSearch(schema, m.Name(), true, t, s)
		}
	}
	return out
}

// SearchResult is a page of a search, as handlers see it too.
type SearchResult = feature.SearchResults

// SearchHit is one row a search found.
type SearchHit = feature.SearchHit

// Search answers an entity's search query for u: the rows of u's tenant
// in which every word of in.Q matches a searchable field u may read, best
// first, then by id, with highlighted snippets (searchsql.Search).
func (s *Side) Search(ctx context.Context, u feature.User, t *Entity, in registry.SearchInput) (SearchResult, error) {
	p := t.search
	if p == nil {
		return SearchResult{}, fmt.Errorf("entity %s has no search", t.e.Name())
	}
	for f := range in.Filter {
		if err := t.checkRead(u, f); err != nil {
			return SearchResult{}, err
		}
	}
	if p.engine != nil {
		var readable []string
		for _, f := range slices.Sorted(maps.Keys(p.index.Fields)) {
			if t.specs[f].CanRead(u.Authenticated, u.HasRole) {
				readable = append(readable, f)
			}
		}
		return s.searchEngine(ctx, u, t, in, readable)
	}
	target := searchsql.Target{Table: t.table, Config: p.config, Select: t.selectList,
		Key: []searchsql.Key{{Col: "id", Type: "uuid"}}, Args: []any{[16]byte(t.Tenant(u))}, Where: []string{"tenant_id = $1"}}
	for _, f := range p.fields {
		if t.specs[f.Name].CanRead(u.Authenticated, u.HasRole) {
			target.Fields = append(target.Fields, f)
		}
	}
	if t.soft {
		target.Where = append(target.Where, "deleted_at IS NULL")
	}
	target.Where = append(target.Where, t.filterWhere(in.Filter, func(v any, typ string) string {
		target.Args = append(target.Args, toText(v, typ))
		return fmt.Sprintf("$%d::text::%s", len(target.Args), typ)
	})...)
	hits, next, err := s.runSearch(ctx, target, in)
	if err != nil {
		return SearchResult{}, err
	}
	res := SearchResult{Hits: make([]SearchHit, len(hits)), NextCursor: next}
	for i, h := range hits {
		res.Hits[i] = SearchHit{Row: t.Visible(t.rowOf(h.Values), u), Rank: h.Rank, Highlights: h.Highlights}
	}
	return res, nil
}

// SearchProjection answers the search query of the inline or multi-stream
// projection called name for u: the rows of u's tenant in which every word
// of in.Q matches a searchable column u may read, best first, then by
// primary key, with highlighted snippets. A row is its columns u may read
// but tenant_id, by their JSON names, as QueryProjection answers it; a
// filter by a column u may not read is refused (access_denied,
// field_access). A table still being built from the stored events
// answers projection_rebuild_in_progress, as its queries do.
func (s *Side) SearchProjection(ctx context.Context, u feature.User, name string, in registry.SearchInput) (SearchResult, error) {
	ts := s.tables[name]
	if ts == nil {
		return SearchResult{}, fmt.Errorf("projection %s has no search", name)
	}
	readable, _ := readableColumns(ts.def, u)
	canRead := map[string]bool{}
	var cols []string
	for _, c := range readable.Columns {
		canRead[c.Name] = true
		if c.Name != "tenant_id" {
			cols = append(cols, c.Name)
		}
	}
	target := searchsql.Target{Table: ts.table, Config: ts.config, Select: idents(cols), Key: ts.key,
		Args: []any{[16]byte(u.TenantID)}, Where: []string{"tenant_id = $1"}}
	for _, f := range slices.Sorted(maps.Keys(in.Filter)) {
		c := ts.byJSON[f]
		if !canRead[c.Name] {
			return SearchResult{}, kumikotype.NewError(kumikotype.CodeAccessDenied, kumikotype.ReasonFieldAccess, "you may not read the column "+f, nil).With("field", f)
		}
		col, typ := pgx.Identifier{c.Name}.Sanitize(), spec.FilterType(c.Type).ColumnType()
		if v := in.Filter[f]; v == nil {
			target.Where = append(target.Where, col+" IS NULL")
		} else {
			target.Args = append(target.Args, toText(v, typ))
			target.Where = append(target.Where, fmt.Sprintf("%s = $%d::text::%s", col, len(target.Args), typ))
		}
	}
	for _, f := range ts.fields {
		if canRead[f.Name] {
			target.Fields = append(target.Fields, f)
		}
	}
	if err := s.checkBuiltOnPool(ctx, name, ts.msp); err != nil {
		return SearchResult{}, err
	}
	hits, next, err := s.runSearch(ctx, target, in)
	if err != nil {
		return SearchResult{}, err
	}
	res := SearchResult{Hits: make([]SearchHit, len(hits)), NextCursor: next}
	for i, h := range hits {
		row := make(map[string]any, len(cols))
		for j, col := range cols {
			row[spec.JSONName(col)] = fromDB(h.Values[j])
		}
		highlights := make(map[string]string, len(h.Highlights))
		for col, snippet := range h.Highlights {
			highlights[spec.JSONName(col)] = snippet
		}
		res.Hits[i] = SearchHit{Row: row, Rank: h.Rank, Highlights: highlights}
	}
	return res, nil
}

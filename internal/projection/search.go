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

// An entity's full-text search (feature.Registrar.Search) lives in its read
// table (internal/searchsql): its generated columns follow every write of
// the row in its transaction, a rebuild, and a forget that nulls a
// personal field.

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

// trgmSchema is the schema holding pg_trgm, quoted, looked up once.
func (s *Side) trgmSchema(ctx context.Context) (string, error) {
	if v := s.trgm.Load(); v != nil {
		return *v, nil
	}
	schema, err := searchsql.FindTrgm(ctx, s.pool)
	if err != nil {
		return "", err
	}
	s.trgm.Store(&schema)
	return schema, nil
}

// ensureSearch adds an entity's search columns and indexes to its read
// table and drops those of an earlier declaration (all of them when the
// search runs on an engine).
func (s *Side) ensureSearch(ctx context.Context, tx pgx.Tx, t *Entity) error {
	if t.search == nil {
		return nil
	}
	trgm, _, err := searchsql.Ensure(ctx, tx, s.schema, t.table, t.search.config, t.search.fields)
	if err != nil {
		return fmt.Errorf("search of %s: %w", t.e.Name(), err)
	}
	s.trgm.Store(&trgm)
	return nil
}

// SearchResult is a page of an entity's search.
type SearchResult struct {
	Hits []SearchHit `json:"hits"`
	// NextCursor continues after the page; "" on the last.
	NextCursor string `json:"nextCursor"`
}

// SearchHit is one row a search found.
type SearchHit struct {
	// Row is the row as the caller may see it.
	Row map[string]any `json:"row"`
	// Rank orders the hits: higher is better.
	Rank float64 `json:"rank"`
	// Highlights holds, for each searchable field the caller may read
	// that matched, a snippet of it with the matches in <mark>…</mark>;
	// the rest of the snippet is HTML-escaped.
	Highlights map[string]string `json:"highlights"`
}

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
	var err error
	if target.Trgm, err = s.trgmSchema(ctx); err != nil {
		return SearchResult{}, err
	}
	hits, next, err := searchsql.Search(ctx, s.pool, target, in.Q, in.Limit, in.Cursor)
	if errors.Is(err, search.ErrInvalidCursor) {
		return SearchResult{}, kumikotype.NewError(kumikotype.CodeValidation, kumikotype.ReasonInvalidCursor, "the cursor does not belong to this search", err)
	}
	if err != nil {
		return SearchResult{}, err
	}
	res := SearchResult{Hits: make([]SearchHit, len(hits)), NextCursor: next}
	for i, h := range hits {
		res.Hits[i] = SearchHit{Row: t.Visible(t.rowOf(h.Values), u), Rank: h.Rank, Highlights: h.Highlights}
	}
	return res, nil
}

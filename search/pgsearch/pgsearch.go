// Package pgsearch is the reference search.Engine, on PostgreSQL: each
// index is a table of its own in a schema, holding a row per tenant and
// document, made searchable by the same generated columns, indexes and
// query as kumiko's search in the read tables (docs/search.md): words
// match as prefixes, then with a typo when nothing matches so; hits are
// ranked by the fields' weights, highlighted and paged by keyset cursors.
//
// It needs PostgreSQL 15 or later with the extension pg_trgm, which Ensure
// creates in the schema public when the database has it nowhere (the
// user needs the right to create it, or an administrator creates it once).
//
//	engine, err := pgsearch.New(pool, "search")
//	…
//	fresh, err := engine.Ensure(ctx, search.Index{Name: "tickets",
//		Fields: map[string]byte{"title": 'A', "notes": 'B'}, Filters: []string{"status"}})
//	…
//	err = engine.Put(ctx, "tickets", search.Document{Tenant: tenant, ID: id,
//		Text: map[string]string{"title": "Invoice overdue"}, Values: map[string]string{"status": "open"}})
//	…
//	page, err := engine.Search(ctx, "tickets", search.Query{Tenant: tenant, Text: "invoice",
//		Fields: []string{"title", "notes"}, Filter: map[string]string{"status": "open"}, Limit: 20})
//
// The package searchtest is the conformance suite it passes.
package pgsearch

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kumiko-go/kumiko/internal/searchsql"
	"github.com/kumiko-go/kumiko/search"
)

// ErrUnknownIndex is the error of Put, Delete and Search on an index that
// no Ensure created in the engine's schema.
var ErrUnknownIndex = errors.New("pgsearch: unknown index")

// ErrUnknownFilter is the error of a search that filters by a field that
// is not one of its index's Filters.
var ErrUnknownFilter = errors.New("pgsearch: not a filter of the index")

// MaxLimit is the most hits a page may ask for (search.Query.Limit).
const MaxLimit = 200

// layoutVersion is part of every fingerprint: a change of the tables'
// layout in a later release makes every index anew.
const layoutVersion = "pgsearch/1"

var (
	indexNameRe  = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
	identifierRe = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)
)

// maxIndexName is the longest index name (search.Engine), and
// maxIdentifier PostgreSQL's longest identifier.
const (
	maxIndexName  = 40
	maxIdentifier = 63
)

// Engine is a search.Engine on PostgreSQL. Its methods may be called
// concurrently, and several engines (processes) may share a schema: an
// engine learns an index another one ensured from the database, and one
// whose index another engine changed learns the change at its next call.
type Engine struct {
	pool   *pgxpool.Pool
	schema string
	sql    queries

	mu      sync.Mutex
	indexes map[string]*index // the indexes this engine knows, by name

	trgm searchsql.Trgm // the schema of pg_trgm
}

var _ search.Engine = (*Engine)(nil)

// New returns an engine keeping its indexes in schema ("" is "public"), a
// lowercase identifier of at most 63 bytes, on pool. It does not touch the
// database: Ensure creates the schema, the tables and the extension
// pg_trgm when they are missing.
func New(pool *pgxpool.Pool, schema string) (*Engine, error) {
	if pool == nil {
		return nil, errors.New("pgsearch: pool is nil")
	}
	if schema == "" {
		schema = "public"
	}
	if !identifierRe.MatchString(schema) || len(schema) > maxIdentifier {
		return nil, fmt.Errorf("pgsearch: schema %q is not a lowercase identifier of at most %d bytes (letters, digits and '_', not starting with a digit)", schema, maxIdentifier)
	}
	return &Engine{pool: pool, schema: schema, sql: newQueries(schema), indexes: map[string]*index{}}, nil
}

// Schema is the schema holding the engine's tables.
func (e *Engine) Schema() string { return e.schema }

// index is an index as the engine knows it.
type index struct {
	def         search.Index // normalised
	fingerprint string
	table       string            // quoted, qualified
	fields      []searchsql.Field // by name
	byName      map[string]int    // fields' positions
	filters     map[string]bool   // the filter fields
	sql         tableQueries
}

// definition is an index's definition as the registry stores it.
type definition struct {
	Fields  map[string]string `json:"fields"` // weight, "A"–"D"
	Filters []string          `json:"filters"`
	Config  string            `json:"config"`
}

// check refuses a definition the engine cannot hold, naming what is wrong,
// and returns it normalised: the configuration "simple" for "", the
// filters sorted and without duplicates.
func check(def search.Index) (search.Index, error) {
	if !indexNameRe.MatchString(def.Name) || len(def.Name) > maxIndexName {
		return def, fmt.Errorf("pgsearch: index name %q is not a lowercase identifier of at most %d bytes (letters, digits and '_', starting with a letter)", def.Name, maxIndexName)
	}
	if len(def.Fields) == 0 {
		return def, fmt.Errorf("pgsearch: index %q has no searchable field", def.Name)
	}
	for _, name := range slices.Sorted(maps.Keys(def.Fields)) {
		if w := def.Fields[name]; w < 'A' || w > 'D' {
			return def, fmt.Errorf("pgsearch: index %q: field %q has weight %q; weights are 'A' to 'D'", def.Name, name, rune(w))
		}
		if name == "" || !utf8.ValidString(name) || strings.ContainsRune(name, 0) {
			return def, fmt.Errorf("pgsearch: index %q: a field name must be non-empty UTF-8 text without NUL, not %q", def.Name, name)
		}
	}
	for _, f := range def.Filters {
		if f == "" || !utf8.ValidString(f) || strings.ContainsRune(f, 0) {
			return def, fmt.Errorf("pgsearch: index %q: a filter name must be non-empty UTF-8 text without NUL, not %q", def.Name, f)
		}
	}
	if def.Config == "" {
		def.Config = "simple"
	}
	if !identifierRe.MatchString(def.Config) || len(def.Config) > maxIdentifier {
		return def, fmt.Errorf("pgsearch: index %q: Config %q is not the name of a text search configuration", def.Name, def.Config)
	}
	def.Fields = maps.Clone(def.Fields)
	def.Filters = slices.Compact(slices.Sorted(slices.Values(def.Filters)))
	return def, nil
}

// fingerprint identifies what an index's table is made of.
func fingerprint(d definition) string {
	raw, _ := json.Marshal(d) // map keys sorted: canonical
	h := sha256.Sum256(append([]byte(layoutVersion+"\x00"), raw...))
	return hex.EncodeToString(h[:16])
}

func toDefinition(def search.Index) definition {
	d := definition{Fields: map[string]string{}, Filters: def.Filters, Config: def.Config}
	for name, w := range def.Fields {
		d.Fields[name] = string(rune(w))
	}
	if d.Filters == nil {
		d.Filters = []string{}
	}
	return d
}

// newIndex is the index of def (checked) with its fingerprint.
func (e *Engine) newIndex(def search.Index, fp string) *index {
	table := tablePrefix + def.Name
	ix := &index{def: def, fingerprint: fp, table: pgx.Identifier{e.schema, table}.Sanitize(),
		byName: map[string]int{}, filters: map[string]bool{}}
	ix.fields = searchsql.Fields(table, def.Config, def.Fields, func(name string) string {
		return pgx.Identifier{fieldColumn(name)}.Sanitize()
	}, fieldColumn)
	cols := make([]string, len(ix.fields))
	for i, f := range ix.fields {
		ix.byName[f.Name] = i
		cols[i] = f.Col
	}
	for _, f := range def.Filters {
		ix.filters[f] = true
	}
	ix.sql = e.sql.newTableQueries(ix.table, pgx.Identifier{pkPrefix + def.Name}.Sanitize(), cols)
	return ix
}

// fieldColumn is the column of a searchable field: any text may name a
// field, so the column is named by a hash of it.
func fieldColumn(name string) string {
	h := sha256.Sum256([]byte(name))
	return "f_" + hex.EncodeToString(h[:8])
}

// Ensure creates the index def or changes it to def, under a lock of the
// schema that the Ensures of other engines on it wait for. It refuses a
// name that is not a lowercase identifier of at most 40 bytes, an index
// without fields, a weight outside 'A'–'D' and a configuration ("" is
// "simple") that is not one of the database's. When the index is new or
// its fields, weights, filters or configuration changed, its table is
// made anew, empty, and fresh is true.
func (e *Engine) Ensure(ctx context.Context, def search.Index) (fresh bool, err error) {
	if def, err = check(def); err != nil {
		return false, err
	}
	d := toDefinition(def)
	ix := e.newIndex(def, fingerprint(d))
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		return false, fmt.Errorf("pgsearch: ensure %s: %w", def.Name, err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if fresh, err = e.ensure(ctx, tx, ix, d); err != nil {
		return false, err
	}
	if err := tx.Commit(ctx); err != nil {
		return false, fmt.Errorf("pgsearch: ensure %s: %w", def.Name, err)
	}
	e.remember(ix)
	return fresh, nil
}

func (e *Engine) ensure(ctx context.Context, tx pgx.Tx, ix *index, d definition) (bool, error) {
	name := ix.def.Name
	wrap := func(err error) error { return fmt.Errorf("pgsearch: ensure %s: %w", name, err) }
	var pg *pgconn.PgError
	if _, err := tx.Exec(ctx, sqlCheckConfig, ix.def.Config); errors.As(err, &pg) && pg.Code == "42704" {
		return false, fmt.Errorf("pgsearch: index %q: %q is not a text search configuration of the database (\\dF in psql lists them)", name, ix.def.Config)
	} else if err != nil {
		return false, wrap(err)
	}
	if _, err := tx.Exec(ctx, sqlLockSchema, "kumiko.search.pgsearch:"+e.schema); err != nil {
		return false, wrap(err)
	}
	var exists bool
	if err := tx.QueryRow(ctx, sqlSchemaExists, e.schema).Scan(&exists); err != nil {
		return false, wrap(err)
	}
	if !exists {
		if _, err := tx.Exec(ctx, e.sql.of(sqlCreateSchema)); err != nil {
			return false, wrap(err)
		}
	}
	if _, err := tx.Exec(ctx, e.sql.of(sqlCreateRegistry)); err != nil {
		return false, wrap(err)
	}
	var fp string
	var hasTable bool
	err := tx.QueryRow(ctx, e.sql.of(sqlRegistered), name, ix.table).Scan(&fp, &hasTable)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return false, wrap(err)
	}
	if fp == ix.fingerprint && hasTable {
		return false, nil
	}
	for _, stmt := range []string{ix.sql.drop, ix.sql.create} {
		if _, err := tx.Exec(ctx, stmt); err != nil {
			return false, wrap(err)
		}
	}
	trgm, _, err := searchsql.Ensure(ctx, tx, e.schema, ix.table, ix.def.Config, ix.fields)
	if err != nil {
		return false, wrap(err)
	}
	e.trgm.Set(trgm)
	raw, err := json.Marshal(d)
	if err != nil {
		return false, wrap(err)
	}
	if _, err := tx.Exec(ctx, e.sql.of(sqlRegister), name, ix.fingerprint, string(raw)); err != nil {
		return false, wrap(err)
	}
	return true, nil
}

func (e *Engine) remember(ix *index) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.indexes[ix.def.Name] = ix
}

// lookup returns the index named name: the one the engine knows or, when
// it knows none or the one it knows is stale, the database's. It returns
// stale itself when the database still holds that.
func (e *Engine) lookup(ctx context.Context, name string, stale *index) (*index, error) {
	if stale == nil {
		e.mu.Lock()
		ix := e.indexes[name]
		e.mu.Unlock()
		if ix != nil {
			return ix, nil
		}
	}
	if !indexNameRe.MatchString(name) || len(name) > maxIndexName {
		return nil, fmt.Errorf("%w %q", ErrUnknownIndex, name)
	}
	var fp, raw string
	err := e.pool.QueryRow(ctx, e.sql.of(sqlDefinition), name).Scan(&fp, &raw)
	var pg *pgconn.PgError
	if errors.Is(err, pgx.ErrNoRows) || errors.As(err, &pg) && (pg.Code == "42P01" || pg.Code == "3F000") {
		e.forget(name)
		return nil, fmt.Errorf("%w %q: Ensure creates it", ErrUnknownIndex, name)
	}
	if err != nil {
		return nil, fmt.Errorf("pgsearch: index %s: %w", name, err)
	}
	if stale != nil && fp == stale.fingerprint {
		return stale, nil
	}
	var d definition
	if err := json.Unmarshal([]byte(raw), &d); err != nil {
		return nil, fmt.Errorf("pgsearch: index %s: its definition: %w", name, err)
	}
	def := search.Index{Name: name, Fields: map[string]byte{}, Filters: d.Filters, Config: d.Config}
	for f, w := range d.Fields {
		if len(w) != 1 {
			return nil, fmt.Errorf("pgsearch: index %s: field %q has weight %q", name, f, w)
		}
		def.Fields[f] = w[0]
	}
	ix := e.newIndex(def, fp)
	e.remember(ix)
	return ix, nil
}

func (e *Engine) forget(name string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.indexes, name)
}

// withIndex runs fn on the index named name. When fn reports that its
// result may come from a stale index (another engine's Ensure made the
// table anew), the index is looked up again and, if it changed, fn runs
// once more on the new one.
func (e *Engine) withIndex(ctx context.Context, name string, fn func(ix *index) (maybeStale bool, err error)) error {
	ix, err := e.lookup(ctx, name, nil)
	if err != nil {
		return err
	}
	maybeStale, err := fn(ix)
	if !maybeStale {
		return err
	}
	now, lerr := e.lookup(ctx, name, ix)
	if lerr != nil {
		return lerr
	}
	if now == ix {
		return err
	}
	_, err = fn(now)
	return err
}

// undefined reports whether err is PostgreSQL's undefined table or
// column: the statement was made for a table that is no longer so.
func undefined(err error) bool {
	var pg *pgconn.PgError
	return errors.As(err, &pg) && (pg.Code == "42P01" || pg.Code == "42703")
}

// storable reports whether PostgreSQL's text can hold s: UTF-8 without
// NUL.
func storable(s string) bool { return utf8.ValidString(s) && !strings.ContainsRune(s, 0) }

// cleanText makes s storable: invalid UTF-8 becomes U+FFFD, NUL a space.
// Neither is part of a word.
func cleanText(s string) string {
	if storable(s) {
		return s
	}
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", " ")
}

// Put adds the documents to the index or replaces those of the same
// tenant and id (the last of one id in docs wins), in one statement. Text
// of a field the index does not search is left out; a field's text that
// is not valid UTF-8 or holds NUL bytes is stored with U+FFFD and spaces
// in their place. Values are stored as given: an ID or a value that
// PostgreSQL cannot store (invalid UTF-8, NUL) is an error.
func (e *Engine) Put(ctx context.Context, name string, docs ...search.Document) error {
	if len(docs) == 0 {
		return nil
	}
	// The last document of each tenant and id: one statement may not
	// change a row twice.
	type key struct {
		tenant uuid.UUID
		id     string
	}
	last := map[key]int{}
	for i, d := range docs {
		if d.ID == "" || !storable(d.ID) {
			return fmt.Errorf("pgsearch: put %s: document id %q is not non-empty UTF-8 text without NUL", name, d.ID)
		}
		for f, v := range d.Values {
			if !storable(f) || !storable(v) {
				return fmt.Errorf("pgsearch: put %s: document %q: value %q of %q is not UTF-8 text without NUL", name, d.ID, v, f)
			}
		}
		last[key{d.Tenant, d.ID}] = i
	}
	return e.withIndex(ctx, name, func(ix *index) (bool, error) {
		n := len(last)
		tenants, ids, vals := make([]string, 0, n), make([]string, 0, n), make([]string, 0, n)
		texts := make([][]*string, len(ix.fields))
		for i := range texts {
			texts[i] = make([]*string, 0, n)
		}
		for i, d := range docs {
			if last[key{d.Tenant, d.ID}] != i {
				continue
			}
			values := d.Values
			if values == nil {
				values = map[string]string{}
			}
			raw, err := json.Marshal(values)
			if err != nil {
				return false, fmt.Errorf("pgsearch: put %s: %w", name, err)
			}
			tenants, ids, vals = append(tenants, d.Tenant.String()), append(ids, d.ID), append(vals, string(raw))
			for j, f := range ix.fields {
				var text *string
				if s, ok := d.Text[f.Name]; ok {
					s = cleanText(s)
					text = &s
				}
				texts[j] = append(texts[j], text)
			}
		}
		args := []any{ix.def.Name, ix.fingerprint, tenants, ids, vals}
		for _, t := range texts {
			args = append(args, t)
		}
		tag, err := e.pool.Exec(ctx, ix.sql.put, args...)
		if err != nil {
			return undefined(err), fmt.Errorf("pgsearch: put %s: %w", name, err)
		}
		if tag.RowsAffected() != int64(n) {
			return true, fmt.Errorf("pgsearch: put %s: the index changed while putting (another engine's Ensure); put again", name)
		}
		return false, nil
	})
}

// Delete removes the documents of tenant with the ids; an unknown id is no
// error.
func (e *Engine) Delete(ctx context.Context, name string, tenant uuid.UUID, ids ...string) error {
	keep := make([]string, 0, len(ids))
	for _, id := range ids {
		if storable(id) { // others cannot have been put
			keep = append(keep, id)
		}
	}
	return e.withIndex(ctx, name, func(ix *index) (bool, error) {
		if len(keep) == 0 {
			return false, nil
		}
		if _, err := e.pool.Exec(ctx, ix.sql.delete, tenant.String(), keep); err != nil {
			return undefined(err), fmt.Errorf("pgsearch: delete from %s: %w", name, err)
		}
		return false, nil
	})
}

// Search answers q in the index (search.Query): the documents of q.Tenant
// whose Values equal q.Filter, in which every word of q.Text matches one
// of the index's fields among q.Fields (others are ignored), best first,
// then by ID in byte order. q.Limit must be 1–200; a filter by a field
// that is not one of the index's Filters is ErrUnknownFilter, and a
// cursor of another search search.ErrInvalidCursor. A page without hits
// has an empty, non-nil Hits.
func (e *Engine) Search(ctx context.Context, name string, q search.Query) (search.Page, error) {
	if q.Limit < 1 || q.Limit > MaxLimit {
		return search.Page{}, fmt.Errorf("pgsearch: search %s: Query.Limit %d is outside 1–%d", name, q.Limit, MaxLimit)
	}
	// searchsql's cursor binds the words and the fields; the tag binds
	// the tenant and the filter.
	tag, after := cursorTag(q.Tenant, q.Filter), ""
	if q.Cursor != "" {
		var ok bool
		if after, ok = strings.CutSuffix(q.Cursor, "."+tag); !ok || after == "" {
			return search.Page{}, search.ErrInvalidCursor
		}
	}
	var page search.Page
	err := e.withIndex(ctx, name, func(ix *index) (bool, error) {
		page = search.Page{Hits: []search.Hit{}}
		for _, f := range slices.Sorted(maps.Keys(q.Filter)) {
			if !ix.filters[f] {
				// Unknown here; maybe not to the database's index.
				return true, fmt.Errorf("%w: search %s filters by %q; its filters are %q", ErrUnknownFilter, name, f, ix.def.Filters)
			}
		}
		t := searchsql.Target{Table: ix.table, Config: ix.def.Config,
			Select: selectHit, Key: []searchsql.Key{{Col: keyCol, Type: keyType}}}
		arg := func(v any) int {
			t.Args = append(t.Args, v)
			return len(t.Args)
		}
		t.Where = append(t.Where, fmt.Sprintf(whereTenant, arg(q.Tenant.String())),
			fmt.Sprintf(ix.sql.fingerprint, arg(ix.def.Name), arg(ix.fingerprint)))
		for _, f := range slices.Sorted(maps.Keys(q.Filter)) {
			v := q.Filter[f]
			if !storable(v) {
				return false, nil // no document has it
			}
			t.Where = append(t.Where, fmt.Sprintf(whereFilter, arg(f), arg(v)))
		}
		seen := map[string]bool{}
		for _, f := range q.Fields {
			if i, ok := ix.byName[f]; ok && !seen[f] {
				seen[f] = true
				t.Fields = append(t.Fields, ix.fields[i])
			}
		}
		// searchsql matches the fields in the order given: by name, as
		// the cursor binds them.
		slices.SortFunc(t.Fields, func(a, b searchsql.Field) int { return strings.Compare(a.Name, b.Name) })
		if len(t.Fields) == 0 || len(searchsql.Words(q.Text)) == 0 {
			return false, nil
		}
		trgm, err := e.trgm.Schema(ctx, e.pool)
		if err != nil {
			return false, fmt.Errorf("pgsearch: search %s: %w", name, err)
		}
		t.Trgm = trgm
		hits, next, err := searchsql.Search(ctx, e.pool, t, q.Text, q.Limit, after)
		if errors.Is(err, search.ErrInvalidCursor) {
			return false, err
		}
		if err != nil {
			return undefined(err), fmt.Errorf("pgsearch: search %s: %w", name, err)
		}
		for _, h := range hits {
			id, _ := h.Values[0].(string)
			page.Hits = append(page.Hits, search.Hit{ID: id, Rank: h.Rank, Highlights: h.Highlights})
		}
		if next != "" {
			page.NextCursor = next + "." + tag
		}
		// No hit: maybe the table is made anew for another definition.
		return len(hits) == 0, nil
	})
	if err != nil {
		return search.Page{}, err
	}
	return page, nil
}

// cursorTag identifies a search's tenant and filter in its cursors.
func cursorTag(tenant uuid.UUID, filter map[string]string) string {
	h := sha256.New()
	h.Write(tenant[:])
	for _, f := range slices.Sorted(maps.Keys(filter)) {
		h.Write([]byte(f + "\x00" + filter[f] + "\x00"))
	}
	return base64.RawURLEncoding.EncodeToString(h.Sum(nil)[:9])
}

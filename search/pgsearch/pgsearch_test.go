package pgsearch_test

import (
	"crypto/rand"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/kumikotest"
	"github.com/kumiko-go/kumiko/search"
	"github.com/kumiko-go/kumiko/search/pgsearch"
	"github.com/kumiko-go/kumiko/search/searchtest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t, kumikotest.MaxConns(20))
	searchtest.Run(t, func(t *testing.T) search.Engine {
		return newEngine(t, db.Pool, newSchema(t, db))
	})
}

// newSchema names a schema of the test's own, dropped when it ends; the
// first Ensure creates it.
func newSchema(t *testing.T, db *kumikotest.DB) string {
	t.Helper()
	schema := "s_" + strings.ToLower(rand.Text())
	t.Cleanup(func() { db.Exec(t, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE") })
	return schema
}

func newEngine(t *testing.T, pool *pgxpool.Pool, schema string) *pgsearch.Engine {
	t.Helper()
	e, err := pgsearch.New(pool, schema)
	require.NoError(t, err)
	return e
}

// newPool is a pool of its own, as another process has.
func newPool(t *testing.T, db *kumikotest.DB) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(t.Context(), db.URL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

var tenant = uuid.MustParse("0190b7a0-0000-7000-8000-0000000000aa")

var tickets = search.Index{Name: "tickets", Fields: map[string]byte{"title": 'A', "body": 'B'}, Filters: []string{"status"}}

func doc(id, title string, values map[string]string) search.Document {
	return search.Document{Tenant: tenant, ID: id, Text: map[string]string{"title": title}, Values: values}
}

func query(text string) search.Query {
	return search.Query{Tenant: tenant, Text: text, Fields: []string{"title", "body"}, Limit: 50}
}

func ids(p search.Page) []string {
	var out []string
	for _, h := range p.Hits {
		out = append(out, h.ID)
	}
	return out
}

func TestNewRefusesBadSchemas(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	_, err := pgsearch.New(nil, "search")
	require.ErrorContains(t, err, "pool is nil")
	for _, schema := range []string{"Search", "a;b", "1a", "a-b", `a"b`, strings.Repeat("a", 64)} {
		_, err := pgsearch.New(db.Pool, schema)
		require.ErrorContains(t, err, "is not a lowercase identifier", "schema %q", schema)
	}
	for _, schema := range []string{"", "public", "_s", "search_1", strings.Repeat("a", 63)} {
		_, err := pgsearch.New(db.Pool, schema)
		require.NoError(t, err, "schema %q", schema)
	}
}

func TestEnsureRefusesBadDefinitions(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	e := newEngine(t, db.Pool, newSchema(t, db))
	fields := map[string]byte{"title": 'A'}
	for _, tc := range []struct {
		def  search.Index
		want string
	}{
		{search.Index{Name: "", Fields: fields}, `index name "" is not a lowercase identifier`},
		{search.Index{Name: "Tickets", Fields: fields}, `index name "Tickets" is not a lowercase identifier`},
		{search.Index{Name: "1tickets", Fields: fields}, "is not a lowercase identifier"},
		{search.Index{Name: "_tickets", Fields: fields}, "is not a lowercase identifier"},
		{search.Index{Name: "tic-kets", Fields: fields}, "is not a lowercase identifier"},
		{search.Index{Name: "tickets; DROP TABLE x", Fields: fields}, "is not a lowercase identifier"},
		{search.Index{Name: strings.Repeat("a", 41), Fields: fields}, "of at most 40 bytes"},
		{search.Index{Name: "tickets"}, `index "tickets" has no searchable field`},
		{search.Index{Name: "tickets", Fields: map[string]byte{"title": 'E'}}, `field "title" has weight 'E'; weights are 'A' to 'D'`},
		{search.Index{Name: "tickets", Fields: map[string]byte{"title": 'a'}}, `field "title" has weight 'a'`},
		{search.Index{Name: "tickets", Fields: map[string]byte{"title": 0}}, `field "title" has weight`},
		{search.Index{Name: "tickets", Fields: map[string]byte{"": 'A'}}, "a field name must be non-empty"},
		{search.Index{Name: "tickets", Fields: map[string]byte{"a\x00b": 'A'}}, "a field name must be non-empty UTF-8 text without NUL"},
		{search.Index{Name: "tickets", Fields: fields, Filters: []string{""}}, "a filter name must be non-empty"},
		{search.Index{Name: "tickets", Fields: fields, Config: "english; DROP TABLE x"}, `Config "english; DROP TABLE x" is not the name of a text search configuration`},
		{search.Index{Name: "tickets", Fields: fields, Config: "English"}, "is not the name of a text search configuration"},
		{search.Index{Name: "tickets", Fields: fields, Config: "klingon"}, `"klingon" is not a text search configuration of the database`},
	} {
		_, err := e.Ensure(t.Context(), tc.def)
		require.ErrorContains(t, err, tc.want, "%+v", tc.def)
	}
	// A refused definition left nothing behind.
	require.ErrorIs(t, e.Put(t.Context(), "tickets", doc("d1", "Invoice", nil)), pgsearch.ErrUnknownIndex)
	fresh, err := e.Ensure(t.Context(), search.Index{Name: "a" + strings.Repeat("_", 39), Fields: fields, Config: "english"})
	require.NoError(t, err, "a name of 40 bytes")
	require.True(t, fresh)
}

func TestUnknownIndex(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	e := newEngine(t, db.Pool, newSchema(t, db))
	check := func(name string) {
		t.Helper()
		err := e.Put(t.Context(), name, doc("d1", "Invoice", nil))
		require.ErrorIs(t, err, pgsearch.ErrUnknownIndex)
		require.ErrorContains(t, err, name)
		require.ErrorIs(t, e.Delete(t.Context(), name, tenant, "d1"), pgsearch.ErrUnknownIndex)
		_, err = e.Search(t.Context(), name, query("invoice"))
		require.ErrorIs(t, err, pgsearch.ErrUnknownIndex)
	}
	check("tickets") // the schema does not exist yet
	_, err := e.Ensure(t.Context(), tickets)
	require.NoError(t, err)
	check("nope")
	check("Bad Name")
	// Another engine on the schema knows only what Ensure created.
	other := newEngine(t, db.Pool, e.Schema())
	require.NoError(t, other.Put(t.Context(), "tickets", doc("d1", "Invoice", nil)))
	require.ErrorIs(t, other.Put(t.Context(), "nope", doc("d1", "Invoice", nil)), pgsearch.ErrUnknownIndex)
}

func TestSearchRefusesBadQueries(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	e := newEngine(t, db.Pool, newSchema(t, db))
	_, err := e.Ensure(t.Context(), tickets)
	require.NoError(t, err)
	for _, limit := range []int{0, -1, 201} {
		q := query("invoice")
		q.Limit = limit
		_, err := e.Search(t.Context(), "tickets", q)
		require.ErrorContains(t, err, "Query.Limit", "limit %d", limit)
	}
	for _, filter := range []string{"kind", "title", ""} {
		q := query("invoice")
		q.Filter = map[string]string{"status": "open", filter: "x"}
		_, err := e.Search(t.Context(), "tickets", q)
		require.ErrorIs(t, err, pgsearch.ErrUnknownFilter, "filter %q", filter)
		require.ErrorContains(t, err, `filters by "`+filter+`"`)
	}
}

func TestEmptyPagesHaveHits(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	e := newEngine(t, db.Pool, newSchema(t, db))
	_, err := e.Ensure(t.Context(), tickets)
	require.NoError(t, err)
	require.NoError(t, e.Put(t.Context(), "tickets", doc("d1", "Invoice", map[string]string{"status": "open"})))
	noFields := query("invoice")
	noFields.Fields = nil
	badValue := query("invoice")
	badValue.Filter = map[string]string{"status": "op\x00en"}
	for _, q := range []search.Query{query(""), query("&&& !!"), query("xylophone"), noFields, badValue} {
		p, err := e.Search(t.Context(), "tickets", q)
		require.NoError(t, err)
		require.NotNil(t, p.Hits, "%q: an empty page's hits are an empty list", q.Text)
		require.Empty(t, p.Hits)
		require.Empty(t, p.NextCursor)
	}
}

func TestPutRefusesWhatCannotBeStored(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	e := newEngine(t, db.Pool, newSchema(t, db))
	_, err := e.Ensure(t.Context(), tickets)
	require.NoError(t, err)
	require.ErrorContains(t, e.Put(t.Context(), "tickets", doc("", "Invoice", nil)), `document id ""`)
	require.ErrorContains(t, e.Put(t.Context(), "tickets", doc("d\x00", "Invoice", nil)), "document id")
	require.ErrorContains(t, e.Put(t.Context(), "tickets", doc("d\xff", "Invoice", nil)), "document id")
	require.ErrorContains(t, e.Put(t.Context(), "tickets", doc("d1", "Invoice", map[string]string{"status": "op\x00en"})), `value "op\x00en" of "status"`)
	require.NoError(t, e.Delete(t.Context(), "tickets", tenant, "d\x00", "d\xff"))
	// A field's text is cleaned, not refused.
	require.NoError(t, e.Put(t.Context(), "tickets", doc("d1", "Invoice\x00over\xffdue", nil)))
	p, err := e.Search(t.Context(), "tickets", query("over"))
	require.NoError(t, err)
	require.Equal(t, []string{"d1"}, ids(p))
	require.Equal(t, "Invoice <mark>over</mark>\ufffddue", p.Hits[0].Highlights["title"])
	// Values are stored as given, also those of fields that are not
	// filters.
	require.NoError(t, e.Put(t.Context(), "tickets", doc("d2", "Invoice", map[string]string{"status": "Ünïcode 🙂 '\"\\", "other": "x"})))
	q := query("invoice")
	q.Filter = map[string]string{"status": "Ünïcode 🙂 '\"\\"}
	p, err = e.Search(t.Context(), "tickets", q)
	require.NoError(t, err)
	require.Equal(t, []string{"d2"}, ids(p))
}

func TestIDsInByteOrder(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	e := newEngine(t, db.Pool, newSchema(t, db))
	_, err := e.Ensure(t.Context(), tickets)
	require.NoError(t, err)
	var docs []search.Document
	for _, id := range []string{"b", "B", "ä", "a", "Z", "_", "a-2", "a1"} {
		docs = append(docs, doc(id, "Invoice", nil))
	}
	require.NoError(t, e.Put(t.Context(), "tickets", docs...))
	q := query("invoice")
	q.Limit = 3
	var got []string
	for {
		p, err := e.Search(t.Context(), "tickets", q)
		require.NoError(t, err)
		got = append(got, ids(p)...)
		if p.NextCursor == "" {
			break
		}
		q.Cursor = p.NextCursor
	}
	require.Equal(t, []string{"B", "Z", "_", "a", "a-2", "a1", "b", "ä"}, got)
}

func TestEnsureAtOnce(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	const n = 6
	// Engines of two processes start at once on a schema that does not
	// exist yet: one of them makes the index.
	schema := newSchema(t, db)
	engines := []*pgsearch.Engine{newEngine(t, newPool(t, db), schema), newEngine(t, newPool(t, db), schema)}
	freshes := make(chan bool, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			fresh, err := engines[i%2].Ensure(t.Context(), tickets)
			if err != nil {
				t.Errorf("Ensure: %v", err)
			}
			freshes <- fresh
		})
	}
	wg.Wait()
	close(freshes)
	count := 0
	for fresh := range freshes {
		if fresh {
			count++
		}
	}
	require.Equal(t, 1, count, "one Ensure made the index")
	// And many indexes at once.
	schema = newSchema(t, db)
	engines = []*pgsearch.Engine{newEngine(t, newPool(t, db), schema), newEngine(t, newPool(t, db), schema)}
	for i := range n {
		wg.Go(func() {
			def := tickets
			def.Name = "tickets_" + string(rune('a'+i))
			fresh, err := engines[i%2].Ensure(t.Context(), def)
			if err != nil || !fresh {
				t.Errorf("Ensure %s: %v, fresh %v", def.Name, err, fresh)
			}
		})
	}
	wg.Wait()
}

func TestEnginesShareIndexes(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	schema := newSchema(t, db)
	a, b := newEngine(t, newPool(t, db), schema), newEngine(t, newPool(t, db), schema)
	_, err := a.Ensure(t.Context(), tickets)
	require.NoError(t, err)
	require.NoError(t, a.Put(t.Context(), "tickets", doc("d1", "Invoice overdue", map[string]string{"status": "open"})))
	p, err := b.Search(t.Context(), "tickets", query("invoice"))
	require.NoError(t, err)
	require.Equal(t, []string{"d1"}, ids(p), "an engine learns an index another one ensured")

	// b changes the index; a, which knew the old one, learns the new one
	// at its next call.
	changed := search.Index{Name: "tickets", Fields: map[string]byte{"title": 'B', "notes": 'A'}, Filters: []string{"status", "kind"}, Config: "english"}
	fresh, err := b.Ensure(t.Context(), changed)
	require.NoError(t, err)
	require.True(t, fresh)
	p, err = a.Search(t.Context(), "tickets", query("invoice"))
	require.NoError(t, err)
	require.Empty(t, p.Hits, "the changed index is empty")
	d := doc("d2", "Invoice paid", map[string]string{"status": "open", "kind": "bill"})
	d.Text["notes"] = "Overdue payments"
	require.NoError(t, a.Put(t.Context(), "tickets", d))
	q := query("payment")
	q.Fields = []string{"title", "notes"}
	q.Filter = map[string]string{"kind": "bill"}
	for _, e := range []*pgsearch.Engine{a, b} {
		p, err = e.Search(t.Context(), "tickets", q)
		require.NoError(t, err)
		require.Equal(t, []string{"d2"}, ids(p), "english stems, notes is searched, kind filters")
		require.Equal(t, map[string]string{"notes": "Overdue <mark>payments</mark>"}, p.Hits[0].Highlights)
	}
	require.NoError(t, a.Delete(t.Context(), "tickets", tenant, "d2"))
	p, err = b.Search(t.Context(), "tickets", q)
	require.NoError(t, err)
	require.Empty(t, p.Hits)

	// a changes it back: b's next put learns that.
	fresh, err = a.Ensure(t.Context(), tickets)
	require.NoError(t, err)
	require.True(t, fresh)
	require.NoError(t, b.Put(t.Context(), "tickets", doc("d3", "Invoice", map[string]string{"status": "open"})))
	p, err = a.Search(t.Context(), "tickets", query("invoice"))
	require.NoError(t, err)
	require.Equal(t, []string{"d3"}, ids(p))
}

// An index changed by another engine in a way that leaves every column
// the old definition knows in place still gets the new definition's
// text, and is searched by it.
func TestEnginesLearnAnAddedField(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	schema := newSchema(t, db)
	a, b, c := newEngine(t, db.Pool, schema), newEngine(t, db.Pool, schema), newEngine(t, db.Pool, schema)
	_, err := a.Ensure(t.Context(), tickets)
	require.NoError(t, err)
	require.NoError(t, a.Put(t.Context(), "tickets", doc("d1", "Invoice", nil)))
	p, err := c.Search(t.Context(), "tickets", query("invoice"))
	require.NoError(t, err)
	require.Equal(t, []string{"d1"}, ids(p))

	more := search.Index{Name: "tickets", Fields: map[string]byte{"title": 'A', "body": 'B', "notes": 'C'}, Filters: tickets.Filters}
	fresh, err := b.Ensure(t.Context(), more)
	require.NoError(t, err)
	require.True(t, fresh)
	d := doc("d2", "Invoice", nil)
	d.Text["notes"] = "Zanzibar"
	require.NoError(t, a.Put(t.Context(), "tickets", d), "a puts with the index it knew")
	q := query("zanzibar")
	q.Fields = []string{"title", "body", "notes"}
	for _, e := range []*pgsearch.Engine{b, c} {
		p, err = e.Search(t.Context(), "tickets", q)
		require.NoError(t, err)
		require.Equal(t, []string{"d2"}, ids(p), "the notes a put are searched")
	}
}

func TestEnsureFingerprint(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	e := newEngine(t, db.Pool, newSchema(t, db))
	def := search.Index{Name: "tickets", Fields: map[string]byte{"title": 'A'}, Filters: []string{"status", "kind"}}
	ensure := func(def search.Index) bool {
		t.Helper()
		fresh, err := e.Ensure(t.Context(), def)
		require.NoError(t, err)
		return fresh
	}
	require.True(t, ensure(def))
	require.NoError(t, e.Put(t.Context(), "tickets", doc("d1", "Invoice", nil)))
	same := def
	same.Filters, same.Config = []string{"kind", "status", "kind"}, "simple"
	require.False(t, ensure(same), "filters in another order, the default configuration: the same index")
	other := def
	other.Filters = []string{"status"}
	require.True(t, ensure(other), "a filter less: documents are put again with the values the index filters by")
	require.NoError(t, e.Put(t.Context(), "tickets", doc("d1", "Invoice", nil)))
	// A table dropped by hand is made again.
	db.Exec(t, "DROP TABLE "+pgx.Identifier{e.Schema(), "kumiko_docs_tickets"}.Sanitize())
	require.True(t, ensure(other))
	p, err := e.Search(t.Context(), "tickets", query("invoice"))
	require.NoError(t, err)
	require.Empty(t, p.Hits)
}

func TestAnyFieldNames(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	e := newEngine(t, db.Pool, newSchema(t, db))
	names := []string{"Title", "a b", `x"; DROP TABLE y; --`, "ü", strings.Repeat("long", 50), "kumiko_search_x", "id", "tenant_id", "vals"}
	def := search.Index{Name: "odd", Fields: map[string]byte{}, Filters: names}
	d := search.Document{Tenant: tenant, ID: "d1", Text: map[string]string{}, Values: map[string]string{}}
	for i, n := range names {
		def.Fields[n] = 'A' + byte(i%4)
		d.Text[n] = "word" + string(rune('a'+i)) + " common"
		d.Values[n] = "v" + n
	}
	_, err := e.Ensure(t.Context(), def)
	require.NoError(t, err)
	require.NoError(t, e.Put(t.Context(), "odd", d))
	for i, n := range names {
		q := search.Query{Tenant: tenant, Text: "word" + string(rune('a'+i)), Fields: names, Filter: map[string]string{n: "v" + n}, Limit: 10}
		p, err := e.Search(t.Context(), "odd", q)
		require.NoError(t, err)
		require.Equal(t, []string{"d1"}, ids(p), "field %q", n)
		require.Equal(t, map[string]string{n: "<mark>word" + string(rune('a'+i)) + "</mark> common"}, p.Hits[0].Highlights)
	}
}

func TestIndexNamesDoNotCollide(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	e := newEngine(t, db.Pool, newSchema(t, db))
	names := []string{"indexes", "doc_indexes", "a", "a_pkey", "dpk_a", "search_a", "docs_a"}
	for _, n := range names {
		def := tickets
		def.Name = n
		fresh, err := e.Ensure(t.Context(), def)
		require.NoError(t, err, n)
		require.True(t, fresh, n)
		require.NoError(t, e.Put(t.Context(), n, doc("d-"+n, "Invoice", nil)))
	}
	for _, n := range names {
		def := tickets
		def.Name = n
		fresh, err := e.Ensure(t.Context(), def)
		require.NoError(t, err, n)
		require.False(t, fresh, n)
		p, err := e.Search(t.Context(), n, query("invoice"))
		require.NoError(t, err)
		require.Equal(t, []string{"d-" + n}, ids(p), n)
	}
}

// Package searchtest is the conformance suite of search.Engine: every
// engine, the bundled pgsearch and yours, must pass Run. It checks what
// the contract promises (docs/search.md, "Engines"): relevance by the
// fields' weights, search as you type, typos, highlighting that is safe
// HTML, filters, keyset pages and their cursors, tenant isolation, field
// restriction, replacement and deletion, Ensure's fresh indexes, and that
// no query text, however hostile, is an error.
//
// A test of your engine calls Run with a function that returns a new
// engine over storage of its own:
//
//	func TestMyEngine(t *testing.T) {
//		searchtest.Run(t, func(t *testing.T) search.Engine {
//			e := myengine.New(myengine.Config{Prefix: "t" + rand.Text()})
//			t.Cleanup(func() { e.DropAll(context.Background()) })
//			return e
//		})
//	}
package searchtest

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"html"
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/search"
)

// Run runs the conformance suite. Its subtests run in parallel, each on
// an engine of its own: newEngine is called once per subtest, possibly
// concurrently, and must return an engine over empty storage, isolated
// from the engines of the other calls (their indexes and documents
// unseen), released with t.Cleanup. The suite's indexes use the text
// search configurations "simple" and "english".
func Run(t *testing.T, newEngine func(t *testing.T) search.Engine) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(*fixture)
	}{
		{"Relevance", testRelevance},
		{"PrefixAndEveryWord", testPrefixAndEveryWord},
		{"Typos", testTypos},
		{"Highlights", testHighlights},
		{"Filters", testFilters},
		{"Pages", testPages},
		{"Cursors", testCursors},
		{"Tenants", testTenants},
		{"FieldRestriction", testFieldRestriction},
		{"PutReplacesDeleteRemoves", testPutReplacesDeleteRemoves},
		{"Ensure", testEnsure},
		{"HostileText", testHostileText},
		{"Concurrent", testConcurrent},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(&fixture{t: t, ctx: t.Context(), e: newEngine(t)})
		})
	}
}

// maxLimit is the most hits a page may ask for.
const maxLimit = 200

// The suite's tenants.
var (
	tenantA = uuid.MustParse("0190b7a0-0000-7000-8000-00000000000a")
	tenantB = uuid.MustParse("0190b7a0-0000-7000-8000-00000000000b")
)

// fixture is a subtest's engine with helpers that fail the subtest on an
// error and check what every page must be.
type fixture struct {
	t   *testing.T
	ctx context.Context
	e   search.Engine
}

// ensure ensures def and returns fresh.
func (f *fixture) ensure(def search.Index) bool {
	f.t.Helper()
	fresh, err := f.e.Ensure(f.ctx, def)
	require.NoError(f.t, err, "Ensure %s", def.Name)
	return fresh
}

// articles is the index most subtests use: a title of weight A and a body
// of weight B, filtered by status and kind.
func (f *fixture) articles() string {
	f.t.Helper()
	require.True(f.t, f.ensure(search.Index{Name: "articles", Fields: map[string]byte{"title": 'A', "body": 'B'},
		Filters: []string{"status", "kind"}, Config: "simple"}), "the first Ensure of an index is fresh")
	return "articles"
}

func (f *fixture) put(index string, docs ...search.Document) {
	f.t.Helper()
	require.NoError(f.t, f.e.Put(f.ctx, index, docs...), "Put")
}

// doc is a document of tenant A with a title and a body ("" leaves it
// out).
func doc(id, title, body string) search.Document {
	d := search.Document{Tenant: tenantA, ID: id, Text: map[string]string{}}
	if title != "" {
		d.Text["title"] = title
	}
	if body != "" {
		d.Text["body"] = body
	}
	return d
}

// query is a search of tenant A's titles and bodies for text.
func query(text string) search.Query {
	return search.Query{Tenant: tenantA, Text: text, Fields: []string{"title", "body"}, Limit: maxLimit}
}

// search runs q and checks the page.
func (f *fixture) search(index string, q search.Query) search.Page {
	f.t.Helper()
	p, err := f.e.Search(f.ctx, index, q)
	require.NoError(f.t, err, "Search %q", q.Text)
	f.checkPage(q, p)
	return p
}

// checkPage checks what every page must be: at most Limit hits, best
// first and equal ranks by ID, each ID once, highlights only of the
// query's fields, each with a match.
func (f *fixture) checkPage(q search.Query, p search.Page) {
	f.t.Helper()
	require.LessOrEqual(f.t, len(p.Hits), q.Limit, "a page holds at most Limit hits")
	seen := map[string]bool{}
	for i, h := range p.Hits {
		require.False(f.t, seen[h.ID], "hit %q twice in a page", h.ID)
		seen[h.ID] = true
		if i > 0 {
			prev := p.Hits[i-1]
			require.True(f.t, prev.Rank > h.Rank || prev.Rank == h.Rank && prev.ID < h.ID,
				"hits best first, equal ranks by ID: %q (%v) before %q (%v)", prev.ID, prev.Rank, h.ID, h.Rank)
		}
		for field, hl := range h.Highlights {
			require.Contains(f.t, q.Fields, field, "hit %q is highlighted in %q, not one of the query's fields", h.ID, field)
			checkHighlight(f.t, hl)
		}
	}
}

// markRE finds the marked matches of a highlight.
var markRE = regexp.MustCompile(`<mark>(.*?)</mark>`)

// entityRE is an HTML character reference.
var entityRE = regexp.MustCompile(`^&([A-Za-z][A-Za-z0-9]*|#[0-9]+|#[xX][0-9A-Fa-f]+);`)

// checkHighlight checks that hl marks a match and is otherwise
// HTML-escaped text: no markup but <mark> and </mark>, every '&' a
// character reference.
func checkHighlight(t *testing.T, hl string) {
	t.Helper()
	require.Regexp(t, markRE, hl, "a highlight marks a match")
	rest := strings.NewReplacer("<mark>", "", "</mark>", "").Replace(hl)
	require.NotContains(t, rest, "<", "a highlight's text is HTML-escaped: %q", hl)
	require.NotContains(t, rest, ">", "a highlight's text is HTML-escaped: %q", hl)
	for i := strings.IndexByte(rest, '&'); i >= 0; i = strings.IndexByte(rest, '&') {
		require.Regexp(t, entityRE, rest[i:], "a highlight's '&' starts a character reference: %q", hl)
		rest = rest[i+1:]
	}
}

// marked are the texts a highlight marks, unescaped and lowercased.
func marked(hl string) []string {
	var out []string
	for _, m := range markRE.FindAllStringSubmatch(hl, -1) {
		out = append(out, strings.ToLower(html.UnescapeString(m[1])))
	}
	return out
}

// ids are the IDs of a page's hits.
func ids(p search.Page) []string {
	out := make([]string, 0, len(p.Hits))
	for _, h := range p.Hits {
		out = append(out, h.ID)
	}
	return out
}

// found are the IDs of q's first page.
func (f *fixture) found(index string, q search.Query) []string {
	f.t.Helper()
	return ids(f.search(index, q))
}

// requireFound checks that q finds exactly want, in any order.
func (f *fixture) requireFound(index string, q search.Query, want ...string) {
	f.t.Helper()
	require.ElementsMatch(f.t, want, f.found(index, q), "%q finds %q", q.Text, want)
}

// walk follows q's pages to the last and returns every hit in order and
// the number of pages.
func (f *fixture) walk(index string, q search.Query) ([]search.Hit, int) {
	f.t.Helper()
	var hits []search.Hit
	seen := map[string]bool{}
	for pages := 1; ; pages++ {
		require.LessOrEqual(f.t, pages, 1000, "the pages of %q end", q.Text)
		p := f.search(index, q)
		for _, h := range p.Hits {
			require.False(f.t, seen[h.ID], "%q on two pages", h.ID)
			seen[h.ID] = true
		}
		hits = append(hits, p.Hits...)
		if p.NextCursor == "" {
			return hits, pages
		}
		require.Len(f.t, p.Hits, q.Limit, "a page followed by another is full")
		q.Cursor = p.NextCursor
	}
}

func testRelevance(f *fixture) {
	idx := f.articles()
	// The title (A) matches rank above the body (B) match, though its ID
	// comes first; equal texts rank equal, by ID.
	f.put(idx,
		doc("m3", "Invoice overdue", ""),
		doc("a1", "Meeting notes", "Invoice overdue"),
		doc("m1", "Invoice overdue", ""),
		doc("z1", "Lunch", "Nothing to see"),
		doc("m2", "Invoice overdue", ""),
	)
	p := f.search(idx, query("invoice"))
	require.Equal(f.t, []string{"m1", "m2", "m3", "a1"}, ids(p), "weight A above weight B, equal ranks by ID")
	require.Equal(f.t, p.Hits[0].Rank, p.Hits[1].Rank, "equal texts rank equal")
	require.Equal(f.t, p.Hits[1].Rank, p.Hits[2].Rank, "equal texts rank equal")
	require.Greater(f.t, p.Hits[2].Rank, p.Hits[3].Rank, "a match in a field of weight A ranks above one in B")
	require.Empty(f.t, p.NextCursor, "one page holds every hit")
}

func testPrefixAndEveryWord(f *fixture) {
	idx := f.articles()
	f.put(idx,
		doc("d1", "Invoice overdue", "Customer Acme"),
		doc("d2", "Invoice paid", ""),
		doc("d3", "Overdue reminder", "The invoice of March"),
		doc("d4", "Meeting notes", ""),
	)
	f.requireFound(idx, query("inv"), "d1", "d2", "d3")
	f.requireFound(idx, query("invoice"), "d1", "d2", "d3")
	f.requireFound(idx, query("i"), "d1", "d2", "d3")
	f.requireFound(idx, query("inv over"), "d1", "d3")
	f.requireFound(idx, query("  Inv,  OVER!! "), "d1", "d3")
	f.requireFound(idx, query("invoice acme"), "d1")
	f.requireFound(idx, query("overdue march invoice"), "d3")
	f.requireFound(idx, query("invoice xylophone"))
	f.requireFound(idx, query("meet note"), "d4")
}

func testTypos(f *fixture) {
	idx := f.articles()
	f.put(idx, doc("d1", "Invoice overdue", ""), doc("d2", "Meeting notes", "Agenda"))
	for _, typo := range []string{"invocie", "invoise", "invoce", "Invocie overdue"} {
		f.requireFound(idx, query(typo), "d1")
	}
	// An exact match leaves out the matches with a typo.
	f.put(idx, doc("d3", "Invoise sent", ""))
	f.requireFound(idx, query("invoise"), "d3")
	f.requireFound(idx, query("invoice"), "d1")
	// The pages of a search that matched with typos match so.
	for i := range 4 {
		f.put(idx, doc(fmt.Sprintf("t%d", i), "Invoice "+fmt.Sprint(i), ""))
	}
	q := query("invocei")
	all := f.found(idx, q)
	require.Subset(f.t, all, []string{"d1", "t0", "t1", "t2", "t3"}, "a swapped letter is a typo")
	q.Limit = 2
	hits, _ := f.walk(idx, q)
	require.Equal(f.t, all, hitIDs(hits), "the pages of a search with typos hold its hits")
}

func hitIDs(hits []search.Hit) []string { return ids(search.Page{Hits: hits}) }

func testHighlights(f *fixture) {
	idx := f.articles()
	f.put(idx,
		doc("d1", "Invoice <b>overdue</b>", `Tom & Jerry's "invoice" <script>alert(1)</script> paid`),
		doc("d2", "Invoice", "Meeting notes"),
		doc("d3", "Meeting <i>notes</i>", "<img src=x onerror=alert(1)> invoice & co"),
	)
	p := f.search(idx, query("inv"))
	require.ElementsMatch(f.t, []string{"d1", "d2", "d3"}, ids(p))
	for _, h := range p.Hits {
		for field, hl := range h.Highlights {
			require.NotEmpty(f.t, marked(hl), "%s of %s marks a match", field, h.ID)
			for _, m := range marked(hl) {
				require.True(f.t, strings.HasPrefix(m, "inv"), "%s of %s marks %q, not a word starting with the query's", field, h.ID, m)
			}
			for _, raw := range []string{"<b>", "<i>", "<script", "<img"} {
				require.NotContains(f.t, hl, raw, "the field's markup never comes back as markup")
			}
		}
		switch h.ID {
		case "d1":
			require.Contains(f.t, h.Highlights, "title")
			require.Contains(f.t, h.Highlights, "body")
		case "d2", "d3":
			want := map[string]string{"d2": "title", "d3": "body"}[h.ID]
			require.Len(f.t, h.Highlights, 1, "only fields that matched are highlighted: %v", h.Highlights)
			require.Contains(f.t, h.Highlights, want)
		}
	}
}

func testFilters(f *fixture) {
	idx := f.articles()
	withValues := func(d search.Document, values map[string]string) search.Document {
		d.Values = values
		return d
	}
	f.put(idx,
		withValues(doc("d1", "Invoice one", ""), map[string]string{"status": "open", "kind": "bill"}),
		withValues(doc("d2", "Invoice two", ""), map[string]string{"status": "closed", "kind": "bill"}),
		withValues(doc("d3", "Invoice three", ""), map[string]string{"status": "open", "kind": "note"}),
		doc("d4", "Invoice four", ""),
		withValues(doc("d5", "Invoice five", ""), map[string]string{"status": "Open"}),
		withValues(doc("d6", "Invoice six", ""), map[string]string{"kind": ""}),
	)
	filtered := func(text string, filter map[string]string) search.Query {
		q := query(text)
		q.Filter = filter
		return q
	}
	f.requireFound(idx, filtered("invoice", nil), "d1", "d2", "d3", "d4", "d5", "d6")
	f.requireFound(idx, filtered("invoice", map[string]string{"status": "open"}), "d1", "d3")
	f.requireFound(idx, filtered("invoice", map[string]string{"status": "open", "kind": "bill"}), "d1")
	f.requireFound(idx, filtered("invoice", map[string]string{"status": "closed"}), "d2")
	f.requireFound(idx, filtered("invoice", map[string]string{"status": "Open"}), "d5")
	f.requireFound(idx, filtered("invoice", map[string]string{"status": "pending"}))
	f.requireFound(idx, filtered("invoice", map[string]string{"kind": ""}), "d6")
	f.requireFound(idx, filtered("invocie", map[string]string{"status": "closed"}), "d2")
}

func testPages(f *fixture) {
	idx := f.articles()
	f.put(idx,
		doc("p3", "Invoice overdue", ""), doc("a2", "Notes", "Invoice overdue"),
		doc("p1", "Invoice overdue", ""), doc("a3", "Notes", "Invoice overdue"),
		doc("p4", "Invoice overdue", ""), doc("a1", "Notes", "Invoice overdue"),
		doc("p2", "Invoice overdue", ""), doc("zz", "Meeting", "Agenda"),
	)
	want := []string{"p1", "p2", "p3", "p4", "a1", "a2", "a3"}
	require.Equal(f.t, want, f.found(idx, query("invoice")))
	for limit := 1; limit <= 8; limit++ {
		q := query("invoice")
		q.Limit = limit
		hits, pages := f.walk(idx, q)
		require.Equal(f.t, want, hitIDs(hits), "pages of %d walk every hit once, in rank order", limit)
		require.Equal(f.t, (len(want)+limit-1)/limit, pages, "pages of %d: the last page with hits has no NextCursor", limit)
	}
}

func testCursors(f *fixture) {
	idx := f.articles()
	for i := range 5 {
		d := doc(fmt.Sprintf("d%d", i), "Invoice overdue", "Invoice")
		d.Values = map[string]string{"status": "open"}
		f.put(idx, d)
	}
	q := query("invoice")
	q.Filter = map[string]string{"status": "open"}
	q.Limit = 2
	first := f.search(idx, q)
	require.NotEmpty(f.t, first.NextCursor)
	// The cursor continues its own query, with any limit.
	next := q
	next.Cursor, next.Limit = first.NextCursor, 3
	require.Equal(f.t, []string{"d2", "d3", "d4"}, f.found(idx, next))
	invalid := func(what string, q search.Query) {
		f.t.Helper()
		_, err := f.e.Search(f.ctx, idx, q)
		require.ErrorIs(f.t, err, search.ErrInvalidCursor, "%s: a cursor of another search", what)
	}
	other := next
	other.Text = "overdue"
	invalid("other text", other)
	other = next
	other.Fields = []string{"title"}
	invalid("other fields", other)
	other = next
	other.Tenant = tenantB
	invalid("other tenant", other)
	other = next
	other.Filter = nil
	invalid("other filter", other)
	for _, garbage := range []string{"garbage", "!!!", "e30", base64.RawURLEncoding.EncodeToString([]byte(`{"q":"x","r":1,"k":["d1"]}`)),
		first.NextCursor + "x", "\x00", "\xff"} {
		other = next
		other.Cursor = garbage
		invalid(fmt.Sprintf("garbage %q", garbage), other)
	}
}

func testTenants(f *fixture) {
	idx := f.articles()
	b := func(d search.Document) search.Document {
		d.Tenant = tenantB
		return d
	}
	f.put(idx, doc("d1", "Invoice alpha", ""), b(doc("d1", "Invoice beta", "")), b(doc("d2", "Quarterly report", "")))
	p := f.search(idx, query("invoice"))
	require.Equal(f.t, []string{"d1"}, ids(p))
	require.Contains(f.t, strings.ToLower(p.Hits[0].Highlights["title"]), "alpha", "tenant A's own document")
	qb := query("invoice")
	qb.Tenant = tenantB
	p = f.search(idx, qb)
	require.Equal(f.t, []string{"d1"}, ids(p))
	require.Contains(f.t, strings.ToLower(p.Hits[0].Highlights["title"]), "beta", "tenant B's own document")
	for _, text := range []string{"quarterly", "quartelry", "beta", "report"} {
		f.requireFound(idx, query(text))
	}
	require.NoError(f.t, f.e.Delete(f.ctx, idx, tenantA, "d1"))
	f.requireFound(idx, query("invoice"))
	require.Equal(f.t, []string{"d1"}, f.found(idx, qb), "a delete of tenant A leaves tenant B's document of the same id")
	require.NoError(f.t, f.e.Delete(f.ctx, idx, tenantB, "nonexistent"), "an unknown id is no error")
}

func testFieldRestriction(f *fixture) {
	idx := f.articles()
	f.put(idx, doc("d1", "Invoice overdue", "Invoice secret"), doc("d2", "Meeting", "Secret agenda"))
	only := func(text string, fields ...string) search.Query {
		q := query(text)
		q.Fields = fields
		return q
	}
	f.requireFound(idx, only("secret", "title"))
	f.requireFound(idx, only("secert", "title"))
	f.requireFound(idx, only("invoice secret", "title"))
	f.requireFound(idx, only("invoice"))
	f.requireFound(idx, only("invoice", "nope"))
	f.requireFound(idx, only("secret", "title", "body"), "d1", "d2")
	p := f.search(idx, only("invoice", "title"))
	require.Equal(f.t, []string{"d1"}, ids(p))
	require.Contains(f.t, p.Hits[0].Highlights, "title")
	require.NotContains(f.t, p.Hits[0].Highlights, "body", "a field outside the query's is not highlighted")
	p = f.search(idx, only("invoice", "body", "nope"))
	require.Equal(f.t, []string{"d1"}, ids(p))
	require.Equal(f.t, []string{"body"}, keys(p.Hits[0].Highlights))
}

func keys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func testPutReplacesDeleteRemoves(f *fixture) {
	idx := f.articles()
	d := doc("d1", "Invoice overdue", "Acme")
	d.Values = map[string]string{"status": "open"}
	f.put(idx, d)
	f.requireFound(idx, query("invoice"), "d1")
	d = doc("d1", "Receipt", "")
	d.Values = map[string]string{"status": "closed"}
	f.put(idx, d)
	for _, text := range []string{"invoice", "acme", "overdue"} {
		f.requireFound(idx, query(text))
	}
	f.requireFound(idx, query("receipt"), "d1")
	q := query("receipt")
	q.Filter = map[string]string{"status": "open"}
	f.requireFound(idx, q)
	q.Filter = map[string]string{"status": "closed"}
	f.requireFound(idx, q, "d1")

	// The last document of an id in one Put wins; text of a field the
	// index does not have is left out.
	other := doc("d2", "Bravo", "")
	other.Text["summary"] = "zanzibar"
	f.put(idx, doc("d2", "Alpha", ""), other)
	f.requireFound(idx, query("alpha"))
	f.requireFound(idx, query("bravo"), "d2")
	q = query("zanzibar")
	q.Fields = append(q.Fields, "summary")
	f.requireFound(idx, q)
	f.put(idx)

	f.put(idx, doc("d3", "Invoice", ""), doc("d4", "Invoice", ""), doc("d5", "Invoice", ""))
	require.NoError(f.t, f.e.Delete(f.ctx, idx, tenantA, "d3", "d5", "nonexistent"))
	f.requireFound(idx, query("invoice"), "d4")
	require.NoError(f.t, f.e.Delete(f.ctx, idx, tenantA, "d1"))
	f.requireFound(idx, query("receipt"))
	require.NoError(f.t, f.e.Delete(f.ctx, idx, tenantA, "d1"), "deleting a deleted document is no error")
	require.NoError(f.t, f.e.Delete(f.ctx, idx, tenantA), "deleting no documents is no error")
}

func testEnsure(f *fixture) {
	def := search.Index{Name: "tickets", Fields: map[string]byte{"title": 'A'}, Filters: []string{"status"}, Config: "simple"}
	require.True(f.t, f.ensure(def), "a new index is fresh")
	f.put("tickets", doc("d1", "Invoice overdue", ""))
	require.False(f.t, f.ensure(def), "the same definition again is not fresh")
	f.requireFound("tickets", query("invoice"), "d1")

	// Indexes are apart.
	require.True(f.t, f.ensure(search.Index{Name: "notes", Fields: map[string]byte{"title": 'A'}, Config: "simple"}))
	f.requireFound("notes", query("invoice"))
	f.put("notes", doc("n1", "Invoice notes", ""))
	f.requireFound("tickets", query("invoice"), "d1")
	f.requireFound("notes", query("invoice"), "n1")

	orig := def
	changes := []struct {
		what   string
		change func(*search.Index)
	}{
		{"a field's weight", func(d *search.Index) { d.Fields = map[string]byte{"title": 'B'} }},
		{"a field more", func(d *search.Index) { d.Fields = map[string]byte{"title": 'B', "body": 'C'} }},
		{"a field less", func(d *search.Index) { d.Fields = map[string]byte{"body": 'C'} }},
		{"the configuration", func(d *search.Index) { d.Config = "english" }},
		{"back", func(d *search.Index) { *d = orig }},
	}
	for _, c := range changes {
		c.change(&def)
		require.True(f.t, f.ensure(def), "a change of %s is fresh", c.what)
		f.requireFound("tickets", query("invoice"))
		f.put("tickets", doc("d1", "Invoice overdue", "Invoice overdue"))
		f.requireFound("tickets", query("invoice"), "d1")
		require.False(f.t, f.ensure(def), "after a change of %s, the same definition again is not fresh", c.what)
		f.requireFound("tickets", query("invoice"), "d1")
	}
	f.requireFound("notes", query("invoice"), "n1")
}

// hostilePieces are bits of text that a search engine could take for
// syntax (its own, SQL's, HTML's) or fail to store: operators, quotes,
// backslashes, control bytes, invalid UTF-8, unusual Unicode.
func hostilePieces() []string {
	return []string{
		"&", "|", "!", "<->", "<2>", ":*", ":A", ":*A", "(", ")", "'", "''", `"`, "`", `\`, `\\`, `\'`, "\x00", "\x01",
		"'; DROP TABLE articles; --", "\"; DROP TABLE articles; --", "$1", "$$", "%", "_", "*", "?", "~", "^", "+", "-",
		"/*", "*/", ";", "--", "NULL", "OR 1=1", "AND", "NOT", "@@", "::regconfig", "{", "}", "[", "]", "<mark>", "</mark>",
		"<script>alert(1)</script>", "&amp;", "invoice", "inv", "invocie", "a", "1", "ünïcödé", "日本語", "🙂", "\u202e",
		"e\u0301", "\ufeff", "\u00a0", "\u2028", "\xff\xfe", "\xc3", "\xed\xa0\x80", "\t", "\n", "\r\n", " ",
	}
}

// hostile are query texts that must never be an error: the pieces, a few
// hundred of their combinations, and very long texts.
func hostile() []string {
	rng := rand.New(rand.NewPCG(1, 2))
	pieces := hostilePieces()
	out := slices.Clone(pieces)
	for range 300 {
		var b strings.Builder
		for range 1 + rng.IntN(8) {
			b.WriteString(pieces[rng.IntN(len(pieces))])
			if rng.IntN(2) == 0 {
				b.WriteByte(' ')
			}
		}
		out = append(out, b.String())
	}
	randomBytes := make([]byte, 100_000)
	for i := range randomBytes {
		randomBytes[i] = byte(rng.UintN(256))
	}
	return append(out, "", " ", string(randomBytes),
		strings.Repeat("a", 100_000),
		strings.Repeat("invoice ", 12_500),
		strings.Repeat("&|!(", 25_000),
		strings.Repeat("x", 3000)+" invoice",
		strings.Repeat("invocie ", 40),
		strings.Repeat("w ", 50_000),
	)
}

func testHostileText(f *fixture) {
	idx := f.articles()
	// Any text is a document's text: it is stored and found by its other
	// words, and its highlights are safe HTML.
	var docs []search.Document
	for i, text := range hostilePieces() {
		docs = append(docs, doc(fmt.Sprintf("h%03d", i), text+" zanzibar", text))
	}
	f.put(idx, docs...)
	f.put(idx, doc("d1", "Invoice overdue", ""))
	require.Len(f.t, f.found(idx, query("zanzibar")), len(docs), "every document with hostile text is found by its other word")
	for i, text := range hostile() {
		q := query(text)
		q.Limit = 10
		if i%7 == 0 {
			q.Filter = map[string]string{"status": text}
		}
		p, err := f.e.Search(f.ctx, idx, q)
		require.NoError(f.t, err, "a search for %q is no error", truncate(text))
		f.checkPage(q, p)
	}
}

func truncate(s string) string {
	if len(s) > 80 {
		return s[:80] + fmt.Sprintf("… (%d bytes)", len(s))
	}
	return s
}

func testConcurrent(f *fixture) {
	idx := f.articles()
	const workers, each = 4, 10
	var wg sync.WaitGroup
	errs := make(chan error, workers*each*2)
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				d := doc(fmt.Sprintf("w%d-%02d", w, i), fmt.Sprintf("Invoice %d of worker %d", i, w), "")
				if err := f.e.Put(f.ctx, idx, d); err != nil {
					errs <- fmt.Errorf("put %s: %w", d.ID, err)
				}
				if _, err := f.e.Search(f.ctx, idx, query("invoice worker")); err != nil {
					errs <- fmt.Errorf("search: %w", err)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	require.NoError(f.t, errors.Join(all...))
	require.Len(f.t, f.found(idx, query("invoice worker")), workers*each)
}

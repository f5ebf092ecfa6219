package pipeline_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/kumikotest"
	"github.com/kumiko-go/kumiko/pipeline"
)

// Tests of the read side: list (keyset pagination, sort, filter,
// includeDeleted), detail, as-of reads, tenant isolation, field-level access
// and the sample's query handler.

// ---------------------------------------------------------------- helpers

// rdJSON encodes v as a JSON payload string.
func rdJSON(t *testing.T, v any) string {
	t.Helper()
	raw, err := json.Marshal(v)
	require.NoError(t, err)
	return string(raw)
}

// rdPage is one decoded list answer.
type rdPage struct {
	rows []map[string]any
	next string
}

// rdList runs <entity>.list with payload and decodes the answer.
func rdList(t *testing.T, app *kumikotest.App, c pipeline.Caller, entity string, payload map[string]any) rdPage {
	t.Helper()
	out := query(t, app, c, entity+".list", rdJSON(t, payload))
	m, ok := out.(map[string]any)
	require.True(t, ok, "a list answers an object, got %#v", out)
	rawRows, ok := m["rows"].([]any)
	require.True(t, ok, "rows is an array (never null), got %#v", m["rows"])
	next, ok := m["nextCursor"].(string)
	require.True(t, ok, "nextCursor is a string, got %#v", m["nextCursor"])
	p := rdPage{next: next, rows: make([]map[string]any, len(rawRows))}
	for i, r := range rawRows {
		p.rows[i] = r.(map[string]any)
	}
	return p
}

// rdListAll walks every page of a list with limit, following nextCursor until
// it is "", and returns the rows in order. Every page but the last is full.
func rdListAll(t *testing.T, app *kumikotest.App, c pipeline.Caller, entity string, base map[string]any, limit int) []map[string]any {
	t.Helper()
	var all []map[string]any
	cursor := ""
	for pages := 0; ; pages++ {
		require.Less(t, pages, 1000, "pagination does not terminate")
		p := maps.Clone(base)
		if p == nil {
			p = map[string]any{}
		}
		p["limit"] = limit
		if cursor != "" {
			p["cursor"] = cursor
		}
		page := rdList(t, app, c, entity, p)
		require.LessOrEqual(t, len(page.rows), limit)
		all = append(all, page.rows...)
		if page.next == "" {
			return all
		}
		require.Len(t, page.rows, limit, "a page with a next cursor is full")
		cursor = page.next
	}
}

// rdIDs are the ids of rows, in order.
func rdIDs(rows []map[string]any) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i], _ = r["id"].(string)
	}
	return out
}

// rdTitles are the titles of rows, in order.
func rdTitles(rows []map[string]any) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i], _ = r["title"].(string)
	}
	return out
}

// rdKey is an ordering key of an expected order.
type rdKey struct {
	field string
	desc  bool
}

var rdTimeFields = map[string]bool{"createdAt": true, "updatedAt": true, "dueAt": true}

// rdCompare orders two JSON values of one field; nulls come last whatever
// the direction (the caller applies the direction to non-null values only).
func rdCompare(t *testing.T, field string, a, b any) int {
	t.Helper()
	switch {
	case a == nil && b == nil:
		return 0
	case a == nil:
		return 1
	case b == nil:
		return -1
	}
	as, bs := a.(string), b.(string)
	if rdTimeFields[field] {
		ta, err := time.Parse(time.RFC3339Nano, as)
		require.NoError(t, err)
		tb, err := time.Parse(time.RFC3339Nano, bs)
		require.NoError(t, err)
		return ta.Compare(tb)
	}
	return strings.Compare(as, bs)
}

// rdExpectedOrder sorts rows by keys (nulls last in both directions), then by
// id ascending unless id is the last key, and returns their ids.
func rdExpectedOrder(t *testing.T, rows []map[string]any, keys ...rdKey) []string {
	t.Helper()
	if len(keys) == 0 || keys[len(keys)-1].field != "id" {
		keys = append(keys, rdKey{field: "id"})
	}
	sorted := slices.Clone(rows)
	slices.SortStableFunc(sorted, func(a, b map[string]any) int {
		for _, k := range keys {
			av, bv := a[k.field], b[k.field]
			c := rdCompare(t, k.field, av, bv)
			if c == 0 {
				continue
			}
			if k.desc && av != nil && bv != nil {
				return -c
			}
			return c
		}
		return 0
	})
	return rdIDs(sorted)
}

// rdSort renders keys as a list payload's sort.
func rdSort(keys ...rdKey) []any {
	out := make([]any, len(keys))
	for i, k := range keys {
		out[i] = map[string]any{"field": k.field, "desc": k.desc}
	}
	return out
}

// rdEventTime is the created_at of one event of a stream, from the database.
func rdEventTime(t *testing.T, app *kumikotest.App, id string, version int) time.Time {
	t.Helper()
	var ts time.Time
	require.NoError(t, app.Pool.QueryRow(ctx,
		"SELECT created_at FROM kumiko_events WHERE aggregate_id = $1 AND version = $2", id, version).Scan(&ts))
	return ts
}

// rdLastEventTime is the newest created_at of all events.
func rdLastEventTime(t *testing.T, app *kumikotest.App) time.Time {
	t.Helper()
	var ts time.Time
	require.NoError(t, app.Pool.QueryRow(ctx, "SELECT max(created_at) FROM kumiko_events").Scan(&ts))
	return ts
}

// rdAt renders a time as the asOf of a query.
func rdAt(ts time.Time) string { return ts.UTC().Format(time.RFC3339Nano) }

// rdDetail runs <entity>.detail and returns its JSON form; nil when the
// dispatcher answers nil (a missing, deleted or foreign row: {"data":null}).
func rdDetail(t *testing.T, app *kumikotest.App, c pipeline.Caller, entity, payload string) map[string]any {
	t.Helper()
	out, err := app.Executor.Query(ctx, c, req(entity+".detail", payload))
	require.NoError(t, err)
	if out == nil {
		return nil
	}
	m := row(t, out)
	require.NotNil(t, m, "a non-nil detail answer encodes as an object")
	return m
}

// rdQueryErr runs a query that must fail and returns its error.
func rdQueryErr(t *testing.T, app *kumikotest.App, c pipeline.Caller, typ, payload string) *pipeline.Error {
	t.Helper()
	out, err := app.Executor.Query(ctx, c, req(typ, payload))
	require.Error(t, err, "answered %#v", out)
	_, pe := code(t, err)
	return pe
}

// rdWriteErr runs a write that must fail and returns its error.
func rdWriteErr(t *testing.T, app *kumikotest.App, c pipeline.Caller, typ, payload string) *pipeline.Error {
	t.Helper()
	out, err := app.Executor.Write(ctx, c, req(typ, payload))
	require.Error(t, err, "answered %#v", out)
	_, pe := code(t, err)
	return pe
}

// rdHasFieldError reports whether e lists a field problem at path.
func rdHasFieldError(e *pipeline.Error, path, code string) bool {
	for _, f := range e.Fields() {
		if f.Path == path && (code == "" || f.Code == code) {
			return true
		}
	}
	return false
}

// rdDetailAsOf is the detail payload of id at ts.
func rdDetailAsOf(id string, ts time.Time) string {
	return fmt.Sprintf(`{"id":%q,"asOf":%q}`, id, rdAt(ts))
}

// ----------------------------------------------------- 1. keyset pagination

// rdSeed25 creates 25 tasks whose title order, priority order and due dates
// differ from the creation order; some due dates are null and some equal, so
// ties are broken by id.
func rdSeed25(t *testing.T, app *kumikotest.App, c pipeline.Caller) []map[string]any {
	t.Helper()
	priorities := []string{"low", "normal", "high"}
	base := time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC)
	var created []map[string]any
	for i := range 25 {
		p := map[string]any{
			"title":    fmt.Sprintf("t%02d", (i*7)%25), // a permutation of t00…t24
			"priority": priorities[(i/2)%3],
		}
		if i%4 != 0 {
			p["dueAt"] = base.AddDate(0, 0, i%5).Format(time.RFC3339)
		}
		created = append(created, write(t, app, c, "task.create", rdJSON(t, p)))
	}
	return created
}

func TestReadListKeysetPaginationWalksEveryRowOnce(t *testing.T) {
	t.Parallel()
	app := newTasks(t)
	created := rdSeed25(t, app, alice)

	all := rdListAll(t, app, alice, "task", nil, 7)
	ids := rdIDs(all)
	require.Len(t, ids, 25)
	seen := map[string]int{}
	for _, id := range ids {
		seen[id]++
	}
	for _, c := range created {
		require.Equal(t, 1, seen[c["id"].(string)], "task %s appears exactly once", c["title"])
	}
	require.Equal(t, rdIDs(created), ids, "the default order is creation order")
	require.Equal(t, rdExpectedOrder(t, created, rdKey{field: "createdAt"}), ids, "the default order is (createdAt, id)")

	// The rows of a page are the rows as a detail shows them.
	for _, r := range all[:3] {
		require.Equal(t, rdDetail(t, app, alice, "task", fmt.Sprintf(`{"id":%q}`, r["id"])), r)
	}

	// Pages are 7, 7, 7, 4; the last page has no cursor.
	first := rdList(t, app, alice, "task", map[string]any{"limit": 7})
	require.Len(t, first.rows, 7)
	require.NotEmpty(t, first.next)

	// One page holding everything has no cursor; so does an exactly full one.
	whole := rdList(t, app, alice, "task", map[string]any{"limit": 200})
	require.Equal(t, ids, rdIDs(whole.rows))
	require.Empty(t, whole.next)
	exact := rdList(t, app, alice, "task", map[string]any{"limit": 25})
	require.Equal(t, ids, rdIDs(exact.rows))
	require.Empty(t, exact.next, "no cursor when nothing follows")
	limit5 := rdListAll(t, app, alice, "task", nil, 5)
	require.Equal(t, ids, rdIDs(limit5), "a limit dividing the total walks the same rows")

	// Without a limit the default (50) applies.
	def := rdList(t, app, alice, "task", map[string]any{})
	require.Equal(t, ids, rdIDs(def.rows))
	require.Empty(t, def.next)
}

func TestReadListSortOrders(t *testing.T) {
	t.Parallel()
	app := newTasks(t)
	created := rdSeed25(t, app, alice)

	cases := []struct {
		name string
		keys []rdKey
	}{
		{"title asc", []rdKey{{field: "title"}}},
		{"title desc", []rdKey{{field: "title", desc: true}}},
		{"priority then title", []rdKey{{field: "priority"}, {field: "title"}}},
		{"priority desc then title desc", []rdKey{{field: "priority", desc: true}, {field: "title", desc: true}}},
		{"dueAt asc, nulls last", []rdKey{{field: "dueAt"}}},
		{"dueAt desc, nulls last", []rdKey{{field: "dueAt", desc: true}}},
		{"priority then dueAt desc (nulls inside a group)", []rdKey{{field: "priority"}, {field: "dueAt", desc: true}}},
		{"dueAt then priority desc", []rdKey{{field: "dueAt"}, {field: "priority", desc: true}}},
		{"createdAt desc", []rdKey{{field: "createdAt", desc: true}}},
		{"id desc", []rdKey{{field: "id", desc: true}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			want := rdExpectedOrder(t, created, tc.keys...)
			base := map[string]any{"sort": rdSort(tc.keys...)}
			t.Run("read table", func(t *testing.T) {
				for _, limit := range []int{7, 1, 200} {
					got := rdIDs(rdListAll(t, app, alice, "task", base, limit))
					require.Equal(t, want, got, "limit %d", limit)
				}
			})
			// The as-of path (folded from events) orders and pages alike.
			t.Run("as of", func(t *testing.T) {
				withAsOf := maps.Clone(base)
				withAsOf["asOf"] = rdAt(rdLastEventTime(t, app))
				for _, limit := range []int{7, 1} {
					got := rdIDs(rdListAll(t, app, alice, "task", withAsOf, limit))
					require.Equal(t, want, got, "asOf, limit %d", limit)
				}
			})
		})
	}

	t.Run("nulls last in both directions", func(t *testing.T) {
		for _, desc := range []bool{false, true} {
			rows := rdListAll(t, app, alice, "task", map[string]any{"sort": rdSort(rdKey{field: "dueAt", desc: desc})}, 4)
			firstNull := slices.IndexFunc(rows, func(r map[string]any) bool { return r["dueAt"] == nil })
			require.Positive(t, firstNull, "desc=%v: some rows have a due date and come first", desc)
			for i, r := range rows[firstNull:] {
				require.Nil(t, r["dueAt"], "desc=%v: row %d after the first null has no due date", desc, firstNull+i)
			}
		}
	})

	t.Run("unsortable field", func(t *testing.T) {
		e := rdQueryErr(t, app, alice, "task.list", `{"sort":[{"field":"notes"}]}`)
		require.Equal(t, pipeline.CodeValidation, e.Code())
		require.True(t, rdHasFieldError(e, "sort[0].field", "not_sortable"), "%+v", e.Fields())
	})
}

func TestReadListCursorSurvivesConcurrentInserts(t *testing.T) {
	t.Parallel()
	app := newTasks(t)
	for i := range 10 {
		write(t, app, alice, "task.create", fmt.Sprintf(`{"title":"m%02d"}`, i))
	}

	t.Run("by title", func(t *testing.T) {
		var seen []string
		var inserted []string // titles inserted after the cursor's position
		cursor := ""
		for page := 0; ; page++ {
			require.Less(t, page, 100)
			p := map[string]any{"limit": 3, "sort": rdSort(rdKey{field: "title"}), "filter": map[string]any{"priority": "normal"}}
			if cursor != "" {
				p["cursor"] = cursor
			}
			got := rdList(t, app, alice, "task", p)
			seen = append(seen, rdTitles(got.rows)...)
			if got.next == "" {
				break
			}
			cursor = got.next
			last := seen[len(seen)-1]
			// Between pages: one row before the cursor (never listed), one
			// right after it and one at the very end (both listed later).
			write(t, app, alice, "task.create", fmt.Sprintf(`{"title":"a%02d"}`, page))
			write(t, app, alice, "task.create", fmt.Sprintf(`{"title":%q}`, last+"x"))
			write(t, app, alice, "task.create", fmt.Sprintf(`{"title":"z%02d"}`, page))
			inserted = append(inserted, last+"x", fmt.Sprintf("z%02d", page))
		}
		counts := map[string]int{}
		for _, s := range seen {
			counts[s]++
			require.Equal(t, 1, counts[s], "%s is listed twice", s)
			require.False(t, strings.HasPrefix(s, "a"), "%s was inserted before the cursor and must not show up", s)
		}
		for i := range 10 {
			require.Equal(t, 1, counts[fmt.Sprintf("m%02d", i)], "m%02d", i)
		}
		for _, s := range inserted {
			require.Equal(t, 1, counts[s], "%s was inserted after the cursor and shows up once", s)
		}
		require.True(t, slices.IsSorted(seen), "pages continue in title order: %v", seen)
	})

	t.Run("default order", func(t *testing.T) {
		before := rdIDs(rdListAll(t, app, alice, "task", nil, 200))
		first := rdList(t, app, alice, "task", map[string]any{"limit": 4})
		require.NotEmpty(t, first.next)
		newRow := write(t, app, alice, "task.create", `{"title":"late"}`)
		rest := rdIDs(rdListAll(t, app, alice, "task", map[string]any{"cursor": first.next}, 4))
		got := append(rdIDs(first.rows), rest...)
		require.Equal(t, append(slices.Clone(before), newRow["id"].(string)), got,
			"no repeats, nothing passed again, the new row at the end")
	})
}

func TestReadListLimitValidation(t *testing.T) {
	t.Parallel()
	app := newTasks(t)
	write(t, app, alice, "task.create", `{"title":"one"}`)

	for _, tc := range []struct {
		payload, code string
	}{
		{`{"limit":0}`, "min"},
		{`{"limit":-1}`, "min"},
		{`{"limit":201}`, "max"},
		{`{"limit":100000}`, "max"},
		{`{"limit":"10"}`, "type"},
		{`{"limit":2.5}`, "type"},
	} {
		e := rdQueryErr(t, app, alice, "task.list", tc.payload)
		require.Equal(t, pipeline.CodeValidation, e.Code(), tc.payload)
		require.True(t, rdHasFieldError(e, "limit", tc.code), "%s: %+v", tc.payload, e.Fields())
	}
	require.Len(t, rdList(t, app, alice, "task", map[string]any{"limit": 200}).rows, 1)
	require.Len(t, rdList(t, app, alice, "task", map[string]any{"limit": 1}).rows, 1)
}

func TestReadListGarbageCursor(t *testing.T) {
	t.Parallel()
	app := newTasks(t)
	for i := range 3 {
		write(t, app, alice, "task.create", fmt.Sprintf(`{"title":"g%d"}`, i))
	}
	b64 := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	for _, cursor := range []string{
		"not a cursor!!",
		"%%%",
		b64("hello"),
		b64(`{"a":1}`),
		b64(`"x"`),
		b64(`[]`),
		b64(`["2026-01-01T00:00:00Z"]`), // one key short of (createdAt, id)
		b64(`["2026-01-01T00:00:00Z","` + uuid.NewString() + `",1]`), // one too many
	} {
		for _, asOf := range []string{"", rdAt(time.Now().Add(time.Hour))} {
			p := map[string]any{"cursor": cursor, "limit": 2}
			if asOf != "" {
				p["asOf"] = asOf
			}
			e := rdQueryErr(t, app, alice, "task.list", rdJSON(t, p))
			require.Equal(t, pipeline.CodeValidation, e.Code(), "cursor %q asOf %q", cursor, asOf)
			require.Equal(t, "invalid_cursor", e.Reason(), "cursor %q asOf %q", cursor, asOf)
		}
	}
	e := rdQueryErr(t, app, alice, "task.list", `{"cursor":42}`)
	require.Equal(t, pipeline.CodeValidation, e.Code())
	require.True(t, rdHasFieldError(e, "cursor", "type"), "%+v", e.Fields())
}

// A cursor that decodes but does not belong to the list (other sort keys,
// values of the wrong type) is the client's mistake, not a server error.
func TestReadListForeignCursor(t *testing.T) {
	t.Parallel()
	app := newTasks(t)
	for i := range 3 {
		write(t, app, alice, "task.create", fmt.Sprintf(`{"title":"f%d","dueAt":"2026-12-0%dT10:00:00Z"}`, i, i+1))
	}
	byTitle := rdList(t, app, alice, "task", map[string]any{"limit": 1, "sort": rdSort(rdKey{field: "title"})})
	require.NotEmpty(t, byTitle.next)

	b64 := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	cases := []struct {
		name string
		p    map[string]any
	}{
		{"title cursor on a dueAt list", map[string]any{"limit": 1, "cursor": byTitle.next, "sort": rdSort(rdKey{field: "dueAt"})}},
		{"title cursor on the default list", map[string]any{"limit": 1, "cursor": byTitle.next}},
		{"wrong value types", map[string]any{"limit": 1, "cursor": b64(`["yesterday","not-a-uuid"]`)}},
		{"object values", map[string]any{"limit": 1, "cursor": b64(`[{"a":1},[2]]`)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := rdQueryErr(t, app, alice, "task.list", rdJSON(t, tc.p))
			require.Equal(t, pipeline.CodeValidation, e.Code(), "%v", e)
			require.Equal(t, "invalid_cursor", e.Reason(), "%v", e)
		})
	}
}

// ------------------------------------------------------------- 2. filters

func TestReadListFilters(t *testing.T) {
	t.Parallel()
	app := newTasks(t)
	mk := func(title, priority, due string) map[string]any {
		p := map[string]any{"title": title, "priority": priority}
		if due != "" {
			p["dueAt"] = due
		}
		return write(t, app, alice, "task.create", rdJSON(t, p))
	}
	h1 := mk("h1", "high", "2026-12-01T10:00:00Z")
	n1 := mk("n1", "normal", "")
	h2 := mk("h2", "high", "")
	l1 := mk("l1", "low", "2026-12-01T10:00:00Z")
	h3 := mk("h3", "high", "2026-12-02T10:00:00Z")
	done := write(t, app, alice, "task.update", fmt.Sprintf(`{"id":%q,"version":1,"changes":{"done":true}}`, n1["id"]))
	id := func(m map[string]any) string { return m["id"].(string) }

	list := func(filter map[string]any) []string {
		return rdIDs(rdListAll(t, app, alice, "task", map[string]any{"filter": filter}, 2))
	}
	require.Equal(t, []string{id(h1), id(h2), id(h3)}, list(map[string]any{"priority": "high"}))
	require.Equal(t, []string{id(n1)}, list(map[string]any{"done": true}))
	require.Equal(t, float64(2), done["version"])
	require.Equal(t, []string{id(h1), id(h2), id(l1), id(h3)}, list(map[string]any{"done": false}))
	require.Equal(t, []string{id(l1)}, list(map[string]any{"id": id(l1)}))
	require.Equal(t, []string{id(l1)}, list(map[string]any{"id": strings.ToUpper(id(l1))}), "ids are normalised")
	require.Empty(t, list(map[string]any{"id": uuid.NewString()}))
	require.Equal(t, []string{id(n1), id(h2)}, list(map[string]any{"dueAt": nil}), "null filter: IS NULL")
	require.Equal(t, []string{id(h2)}, list(map[string]any{"dueAt": nil, "priority": "high"}), "filters combine with AND")
	require.Equal(t, []string{id(h1), id(l1)}, list(map[string]any{"dueAt": "2026-12-01T12:00:00+02:00"}), "timestamps compare as instants")
	require.Equal(t, []string{id(h1)}, list(map[string]any{"title": "h1"}))
	require.Empty(t, list(map[string]any{"title": "H1"}))
	require.Equal(t, []string{id(h3), id(h2), id(h1)}, rdIDs(rdListAll(t, app, alice, "task", map[string]any{
		"filter": map[string]any{"priority": "high"}, "sort": rdSort(rdKey{field: "title", desc: true}),
	}, 1)), "filter and sort combine, page by page")
	require.Equal(t, []string{id(h1), id(l1), id(h3), id(h2)}, rdIDs(rdListAll(t, app, alice, "task", map[string]any{
		"filter": map[string]any{"done": false}, "sort": rdSort(rdKey{field: "dueAt"}, rdKey{field: "title"}),
	}, 2)), "filter with a sort that has nulls")
}

func TestReadListFilterValidation(t *testing.T) {
	t.Parallel()
	app := newTasks(t)
	write(t, app, alice, "task.create", `{"title":"x"}`)
	before := events(t, app)

	for _, tc := range []struct {
		payload, path, code string
	}{
		{`{"filter":{"bogus":"x"}}`, "filter.bogus", "unknown_field"},
		{`{"filter":{"createdBy":"alice"}}`, "filter.createdBy", "unknown_field"},
		{`{"filter":{"priority":"urgent"}}`, "filter.priority", "oneof"},
		{`{"filter":{"done":"yes"}}`, "filter.done", "type"},
		{`{"filter":{"dueAt":"tomorrow"}}`, "filter.dueAt", "type"},
		{`{"filter":{"id":"nope"}}`, "filter.id", "type"},
		{`{"filter":[1]}`, "filter", "type"},
	} {
		e := rdQueryErr(t, app, alice, "task.list", tc.payload)
		require.Equal(t, pipeline.CodeValidation, e.Code(), tc.payload)
		require.True(t, rdHasFieldError(e, tc.path, tc.code), "%s: %+v", tc.payload, e.Fields())
	}
	require.Equal(t, before, events(t, app))
}

// A null filter on a field the entity does not have is as unknown as a
// non-null one: validation_error naming the path, on the read table and on
// the as-of path alike.
func TestReadListFilterUnknownFieldNull(t *testing.T) {
	t.Parallel()
	app := newTasks(t)
	write(t, app, alice, "task.create", `{"title":"x"}`)
	for name, p := range map[string]string{
		"now":   `{"filter":{"bogus":null}}`,
		"as of": fmt.Sprintf(`{"filter":{"bogus":null},"asOf":%q}`, rdAt(time.Now().Add(time.Hour))),
	} {
		t.Run(name, func(t *testing.T) {
			e := rdQueryErr(t, app, alice, "task.list", p)
			require.Equal(t, pipeline.CodeValidation, e.Code(), "%s: %v", p, e)
			require.True(t, rdHasFieldError(e, "filter.bogus", "unknown_field"), "%s: %+v", p, e.Fields())
		})
	}
}

// ------------------------------------------------------ 3. includeDeleted

func TestReadListIncludeDeleted(t *testing.T) {
	t.Parallel()
	app := newTasks(t)
	a := write(t, app, alice, "task.create", `{"title":"a"}`)
	b := write(t, app, alice, "task.create", `{"title":"b"}`)
	c := write(t, app, alice, "task.create", `{"title":"c"}`)
	write(t, app, alice, "task.delete", fmt.Sprintf(`{"id":%q}`, b["id"]))
	ids := func(p map[string]any) []string { return rdIDs(rdListAll(t, app, alice, "task", p, 2)) }

	require.Equal(t, []string{a["id"].(string), c["id"].(string)}, ids(nil), "deleted rows are hidden by default")
	require.Equal(t, []string{a["id"].(string), c["id"].(string)}, ids(map[string]any{"includeDeleted": false}))
	require.Empty(t, ids(map[string]any{"filter": map[string]any{"id": b["id"]}}))
	require.Nil(t, rdDetail(t, app, alice, "task", fmt.Sprintf(`{"id":%q}`, b["id"])))

	all := rdListAll(t, app, alice, "task", map[string]any{"includeDeleted": true}, 2)
	require.Equal(t, []string{a["id"].(string), b["id"].(string), c["id"].(string)}, rdIDs(all))
	for _, r := range all {
		if r["id"] == b["id"] {
			require.NotNil(t, r["deletedAt"])
			require.Equal(t, float64(2), r["version"])
		} else {
			require.Nil(t, r["deletedAt"])
		}
	}
	require.Equal(t, []string{b["id"].(string)}, ids(map[string]any{"includeDeleted": true, "filter": map[string]any{"title": "b"}}))

	write(t, app, alice, "task.restore", fmt.Sprintf(`{"id":%q}`, b["id"]))
	require.Equal(t, []string{a["id"].(string), b["id"].(string), c["id"].(string)}, ids(nil), "restored rows are back")

	e := rdQueryErr(t, app, alice, "task.list", `{"includeDeleted":"yes"}`)
	require.Equal(t, pipeline.CodeValidation, e.Code())

	// An entity without soft delete has no deleted rows to include.
	vault := kumikotest.NewApp(t, []*feature.Feature{rdVault})
	e = rdQueryErr(t, vault, alice, "account.list", `{"includeDeleted":true}`)
	require.Equal(t, pipeline.CodeValidation, e.Code())
	require.True(t, rdHasFieldError(e, "includeDeleted", "unknown_field"), "%+v", e.Fields())
}

// ---------------------------------------------------- 4. tenant isolation

func TestReadTenantIsolationOfReads(t *testing.T) {
	t.Parallel()
	app := newTasks(t)
	var aliceIDs []string
	for i := range 3 {
		aliceIDs = append(aliceIDs, write(t, app, alice, "task.create", fmt.Sprintf(`{"title":"alice %d","priority":"high"}`, i))["id"].(string))
	}
	write(t, app, alice, "task.delete", fmt.Sprintf(`{"id":%q}`, aliceIDs[2]))
	var bobIDs []string
	for i := range 2 {
		bobIDs = append(bobIDs, write(t, app, bob, "task.create", fmt.Sprintf(`{"title":"bob %d"}`, i))["id"].(string))
	}
	future := rdAt(rdLastEventTime(t, app).Add(time.Hour))

	for _, p := range []map[string]any{
		nil,
		{"includeDeleted": true},
		{"sort": rdSort(rdKey{field: "title", desc: true})},
		{"asOf": future},
		{"asOf": future, "includeDeleted": true},
	} {
		got := rdIDs(rdListAll(t, app, bob, "task", p, 1))
		require.ElementsMatch(t, bobIDs, got, "bob sees his rows only: %v", p)
	}
	for _, id := range aliceIDs {
		require.Empty(t, rdList(t, app, bob, "task", map[string]any{"filter": map[string]any{"id": id}, "includeDeleted": true}).rows)
		require.Empty(t, rdList(t, app, bob, "task", map[string]any{"filter": map[string]any{"id": id}, "asOf": future, "includeDeleted": true}).rows)
		require.Nil(t, rdDetail(t, app, bob, "task", fmt.Sprintf(`{"id":%q}`, id)), "bob's detail of alice's task is null")
		require.Nil(t, rdDetail(t, app, bob, "task", fmt.Sprintf(`{"id":%q,"asOf":%q}`, id, future)), "also as of a time")
	}
	require.Empty(t, rdList(t, app, bob, "task", map[string]any{"filter": map[string]any{"priority": "high"}}).rows)

	require.Equal(t, aliceIDs[:2], rdIDs(rdListAll(t, app, alice, "task", nil, 1)))
	require.Equal(t, aliceIDs, rdIDs(rdListAll(t, app, alice, "task", map[string]any{"includeDeleted": true}, 1)))
	for _, id := range bobIDs {
		require.Nil(t, rdDetail(t, app, alice, "task", fmt.Sprintf(`{"id":%q}`, id)))
	}

	// A cursor from alice's list does not open alice's rows to bob.
	page := rdList(t, app, alice, "task", map[string]any{"limit": 1})
	require.NotEmpty(t, page.next)
	out, err := app.Executor.Query(ctx, bob, req("task.list", rdJSON(t, map[string]any{"limit": 10, "cursor": page.next})))
	if err == nil {
		for _, r := range row(t, out)["rows"].([]any) {
			require.Contains(t, bobIDs, r.(map[string]any)["id"])
		}
	}
}

func TestReadTenantIsolationOfWrites(t *testing.T) {
	t.Parallel()
	app := newTasks(t)
	x := write(t, app, alice, "task.create", `{"title":"alice's","priority":"high"}`)["id"].(string)
	y := write(t, app, alice, "task.create", `{"title":"alice's deleted"}`)["id"].(string)
	write(t, app, alice, "task.delete", fmt.Sprintf(`{"id":%q}`, y))
	write(t, app, bob, "task.create", `{"title":"bob's"}`)

	xBefore := rdDetail(t, app, alice, "task", fmt.Sprintf(`{"id":%q}`, x))
	yBefore := rdList(t, app, alice, "task", map[string]any{"includeDeleted": true, "filter": map[string]any{"id": y}}).rows
	before := events(t, app)
	aliceEvents := app.Count(t, "SELECT count(*) FROM kumiko_events WHERE tenant_id = $1", tenantA)

	missing := rdWriteErr(t, app, bob, "task.update", fmt.Sprintf(`{"id":%q,"version":1,"changes":{"title":"x"}}`, uuid.New()))
	require.Equal(t, pipeline.CodeNotFound, missing.Code())

	for _, tc := range []struct{ typ, payload string }{
		{"task.update", fmt.Sprintf(`{"id":%q,"version":1,"changes":{"title":"stolen"}}`, x)},
		{"task.update", fmt.Sprintf(`{"id":%q,"version":7,"changes":{"title":"stolen"}}`, x)},
		{"task.update", fmt.Sprintf(`{"id":%q,"version":2,"changes":{"title":"stolen"}}`, y)},
		{"task.delete", fmt.Sprintf(`{"id":%q}`, x)},
		{"task.delete", fmt.Sprintf(`{"id":%q}`, y)},
		{"task.restore", fmt.Sprintf(`{"id":%q}`, y)},
		{"task.restore", fmt.Sprintf(`{"id":%q}`, x)},
	} {
		e := rdWriteErr(t, app, bob, tc.typ, tc.payload)
		require.Equal(t, pipeline.CodeNotFound, e.Code(), "%s %s: %v", tc.typ, tc.payload, e)
		require.Equal(t, missing.Reason(), e.Reason(), "a foreign stream answers like a missing one: %s %s", tc.typ, tc.payload)
		require.NotContains(t, e.Details(), "currentVersion")
	}

	// The command path refuses too.
	_, err := app.Executor.Command(ctx, bob, req("task.complete", fmt.Sprintf(`{"id":%q,"version":1}`, x)))
	c, pe := code(t, err)
	require.Equal(t, pipeline.CodeNotFound, c, "%v", pe)

	// So does a batch, naming the failing request.
	_, err = app.Executor.Batch(ctx, bob, []pipeline.Request{
		req("task.create", `{"title":"bob's second"}`),
		req("task.update", fmt.Sprintf(`{"id":%q,"version":1,"changes":{"title":"stolen"}}`, x)),
	})
	c, pe = code(t, err)
	require.Equal(t, pipeline.CodeNotFound, c)
	require.Equal(t, 1, pe.Details()["failedIndex"])

	// Claiming alice's id on create cannot take over her stream.
	_, err = app.Executor.Write(ctx, bob, req("task.create", fmt.Sprintf(`{"id":%q,"title":"mine now"}`, x)))
	_, pe = code(t, err)
	require.NotContains(t, pe.Details(), "currentVersion", "the stream's version is not disclosed")

	require.Equal(t, before, events(t, app), "nothing was written")
	require.Equal(t, aliceEvents, app.Count(t, "SELECT count(*) FROM kumiko_events WHERE tenant_id = $1", tenantA))
	require.Equal(t, xBefore, rdDetail(t, app, alice, "task", fmt.Sprintf(`{"id":%q}`, x)), "alice's row is unchanged")
	require.Equal(t, yBefore, rdList(t, app, alice, "task", map[string]any{"includeDeleted": true, "filter": map[string]any{"id": y}}).rows)
	require.Equal(t, 0, app.Count(t, "SELECT count(*) FROM read_task WHERE id = $1 AND tenant_id <> $2", x, tenantA))
}

func TestReadStatsAreTenantScoped(t *testing.T) {
	t.Parallel()
	app := newTasks(t)
	for i := range 3 {
		write(t, app, alice, "task.create", fmt.Sprintf(`{"title":"a%d"}`, i))
	}
	first := rdList(t, app, alice, "task", map[string]any{"limit": 1}).rows[0]
	_, err := app.Executor.Command(ctx, alice, req("task.complete", fmt.Sprintf(`{"id":%q,"version":1}`, first["id"])))
	require.NoError(t, err)
	bobTask := write(t, app, bob, "task.create", `{"title":"b"}`)
	carol := kumikotest.User(uuid.MustParse("0190c000-0000-7000-8000-00000000000c"), "carol", "User")

	sum := func(c pipeline.Caller) (created, completed float64, months int) {
		rows := query(t, app, c, "task.stats", `{}`).([]any)
		for _, r := range rows {
			m := r.(map[string]any)
			created += m["created"].(float64)
			completed += m["completed"].(float64)
		}
		return created, completed, len(rows)
	}
	created, completed, _ := sum(bob)
	require.Equal(t, float64(1), created, "bob counts his own task only")
	require.Equal(t, float64(0), completed, "alice's completion is not bob's")
	bobMonth := rdEventTime(t, app, bobTask["id"].(string), 1).UTC().Format("2006-01")
	require.Equal(t, []any{map[string]any{"month": bobMonth, "created": float64(1), "completed": float64(0)}},
		query(t, app, bob, "task.stats", `{}`))

	created, completed, _ = sum(alice)
	require.Equal(t, float64(3), created)
	require.Equal(t, float64(1), completed)

	require.Equal(t, []any{}, query(t, app, carol, "task.stats", `{}`), "a tenant without tasks has no stats")
}

// --------------------------------------------------------- 5. as-of reads

func TestReadDetailAsOf(t *testing.T) {
	t.Parallel()
	app := newTasks(t)
	a := write(t, app, alice, "task.create", `{"title":"v1","dueAt":"2026-12-01T10:00:00Z"}`)
	id := a["id"].(string)
	write(t, app, alice, "task.update", fmt.Sprintf(`{"id":%q,"version":1,"changes":{"title":"v2"}}`, id))
	write(t, app, alice, "task.update", fmt.Sprintf(`{"id":%q,"version":2,"changes":{"title":"v3","priority":"high","dueAt":null}}`, id))
	current := rdDetail(t, app, alice, "task", fmt.Sprintf(`{"id":%q}`, id))

	t1, t2, t3 := rdEventTime(t, app, id, 1), rdEventTime(t, app, id, 2), rdEventTime(t, app, id, 3)
	require.True(t, t1.Before(t2) && t2.Before(t3), "separate writes have distinct timestamps: %v %v %v", t1, t2, t3)

	at := func(ts time.Time) map[string]any { return rdDetail(t, app, alice, "task", rdDetailAsOf(id, ts)) }

	require.Nil(t, at(t1.Add(-time.Microsecond)), "before creation: null")
	require.Nil(t, at(t1.Add(-24*time.Hour)))

	v1 := at(t1)
	require.NotNil(t, v1)
	require.Equal(t, "v1", v1["title"])
	require.Equal(t, float64(1), v1["version"])
	require.Equal(t, "normal", v1["priority"])
	require.Equal(t, "2026-12-01T10:00:00Z", v1["dueAt"])
	require.Equal(t, a, v1, "the state right after creation equals the create answer")

	for _, ts := range []time.Time{t2, t3.Add(-time.Microsecond)} {
		v2 := at(ts)
		require.Equal(t, "v2", v2["title"], "as of %s", rdAt(ts))
		require.Equal(t, float64(2), v2["version"])
		require.Equal(t, "normal", v2["priority"])
		require.Equal(t, "2026-12-01T10:00:00Z", v2["dueAt"])
		require.Equal(t, a["createdAt"], v2["createdAt"])
		require.Equal(t, rdAt(t2), v2["updatedAt"])
	}

	v3 := at(t3)
	require.Equal(t, "v3", v3["title"])
	require.Equal(t, float64(3), v3["version"])
	require.Nil(t, v3["dueAt"])
	require.Equal(t, current, v3, "as of the last event equals the current row")
	require.Equal(t, current, at(t3.Add(time.Hour)), "as of the future equals the current row")

	// The same instant written with another offset answers the same.
	require.Equal(t, "v2", rdDetail(t, app, alice, "task",
		fmt.Sprintf(`{"id":%q,"asOf":%q}`, id, t2.In(time.FixedZone("CEST", 2*3600)).Format(time.RFC3339Nano)))["title"])

	// After delete: null; before delete: the last state.
	write(t, app, alice, "task.delete", fmt.Sprintf(`{"id":%q}`, id))
	t4 := rdEventTime(t, app, id, 4)
	require.True(t, t3.Before(t4))
	require.Nil(t, at(t4), "deleted: null")
	require.Nil(t, at(t4.Add(time.Hour)))
	require.Equal(t, current, at(t4.Add(-time.Microsecond)))

	// Restored: visible again from the restore on.
	write(t, app, alice, "task.restore", fmt.Sprintf(`{"id":%q}`, id))
	t5 := rdEventTime(t, app, id, 5)
	r := at(t5)
	require.Equal(t, float64(5), r["version"])
	require.Nil(t, r["deletedAt"])
	require.Equal(t, rdDetail(t, app, alice, "task", fmt.Sprintf(`{"id":%q}`, id)), r)
	require.Nil(t, at(t4), "history does not change")

	// An unknown id as of any time is null; a malformed asOf is refused.
	require.Nil(t, rdDetail(t, app, alice, "task", rdDetailAsOf(uuid.NewString(), t5)))
	e := rdQueryErr(t, app, alice, "task.detail", fmt.Sprintf(`{"id":%q,"asOf":"yesterday"}`, id))
	require.Equal(t, pipeline.CodeValidation, e.Code())
	require.True(t, rdHasFieldError(e, "asOf", "type"), "%+v", e.Fields())
}

func TestReadListAsOf(t *testing.T) {
	t.Parallel()
	app := newTasks(t)
	a := write(t, app, alice, "task.create", `{"title":"a-v1"}`)["id"].(string)
	write(t, app, alice, "task.update", fmt.Sprintf(`{"id":%q,"version":1,"changes":{"title":"a-v2"}}`, a))
	b := write(t, app, alice, "task.create", `{"title":"b-v1","priority":"high"}`)["id"].(string)
	write(t, app, alice, "task.update", fmt.Sprintf(`{"id":%q,"version":2,"changes":{"title":"a-v3"}}`, a))
	c := write(t, app, alice, "task.create", `{"title":"c-v1","dueAt":"2026-12-01T10:00:00Z"}`)["id"].(string)
	write(t, app, alice, "task.delete", fmt.Sprintf(`{"id":%q}`, b))
	write(t, app, bob, "task.create", `{"title":"bob's"}`)

	tA1, tA2, tB1 := rdEventTime(t, app, a, 1), rdEventTime(t, app, a, 2), rdEventTime(t, app, b, 1)
	tA3, tC1, tB2 := rdEventTime(t, app, a, 3), rdEventTime(t, app, c, 1), rdEventTime(t, app, b, 2)
	order := []time.Time{tA1, tA2, tB1, tA3, tC1, tB2}
	for i := 1; i < len(order); i++ {
		require.True(t, order[i-1].Before(order[i]), "separate writes have distinct timestamps: %v", order)
	}

	titles := func(ts time.Time, extra map[string]any) []string {
		p := map[string]any{"asOf": rdAt(ts), "sort": rdSort(rdKey{field: "title"})}
		maps.Copy(p, extra)
		return rdTitles(rdListAll(t, app, alice, "task", p, 200))
	}
	require.Empty(t, titles(tA1.Add(-time.Microsecond), nil), "before anything existed")
	require.Equal(t, []string{"a-v1"}, titles(tA1, nil))
	require.Equal(t, []string{"a-v2"}, titles(tA2, nil), "the task created later is absent")
	require.Equal(t, []string{"a-v2", "b-v1"}, titles(tB1, nil))
	require.Equal(t, []string{"a-v2", "b-v1"}, titles(tA3.Add(-time.Microsecond), nil), "the title changed later shows the old title")
	require.Equal(t, []string{"a-v3", "b-v1"}, titles(tA3, nil))
	require.Equal(t, []string{"a-v3", "b-v1", "c-v1"}, titles(tC1, nil))
	require.Equal(t, []string{"a-v3", "c-v1"}, titles(tB2, nil), "deleted by then")
	require.Equal(t, []string{"a-v3", "b-v1", "c-v1"}, titles(tB2, map[string]any{"includeDeleted": true}))
	require.Equal(t, []string{"a-v3", "b-v1", "c-v1"}, titles(tB2.Add(-time.Microsecond), nil), "not yet deleted")

	// Filters and sorts apply to the state at that time.
	require.Equal(t, []string{"a-v1"}, titles(tA1, map[string]any{"filter": map[string]any{"title": "a-v1"}}))
	require.Empty(t, titles(tA3, map[string]any{"filter": map[string]any{"title": "a-v1"}}))
	require.Equal(t, []string{"b-v1"}, titles(tC1, map[string]any{"filter": map[string]any{"priority": "high"}}))
	require.Equal(t, []string{"a-v3", "b-v1"}, titles(tC1, map[string]any{"filter": map[string]any{"dueAt": nil}}))
	require.Equal(t, []string{"c-v1"}, titles(tC1, map[string]any{"filter": map[string]any{"id": c}}))
	require.Equal(t, []string{"c-v1", "b-v1", "a-v3"}, titles(tC1, map[string]any{"sort": rdSort(rdKey{field: "title", desc: true})}))
	require.Equal(t, []string{"c-v1", "b-v1", "a-v3"}, titles(tC1, map[string]any{"sort": rdSort(rdKey{field: "dueAt"}, rdKey{field: "createdAt", desc: true})}),
		"nulls last, then createdAt desc")

	// A row as of a time is the state then: its version and timestamps.
	rows := rdListAll(t, app, alice, "task", map[string]any{"asOf": rdAt(tB1), "filter": map[string]any{"id": a}}, 10)
	require.Len(t, rows, 1)
	require.Equal(t, float64(2), rows[0]["version"])
	require.Equal(t, rdAt(tA1), rows[0]["createdAt"])
	require.Equal(t, rdAt(tA2), rows[0]["updatedAt"])
	require.Equal(t, rows[0], rdDetail(t, app, alice, "task", rdDetailAsOf(a, tB1)), "list and detail as of a time agree")

	// As of now, the list equals the current list, row for row.
	now := rdLastEventTime(t, app)
	for _, p := range []map[string]any{nil, {"includeDeleted": true}, {"sort": rdSort(rdKey{field: "priority", desc: true}, rdKey{field: "dueAt"})}} {
		withAsOf := maps.Clone(p)
		if withAsOf == nil {
			withAsOf = map[string]any{}
		}
		withAsOf["asOf"] = rdAt(now)
		require.Equal(t, rdListAll(t, app, alice, "task", p, 200), rdListAll(t, app, alice, "task", withAsOf, 200), "%v", p)
	}

	e := rdQueryErr(t, app, alice, "task.list", `{"asOf":"last tuesday"}`)
	require.Equal(t, pipeline.CodeValidation, e.Code())
	require.True(t, rdHasFieldError(e, "asOf", "type"), "%+v", e.Fields())
}

func TestReadListAsOfPagination(t *testing.T) {
	t.Parallel()
	app := newTasks(t)
	var early []map[string]any
	for i := range 7 {
		early = append(early, write(t, app, alice, "task.create", fmt.Sprintf(`{"title":"p%d","priority":%q}`, (i*3)%7, []string{"low", "high"}[i%2])))
	}
	asOf := rdEventTime(t, app, early[6]["id"].(string), 1)
	// Later: a rename, a delete, two more tasks.
	write(t, app, alice, "task.update", fmt.Sprintf(`{"id":%q,"version":1,"changes":{"title":"renamed"}}`, early[1]["id"]))
	write(t, app, alice, "task.delete", fmt.Sprintf(`{"id":%q}`, early[2]["id"]))
	write(t, app, alice, "task.create", `{"title":"late1"}`)
	write(t, app, alice, "task.create", `{"title":"late2"}`)
	require.True(t, asOf.Before(rdLastEventTime(t, app)))

	for _, keys := range [][]rdKey{
		nil,
		{{field: "title"}},
		{{field: "title", desc: true}},
		{{field: "priority"}, {field: "title", desc: true}},
	} {
		base := map[string]any{"asOf": rdAt(asOf)}
		if keys != nil {
			base["sort"] = rdSort(keys...)
		}
		if keys == nil {
			keys = []rdKey{{field: "createdAt"}}
		}
		got := rdListAll(t, app, alice, "task", base, 2)
		require.Equal(t, rdExpectedOrder(t, early, keys...), rdIDs(got), "as of the 7th create, sort %v", keys)
		for i, r := range got {
			require.Equal(t, float64(1), r["version"], "row %d as it was then", i)
			require.NotEqual(t, "renamed", r["title"])
			require.Nil(t, r["deletedAt"])
		}
	}

	// Paging the present with and without asOf gives the same rows.
	now := rdAt(rdLastEventTime(t, app))
	for _, limit := range []int{1, 2, 3} {
		require.Equal(t,
			rdListAll(t, app, alice, "task", map[string]any{"sort": rdSort(rdKey{field: "title"})}, limit),
			rdListAll(t, app, alice, "task", map[string]any{"sort": rdSort(rdKey{field: "title"}), "asOf": now}, limit),
			"limit %d", limit)
	}
}

// A hard-deleted row is gone from the delete on, and there before it.
func TestReadAsOfHardDelete(t *testing.T) {
	t.Parallel()
	app := kumikotest.NewApp(t, []*feature.Feature{rdVault})
	acc := write(t, app, alice, "account.create", `{"name":"gone soon"}`)
	id := acc["id"].(string)
	write(t, app, alice, "account.delete", fmt.Sprintf(`{"id":%q}`, id))
	require.Equal(t, 0, app.Count(t, "SELECT count(*) FROM read_account"))
	t1, t2 := rdEventTime(t, app, id, 1), rdEventTime(t, app, id, 2)
	require.True(t, t1.Before(t2))

	require.Nil(t, rdDetail(t, app, alice, "account", fmt.Sprintf(`{"id":%q}`, id)))
	require.Nil(t, rdDetail(t, app, alice, "account", rdDetailAsOf(id, t2)))
	before := rdDetail(t, app, alice, "account", rdDetailAsOf(id, t1))
	require.Equal(t, acc, before)
	require.Equal(t, []string{id}, rdIDs(rdListAll(t, app, alice, "account", map[string]any{"asOf": rdAt(t2.Add(-time.Microsecond))}, 5)))
	require.Empty(t, rdListAll(t, app, alice, "account", map[string]any{"asOf": rdAt(t2)}, 5))
}

// ------------------------------------------------ 6. field-level access

// rdVault is a feature with field-level access rules: salary is read by
// admins only, tier is written by admins only.
var rdVault = feature.Define("vault", func(r *feature.Registrar) {
	r.Entity("account", feature.Fields{
		"name":   feature.Text().Required().MaxLen(100).Sortable(),
		"salary": feature.Number().ReadRoles("Admin").Sortable(),
		"tier":   feature.Enum("standard", "gold").Default("standard").WriteRoles("Admin"),
	})
	r.Crud("account", feature.Access{Write: feature.Roles("User", "Admin"), Read: feature.AnyUser()})
})

var rdAdmin = kumikotest.User(tenantA, "root", "Admin")

func TestReadFieldReadAccess(t *testing.T) {
	t.Parallel()
	app := kumikotest.NewApp(t, []*feature.Feature{rdVault})

	byAdmin := write(t, app, rdAdmin, "account.create", `{"name":"ann","salary":100}`)
	require.Equal(t, float64(100), byAdmin["salary"])
	byUser := write(t, app, alice, "account.create", `{"name":"ben","salary":50}`)
	require.NotContains(t, byUser, "salary", "the write answer hides what the writer may not read")
	require.Equal(t, "ben", byUser["name"])
	require.Equal(t, "standard", byUser["tier"])
	ann, ben := byAdmin["id"].(string), byUser["id"].(string)
	require.Equal(t, 1, app.Count(t, "SELECT count(*) FROM read_account WHERE id = $1 AND salary = 50", ben), "written although not readable")

	updated := write(t, app, alice, "account.update", fmt.Sprintf(`{"id":%q,"version":1,"changes":{"name":"ann b."}}`, ann))
	require.NotContains(t, updated, "salary")

	// Detail, now and as of now.
	now := rdLastEventTime(t, app)
	for _, p := range []string{fmt.Sprintf(`{"id":%q}`, ann), rdDetailAsOf(ann, now)} {
		u := rdDetail(t, app, alice, "account", p)
		require.NotNil(t, u)
		require.NotContains(t, u, "salary", p)
		require.Equal(t, "ann b.", u["name"])
		a := rdDetail(t, app, rdAdmin, "account", p)
		require.Equal(t, float64(100), a["salary"], p)
	}

	// List, now and as of now.
	for _, extra := range []map[string]any{{}, {"asOf": rdAt(now)}} {
		rows := rdListAll(t, app, alice, "account", extra, 1)
		require.Equal(t, []string{ann, ben}, rdIDs(rows))
		for _, r := range rows {
			require.NotContains(t, r, "salary", "%v", extra)
			require.Contains(t, r, "tier")
		}
		rows = rdListAll(t, app, rdAdmin, "account", extra, 1)
		require.Equal(t, []any{float64(100), float64(50)}, []any{rows[0]["salary"], rows[1]["salary"]}, "%v", extra)
	}

	// Sorting or filtering by the field would disclose it.
	for _, p := range []map[string]any{
		{"sort": rdSort(rdKey{field: "salary"})},
		{"sort": rdSort(rdKey{field: "name"}, rdKey{field: "salary", desc: true})},
		{"filter": map[string]any{"salary": 100}},
		{"filter": map[string]any{"salary": nil}},
		{"sort": rdSort(rdKey{field: "salary"}), "asOf": rdAt(now)},
		{"filter": map[string]any{"salary": 100}, "asOf": rdAt(now)},
	} {
		e := rdQueryErr(t, app, alice, "account.list", rdJSON(t, p))
		require.Equal(t, pipeline.CodeAccessDenied, e.Code(), "%v", p)
		require.Equal(t, "field_access", e.Reason(), "%v", p)
		require.Equal(t, "salary", e.Details()["field"], "%v", p)
	}

	// An admin may.
	require.Equal(t, []string{ben, ann}, rdIDs(rdListAll(t, app, rdAdmin, "account", map[string]any{"sort": rdSort(rdKey{field: "salary"})}, 1)))
	require.Equal(t, []string{ann, ben}, rdIDs(rdListAll(t, app, rdAdmin, "account", map[string]any{"sort": rdSort(rdKey{field: "salary", desc: true})}, 1)))
	require.Equal(t, []string{ann}, rdIDs(rdListAll(t, app, rdAdmin, "account", map[string]any{"filter": map[string]any{"salary": 100}}, 1)))
	require.Equal(t, []string{ann}, rdIDs(rdListAll(t, app, rdAdmin, "account", map[string]any{"filter": map[string]any{"salary": 100}, "asOf": rdAt(now)}, 1)))
}

func TestReadFieldWriteAccess(t *testing.T) {
	t.Parallel()
	app := kumikotest.NewApp(t, []*feature.Feature{rdVault})
	accounts := func() int { return app.Count(t, "SELECT count(*) FROM read_account") }

	for _, p := range []string{`{"name":"x","tier":"gold"}`, `{"name":"x","tier":"standard"}`, `{"name":"x","tier":null}`} {
		e := rdWriteErr(t, app, alice, "account.create", p)
		require.Equal(t, pipeline.CodeAccessDenied, e.Code(), p)
		require.Equal(t, "field_access", e.Reason(), p)
		require.Equal(t, "tier", e.Details()["field"], p)
	}
	require.Equal(t, 0, events(t, app), "nothing was written")
	require.Equal(t, 0, accounts())

	// Not sending it works, and the default applies.
	mine := write(t, app, alice, "account.create", `{"name":"mine"}`)
	require.Equal(t, "standard", mine["tier"])
	id := mine["id"].(string)
	require.Equal(t, 1, events(t, app))
	require.Equal(t, "standard", queryString(t, app, "SELECT tier FROM read_account WHERE id = $1", id))

	// Updating it is refused; the stream does not move.
	for _, p := range []string{
		fmt.Sprintf(`{"id":%q,"version":1,"changes":{"tier":"gold"}}`, id),
		fmt.Sprintf(`{"id":%q,"version":1,"changes":{"name":"renamed","tier":"gold"}}`, id),
	} {
		e := rdWriteErr(t, app, alice, "account.update", p)
		require.Equal(t, pipeline.CodeAccessDenied, e.Code(), p)
		require.Equal(t, "field_access", e.Reason(), p)
	}
	require.Equal(t, 1, events(t, app))
	d := rdDetail(t, app, alice, "account", fmt.Sprintf(`{"id":%q}`, id))
	require.Equal(t, float64(1), d["version"])
	require.Equal(t, "mine", d["name"])
	require.Equal(t, "standard", d["tier"])

	// A batch with such a write fails as a whole and names it.
	_, err := app.Executor.Batch(ctx, alice, []pipeline.Request{
		req("account.create", `{"name":"ok"}`),
		req("account.create", `{"name":"not ok","tier":"gold"}`),
	})
	c, pe := code(t, err)
	require.Equal(t, pipeline.CodeAccessDenied, c)
	require.Equal(t, 1, pe.Details()["failedIndex"])
	require.Equal(t, 1, events(t, app))
	require.Equal(t, 1, accounts())

	// The user may change other fields; an admin may change the tier.
	require.Equal(t, float64(2), write(t, app, alice, "account.update", fmt.Sprintf(`{"id":%q,"version":1,"changes":{"name":"renamed"}}`, id))["version"])
	up := write(t, app, rdAdmin, "account.update", fmt.Sprintf(`{"id":%q,"version":2,"changes":{"tier":"gold"}}`, id))
	require.Equal(t, "gold", up["tier"])
	gold := write(t, app, rdAdmin, "account.create", `{"name":"vip","tier":"gold"}`)
	require.Equal(t, "gold", gold["tier"])
	require.Equal(t, 4, events(t, app))
}

// ------------------------------------------------------- 7. task.stats

func TestReadTaskStats(t *testing.T) {
	t.Parallel()
	app := newTasks(t)
	var ids []string
	for i := range 3 {
		ids = append(ids, write(t, app, alice, "task.create", fmt.Sprintf(`{"title":"s%d"}`, i))["id"].(string))
	}
	out, err := app.Executor.Command(ctx, alice, req("task.complete", fmt.Sprintf(`{"id":%q,"version":1}`, ids[1])))
	require.NoError(t, err)
	res := row(t, out)
	require.Equal(t, ids[1], res["id"])
	require.Equal(t, float64(3), res["version"], "task.completed and task.updated")
	d := rdDetail(t, app, alice, "task", fmt.Sprintf(`{"id":%q}`, ids[1]))
	require.Equal(t, true, d["done"])
	require.Equal(t, float64(3), d["version"])

	// Expected counts per month, from the events' own timestamps.
	want := func() []any {
		rows, err := app.Pool.Query(ctx, `
SELECT to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM') AS month,
	count(*) FILTER (WHERE type = 'task.created'), count(*) FILTER (WHERE type = 'task.completed')
FROM kumiko_events WHERE tenant_id = $1 GROUP BY 1 ORDER BY 1 DESC`, tenantA)
		require.NoError(t, err)
		defer rows.Close()
		out := []any{}
		for rows.Next() {
			var m string
			var created, completed int64
			require.NoError(t, rows.Scan(&m, &created, &completed))
			out = append(out, map[string]any{"month": m, "created": float64(created), "completed": float64(completed)})
		}
		require.NoError(t, rows.Err())
		return out
	}
	got := query(t, app, alice, "task.stats", `{}`)
	require.Equal(t, want(), got)
	month := rdEventTime(t, app, ids[1], 3).UTC().Format("2006-01")
	if rdEventTime(t, app, ids[0], 1).UTC().Format("2006-01") == month {
		// The usual case: everything happened this month.
		require.Equal(t, []any{map[string]any{"month": month, "created": float64(3), "completed": float64(1)}}, got)
	}

	// Refused completions count nothing.
	_, err = app.Executor.Command(ctx, alice, req("task.complete", fmt.Sprintf(`{"id":%q,"version":3}`, ids[1])))
	c, pe := code(t, err)
	require.Equal(t, pipeline.CodeUnprocessable, c)
	require.Equal(t, "already_done", pe.Reason())
	_, err = app.Executor.Command(ctx, alice, req("task.complete", fmt.Sprintf(`{"id":%q,"version":2}`, ids[0])))
	c, _ = code(t, err)
	require.Equal(t, pipeline.CodeVersionConflict, c)
	require.Equal(t, got, query(t, app, alice, "task.stats", `{}`))

	// task.stats is a query: it is not reachable as a command, nor the
	// reverse.
	_, err = app.Executor.Command(ctx, alice, req("task.stats", `{}`))
	c, _ = code(t, err)
	require.Equal(t, pipeline.CodeNotFound, c)
	_, err = app.Executor.Query(ctx, alice, req("task.complete", fmt.Sprintf(`{"id":%q,"version":1}`, ids[2])))
	c, _ = code(t, err)
	require.Equal(t, pipeline.CodeNotFound, c)
}

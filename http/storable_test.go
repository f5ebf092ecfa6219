package http_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Values the database cannot store answer 400 naming the field, before any
// SQL runs: times outside years 1–9999 (after normalising to UTC), versions
// past the integer column, NUL inside cursor values, and more sort keys
// than the limit.
func TestUnstorableValuesAre400(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	alice := token(t, "alice", tenantA, "User")
	id := e.create(alice, "mine")["id"].(string)
	before := e.events()
	cursor := func(order string, values ...any) string {
		raw, err := json.Marshal(map[string]any{"o": order, "v": values})
		require.NoError(t, err)
		return base64.RawURLEncoding.EncodeToString(raw)
	}
	list := func(payload string) string { return `{"type":"task.list","payload":` + payload + `}` }
	sorts := func(n int, field string) string {
		return `[` + strings.TrimSuffix(strings.Repeat(`{"field":"`+field+`"},`, n), ",") + `]`
	}
	many := make([]any, 301)
	for i := range many {
		many[i] = "x"
	}
	many[300] = id

	for _, c := range []struct {
		name, path, body string
		field, code      string // the first field problem; "" = none expected
		reason           string
	}{
		{"year 0", "/api/write", `{"type":"task.create","payload":{"title":"x","dueAt":"0000-01-01T00:00:00Z"}}`, "dueAt", "range", ""},
		{"year 0 after the offset", "/api/write", `{"type":"task.create","payload":{"title":"x","dueAt":"0001-01-01T00:00:00+01:00"}}`, "dueAt", "range", ""},
		{"year 10000 after the offset", "/api/write", `{"type":"task.create","payload":{"title":"x","dueAt":"9999-12-31T23:00:00-02:00"}}`, "dueAt", "range", ""},
		{"year 0 in an update", "/api/write", fmt.Sprintf(`{"type":"task.update","payload":{"id":%q,"version":1,"changes":{"dueAt":"0000-06-01T00:00:00Z"}}}`, id), "changes.dueAt", "range", ""},
		{"year 0 in a filter", "/api/query", list(`{"filter":{"dueAt":"0000-01-01T00:00:00Z"}}`), "filter.dueAt", "range", ""},
		{"year 0 as list asOf", "/api/query", list(`{"asOf":"0000-01-01T00:00:00Z"}`), "asOf", "range", ""},
		{"year 10000 as list asOf", "/api/query", list(`{"asOf":"9999-12-31T23:00:00-02:00"}`), "asOf", "range", ""},
		{"year 10000 as detail asOf", "/api/query", fmt.Sprintf(`{"type":"task.detail","payload":{"id":%q,"asOf":"9999-12-31T23:30:00-01:00"}}`, id), "asOf", "range", ""},
		{"a version past int32", "/api/write", fmt.Sprintf(`{"type":"task.update","payload":{"id":%q,"version":2147483648,"changes":{"done":true}}}`, id), "version", "max", ""},
		{"nine sort keys", "/api/query", list(`{"sort":` + sorts(9, "title") + `}`), "sort", "max", ""},
		{"a duplicated sort key", "/api/query", list(`{"sort":[{"field":"title"},{"field":"title","desc":true}]}`), "sort[1].field", "duplicate", ""},
		{"hundreds of sort keys and a cursor", "/api/query", list(`{"sort":` + sorts(300, "title") + `,"cursor":"` + cursor(strings.Repeat("title,", 300)+"id", many...) + `"}`), "sort", "max", ""},
		{"NUL in a text cursor value", "/api/query", list(`{"sort":[{"field":"title"}],"cursor":"` + cursor("title,id", "a\x00b", id) + `"}`), "", "", "invalid_cursor"},
		{"year 0 in a cursor", "/api/query", list(`{"sort":[{"field":"dueAt"}],"cursor":"` + cursor("dueAt,id", "0000-01-01T00:00:00Z", id) + `"}`), "", "", "invalid_cursor"},
		{"year 10000 in a cursor", "/api/query", list(`{"sort":[{"field":"dueAt"}],"cursor":"` + cursor("dueAt,id", "10000-01-01T00:00:00Z", id) + `"}`), "", "", "invalid_cursor"},
		{"a number in a uuid cursor value", "/api/query", list(`{"cursor":"` + cursor("createdAt,id", "2026-01-01T00:00:00Z", 7) + `"}`), "", "", "invalid_cursor"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := e.post(c.path, alice, c.body)
			p := requireProblem(t, r, http.StatusBadRequest, "validation_error", c.reason)
			if c.field == "" {
				return
			}
			fields, _ := p["fields"].([]any)
			require.NotEmpty(t, fields, r.String())
			first := fields[0].(map[string]any)
			require.Equal(t, c.field, first["path"], r.String())
			require.Equal(t, c.code, first["code"], r.String())
			require.NotEmpty(t, first["message"])
		})
	}
	require.Equal(t, before, e.events(), "nothing was written")
}

// Every value that can be stored gives a next cursor the server accepts: a
// list sorted by a timestamp at either end of the range pages through every
// row, in both directions, live and as of now.
func TestCursorsRoundTripAtTheBoundaries(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	alice := token(t, "alice", tenantA, "User")
	var ids []string
	for _, due := range []string{
		"0001-01-01T00:00:00Z", "0001-01-01T00:00:00.000001Z", "9999-12-31T23:59:59.999999Z",
		"9999-12-31T23:59:59.9999999Z", "9999-12-31T20:00:00+03:00", "2026-01-01T00:00:00Z", "",
		// Outside the range once in UTC: refused, never stored.
		"9999-12-31T23:00:00-02:00", "0001-01-01T00:30:00+01:00",
	} {
		payload := `{"title":"t"}`
		if due != "" {
			payload = fmt.Sprintf(`{"title":"t","dueAt":%q}`, due)
		}
		r := e.post("/api/write", alice, `{"type":"task.create","payload":`+payload+`}`)
		if r.status == http.StatusOK {
			ids = append(ids, r.data(t)["id"].(string))
		} else {
			requireProblem(t, r, http.StatusBadRequest, "validation_error", "")
		}
	}
	require.Len(t, ids, 7)
	slices.Sort(ids)
	for _, extra := range []string{``, `,"asOf":"9999-12-31T23:59:59Z"`} {
		for _, sort := range []string{`[{"field":"dueAt"}]`, `[{"field":"dueAt","desc":true}]`, `[{"field":"dueAt","desc":true},{"field":"createdAt"}]`} {
			var seen []string
			cursor := ""
			for page := 0; ; page++ {
				require.Less(t, page, 20, "paging ends")
				r := e.post("/api/query", alice, fmt.Sprintf(`{"type":"task.list","payload":{"limit":1,"sort":%s,"cursor":%q%s}}`, sort, cursor, extra))
				require.Equal(t, http.StatusOK, r.status, "%s %s page %d: %s", sort, extra, page, r)
				var res struct {
					Data struct {
						Rows       []map[string]any `json:"rows"`
						NextCursor string           `json:"nextCursor"`
					} `json:"data"`
				}
				require.NoError(t, json.Unmarshal(r.body, &res))
				for _, row := range res.Data.Rows {
					seen = append(seen, row["id"].(string))
				}
				if cursor = res.Data.NextCursor; cursor == "" {
					break
				}
			}
			slices.Sort(seen)
			require.Equal(t, ids, seen, "%s %s", sort, extra)
		}
	}
}

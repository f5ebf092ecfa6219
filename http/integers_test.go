package http_test

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/feature"
)

// Integers at the edges of what the database stores answer 400 naming the
// field, before any SQL: a stream version whose next version (+1) or
// previous one (-1) would overflow the integer version column, on an
// existing stream and an unknown one, alone and in a batch; a list limit
// past any integer type; an integer command field past its Go type.
func TestIntegerEdgesAre400(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	alice := token(t, "alice", tenantA, "User")
	id := e.create(alice, "mine")["id"].(string)
	unknown := "0190a000-0000-7000-8000-0000000000ff"
	before := e.events()
	write := func(typ, payload string) string { return fmt.Sprintf(`{"type":%q,"payload":%s}`, typ, payload) }
	batch := func(envelopes ...string) string {
		out := `{"commands":[`
		for i, en := range envelopes {
			if i > 0 {
				out += ","
			}
			out += en
		}
		return out + `]}`
	}
	update := func(id, version string) string {
		return write("task.update", fmt.Sprintf(`{"id":%q,"version":%s,"changes":{"done":true}}`, id, version))
	}
	for _, c := range []struct {
		name, path, body string
		field, code      string
		failedIndex      int // in a batch: the element the field belongs to
	}{
		{"update at the largest int4", "/api/write", update(id, "2147483647"), "version", "max", 0},
		{"update of an unknown id at the largest int4", "/api/write", update(unknown, "2147483647"), "version", "max", 0},
		{"update at 2^53", "/api/write", update(id, "9007199254740992"), "version", "max", 0},
		{"update at 2^63", "/api/write", update(id, "9223372036854775808"), "version", "max", 0},
		{"update at -2^63", "/api/write", update(id, "-9223372036854775808"), "version", "min", 0},
		{"update at 1e400", "/api/write", update(id, "1e400"), "version", "type", 0},
		{"update at 1.0", "/api/write", update(id, "1.0"), "version", "type", 0},
		{"update at -0", "/api/write", update(id, "-0"), "version", "min", 0},
		{"delete at the largest int4", "/api/write", write("task.delete", fmt.Sprintf(`{"id":%q,"version":2147483647}`, id)), "version", "max", 0},
		{"restore at the largest int4", "/api/write", write("task.restore", fmt.Sprintf(`{"id":%q,"version":2147483647}`, id)), "version", "max", 0},
		{"update in a batch at the largest int4", "/api/batch", batch(write("task.create", `{"title":"x"}`), update(id, "2147483647")), "version", "max", 1},
		{"update of an unknown id in a batch", "/api/batch", batch(update(unknown, "2147483647")), "version", "max", 0},
		{"list limit at 2^63", "/api/query", write("task.list", `{"limit":9223372036854775808}`), "limit", "max", 0},
		{"list limit at -2^31", "/api/query", write("task.list", `{"limit":-2147483648}`), "limit", "min", 0},
		{"command version past int64", "/api/command", write("task.complete", fmt.Sprintf(`{"id":%q,"version":9223372036854775808}`, id)), "version", "type", 0},
		{"command version at 1e400", "/api/command", write("task.complete", fmt.Sprintf(`{"id":%q,"version":1e400}`, id)), "version", "type", 0},
		{"command version at 1.0", "/api/command", write("task.complete", fmt.Sprintf(`{"id":%q,"version":1.0}`, id)), "version", "type", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := e.post(c.path, alice, c.body)
			p := requireFieldProblem(t, r, c.field, c.code)
			if c.path == "/api/batch" {
				require.Equal(t, map[string]any{"failedIndex": float64(c.failedIndex)}, p["details"], r.String())
			}
		})
	}
	require.Equal(t, before, e.events(), "nothing was written")

	// The largest version accepted still reaches the store, which answers
	// with a conflict or a missing row, never an overflow.
	r := e.post("/api/write", alice, update(id, "2147483646"))
	requireProblem(t, r, http.StatusConflict, "version_conflict", "")
	r = e.post("/api/write", alice, update(unknown, "2147483646"))
	require.Equal(t, http.StatusNotFound, r.status, r.String())
}

// gauges has a number field, stored in a numeric column.
var gauges = feature.Define("gauges", func(r *feature.Registrar) {
	r.Entity("gauge", feature.Fields{"reading": feature.Number().Sortable()})
	r.Crud("gauge", feature.Access{Write: feature.AnyUser(), Read: feature.AnyUser()})
})

// A number field takes any finite JSON number, however large, small or
// signed, and stores it as sent; a number past float64 is a 400.
func TestNumberFieldEdges(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, 8, []*feature.Feature{gauges})
	alice := token(t, "alice", tenantA, "User")
	for _, n := range []string{"-0", "1.0", "2147483648", "-2147483649", "9007199254740993", "9223372036854775808",
		"-9223372036854775809", "1e308", "-1.7976931348623157e308", "5e-324", "1e-400"} {
		t.Run(n, func(t *testing.T) {
			r := e.post("/api/write", alice, `{"type":"gauge.create","payload":{"reading":`+n+`}}`)
			require.Equal(t, http.StatusOK, r.status, r.String())
			id := r.data(t)["id"].(string)
			want, err := strconv.ParseFloat(n, 64)
			require.NoError(t, err)
			require.InDelta(t, want, r.data(t)["reading"], 0, r.String())
			r = e.post("/api/query", alice, `{"type":"gauge.list","payload":{"filter":{"reading":`+n+`},"sort":[{"field":"reading"}]}}`)
			require.Equal(t, http.StatusOK, r.status, r.String())
			require.Contains(t, r.String(), id)
		})
	}
	for _, n := range []string{"1e400", "-1e400", "1" + strings.Repeat("0", 400)} {
		r := e.post("/api/write", alice, `{"type":"gauge.create","payload":{"reading":`+n+`}}`)
		requireFieldProblem(t, r, "reading", "type")
	}
}

// requireFieldProblem asserts a 400 validation_error whose first field
// problem is at path with code; it returns the problem.
func requireFieldProblem(t *testing.T, r reply, path, code string) map[string]any {
	t.Helper()
	p := requireProblem(t, r, http.StatusBadRequest, "validation_error", "")
	fields, _ := p["fields"].([]any)
	require.NotEmpty(t, fields, r.String())
	first := fields[0].(map[string]any)
	require.Equal(t, path, first["path"], r.String())
	require.Equal(t, code, first["code"], r.String())
	require.NotEmpty(t, first["message"])
	return p
}

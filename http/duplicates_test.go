package http_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/feature"
)

// docs has a JSON field, so a payload can nest objects and arrays at will.
var docs = feature.Define("docs", func(r *feature.Registrar) {
	r.Entity("doc", feature.Fields{"body": feature.JSON()})
	r.Crud("doc", feature.Access{Write: feature.AnyUser(), Read: feature.AnyUser()})
})

// A request body holding an object key twice, at any depth, is refused
// before anything runs: 400 validation_error with the JSON path of the
// second occurrence. A proxy reading the first key and the server the last
// must never see two different requests.
func TestDuplicateKeysAre400(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, 8, []*feature.Feature{docs})
	alice := token(t, "alice", tenantA, "User")
	id := e.create(alice, "mine")["id"].(string)
	before := e.events()
	many := make([]string, 40)
	for i := range many {
		many[i] = fmt.Sprintf(`"k%d":%d`, i, i)
	}
	wide := `{` + strings.Join(many, ",") + `,"k17":0}`
	for _, c := range []struct {
		name, path, body, field string
	}{
		{"the handler type of a write", "/api/write", `{"type":"task.list","type":"task.create","payload":{"title":"x"}}`, "type"},
		{"the payload of a write", "/api/write", `{"type":"task.create","payload":{"title":"x"},"payload":{"title":"y"}}`, "payload"},
		{"a field of a create", "/api/write", `{"type":"task.create","payload":{"title":"x","done":true,"title":"y"}}`, "payload.title"},
		{"a field of an update", "/api/write", fmt.Sprintf(`{"type":"task.update","payload":{"id":%q,"version":1,"changes":{"title":"a","title":"b"}}}`, id), "payload.changes.title"},
		{"the version of an update", "/api/write", fmt.Sprintf(`{"type":"task.update","payload":{"id":%q,"version":1,"changes":{"done":true},"version":9}}`, id), "payload.version"},
		{"the same key escaped", "/api/write", `{"type":"task.create","payload":{"title":"x","\u0074itle":"y"}}`, "payload.title"},
		{"two keys that decode alike", "/api/write", `{"type":"doc.create","payload":{"body":{"\ud800":1,"\udbff":2}}}`, `payload.body["` + "\ufffd" + `"]`},
		{"deep in an array", "/api/write", `{"type":"doc.create","payload":{"body":[[{"a":1}],[{"a":1},{"b":{"c":1,"c":2}}]]}}`, "payload.body[1][1].b.c"},
		{"a key that is no identifier", "/api/write", `{"type":"doc.create","payload":{"body":{"a b":1,"a b":2}}}`, `payload.body["a b"]`},
		{"the last of many keys", "/api/write", `{"type":"doc.create","payload":{"body":` + wide + `}}`, "payload.body.k17"},
		{"a command's type in a batch", "/api/batch", `{"commands":[{"type":"task.create","payload":{"title":"x"}},{"type":"task.list","payload":{},"type":"task.create"}]}`, "commands[1].type"},
		{"a payload field in a batch", "/api/batch", `{"commands":[{"type":"task.create","payload":{"title":"x","title":"y"}}]}`, "commands[0].payload.title"},
		{"the commands of a batch", "/api/batch", `{"commands":[],"commands":[{"type":"task.create","payload":{"title":"x"}}]}`, "commands"},
		{"a filter of a query", "/api/query", `{"type":"task.list","payload":{"filter":{"done":true,"done":false}}}`, "payload.filter.done"},
		{"a sort key of a query", "/api/query", `{"type":"task.list","payload":{"sort":[{"field":"title","field":"dueAt"}]}}`, "payload.sort[0].field"},
		{"an input field of a command", "/api/command", fmt.Sprintf(`{"type":"task.complete","payload":{"id":%q,"version":1,"id":"0190a000-0000-7000-8000-0000000000ff"}}`, id), "payload.id"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := e.post(c.path, alice, c.body)
			p := requireFieldProblem(t, r, c.field, "duplicate_key")
			require.Equal(t, "duplicate_key", p["reason"], r.String())
			require.Len(t, p["fields"], 1, r.String())
			// A keyed write is refused alike, and nothing is recorded.
			if c.path != "/api/query" {
				r = e.post(c.path, alice, c.body, "Idempotency-Key", "dup-"+c.name)
				requireFieldProblem(t, r, c.field, "duplicate_key")
			}
		})
	}
	require.Equal(t, before, e.events(), "nothing was written")

	// The same key in sibling objects and at other depths is no duplicate.
	r := e.post("/api/write", alice, `{"type":"doc.create","payload":{"body":{"a":{"a":[{"a":1},{"a":2}]},"b":[{"a":{"a":3}}],"c":{"a":1}}}}`)
	require.Equal(t, http.StatusOK, r.status, r.String())
	r = e.post("/api/batch", alice, `{"commands":[{"type":"task.create","payload":{"title":"a"}},{"type":"task.create","payload":{"title":"b"}}]}`)
	require.Equal(t, http.StatusOK, r.status, r.String())
	require.Equal(t, before+3, e.events())
}

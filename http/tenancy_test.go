package http_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// Tenant B can neither read, list, update, delete, complete nor inspect
// tenant A's task, and every refusal looks exactly like the answer for an id
// that does not exist.
func TestTenantIsolation(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	alice := token(t, "alice", tenantA, "User")
	bob := token(t, "bob", tenantB, "User")
	adminB := token(t, "bea", tenantB, "Admin")
	id := e.create(alice, "secret plans")["id"].(string)
	e.create(bob, "bob's own")
	missing := uuid.NewString()

	// Read and list.
	for _, target := range []string{id, missing} {
		r := e.post("/api/query", bob, fmt.Sprintf(`{"type":"task.detail","payload":{"id":%q}}`, target))
		require.Equal(t, 200, r.status, r.String())
		require.JSONEq(t, `{"data":null}`, string(r.body))
	}
	list := e.post("/api/query", bob, `{"type":"task.list","payload":{}}`)
	require.Equal(t, 200, list.status)
	rows := list.obj(t)["data"].(map[string]any)["rows"].([]any)
	require.Len(t, rows, 1)
	require.Equal(t, "bob's own", rows[0].(map[string]any)["title"])
	require.NotContains(t, string(list.body), id)

	// Writes and inspect: the same problem as for a missing id.
	same := func(a, b reply) {
		t.Helper()
		pa, pb := a.obj(t), b.obj(t)
		for _, k := range []string{"requestId", "detail"} {
			delete(pa, k)
			delete(pb, k)
		}
		require.Equal(t, pb, pa)
		require.Equal(t, b.status, a.status)
	}
	for _, c := range []struct{ path, body string }{
		{"/api/write", `{"type":"task.update","payload":{"id":%q,"version":1,"changes":{"title":"mine now"}}}`},
		{"/api/write", `{"type":"task.delete","payload":{"id":%q}}`},
		{"/api/write", `{"type":"task.restore","payload":{"id":%q}}`},
		{"/api/command", `{"type":"task.complete","payload":{"id":%q,"version":1}}`},
	} {
		foreign := e.post(c.path, bob, fmt.Sprintf(c.body, id))
		requireProblem(t, foreign, 404, "not_found", "aggregate_not_found")
		same(foreign, e.post(c.path, bob, fmt.Sprintf(c.body, missing)))
	}
	foreign := e.do(request{method: http.MethodGet, path: "/api/inspect/task/" + id, token: adminB})
	requireProblem(t, foreign, 404, "not_found", "aggregate_not_found")
	same(foreign, e.do(request{method: http.MethodGet, path: "/api/inspect/task/" + missing, token: adminB}))

	// Tenant A's task is untouched.
	detail := e.post("/api/query", alice, fmt.Sprintf(`{"type":"task.detail","payload":{"id":%q}}`, id)).data(t)
	require.Equal(t, "secret plans", detail["title"])
	require.Equal(t, float64(1), detail["version"])
	require.Equal(t, false, detail["done"])
	require.Equal(t, 2, e.events())
}

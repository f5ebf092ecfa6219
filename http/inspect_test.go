package http_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// An admin sees every event of a stream of their tenant: upcast and as
// stored, with metadata, also after the stream was archived.
func TestInspect(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	alice := token(t, "alice", tenantA, "User")
	admin := token(t, "ada", tenantA, "Admin")
	created := e.post("/api/write", alice, `{"type":"task.create","payload":{"title":"Old"}}`, "X-Correlation-ID", "corr-inspect")
	require.Equal(t, 200, created.status)
	id := created.data(t)["id"].(string)
	// An event written by an old release: task.completed version 1.
	e.app.Exec(t, `INSERT INTO kumiko_events (aggregate_id, aggregate_type, tenant_id, version, type, event_version, payload)
		VALUES ($1, 'task', $2, 2, 'task.completed', 1, '{"by":"u-0"}')`, id, tenantA)

	r := e.do(get("/api/inspect/task/"+id, admin))
	require.Equal(t, 200, r.status, r.String())
	require.Equal(t, "application/json", r.header.Get("Content-Type"))
	tl := r.data(t)
	require.Equal(t, id, tl["aggregateId"])
	require.Equal(t, "task", tl["aggregateType"])
	require.Equal(t, float64(2), tl["version"])
	require.Equal(t, false, tl["archived"])
	evs := tl["events"].([]any)
	require.Len(t, evs, 2)

	first := evs[0].(map[string]any)
	require.Equal(t, "task.created", first["type"])
	require.Equal(t, float64(1), first["version"])
	require.Equal(t, first["payload"], first["rawPayload"])
	require.Equal(t, first["eventVersion"], first["storedEventVersion"])
	meta := first["metadata"].(map[string]any)
	require.Equal(t, created.header.Get("X-Request-ID"), meta["requestId"])
	require.Equal(t, "corr-inspect", meta["correlationId"])
	require.Equal(t, "alice", meta["userId"])
	at, err := time.Parse(time.RFC3339Nano, first["createdAt"].(string))
	require.NoError(t, err)
	require.WithinDuration(t, time.Now(), at, time.Minute)

	old := evs[1].(map[string]any)
	require.Equal(t, "task.completed", old["type"])
	require.Equal(t, float64(3), old["eventVersion"], "upcast to the current version")
	require.Equal(t, map[string]any{"completedBy": "u-0", "note": ""}, old["payload"])
	require.Equal(t, float64(1), old["storedEventVersion"])
	require.Equal(t, map[string]any{"by": "u-0"}, old["rawPayload"], "as stored")

	// Archived streams read as empty everywhere else, but not here.
	require.NoError(t, e.app.Store.Archive(context.Background(), tenantA, uuid.MustParse(id), "ada", "test"))
	r = e.do(get("/api/inspect/task/"+id, admin))
	require.Equal(t, 200, r.status, r.String())
	require.Equal(t, true, r.data(t)["archived"])
	require.Len(t, r.data(t)["events"], 2)

	// Another aggregate type, a missing id, no admin role, no token.
	requireProblem(t, e.do(get("/api/inspect/member/"+id, admin)), 404, "not_found", "aggregate_not_found")
	requireProblem(t, e.do(get("/api/inspect/task/"+uuid.NewString(), admin)), 404, "not_found", "aggregate_not_found")
	requireProblem(t, e.do(get("/api/inspect/task/"+id, alice)), 403, "access_denied", "")
	requireProblem(t, e.do(get("/api/inspect/task/"+id, "")), 401, "unauthenticated", "")
	requireProblem(t, e.do(request{method: http.MethodPost, path: "/api/inspect/task/" + id, token: admin}), 405, "method_not_allowed", "")
}

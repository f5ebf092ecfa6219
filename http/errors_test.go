package http_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"

	khttp "github.com/kumiko-go/kumiko/http"
	"github.com/kumiko-go/kumiko/pipeline"
)

// Every row of the error table (docs/http.md), each produced by a real request.
// rate_limited (429) has no producer yet — no rate limiter — so only its
// mapping is tested (TestStatusOfEveryCode).
func TestErrorTable(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	alice := token(t, "alice", tenantA, "User")
	task := e.create(alice, "first")
	id := task["id"].(string)

	t.Run("validation_error", func(t *testing.T) {
		requireProblem(t, e.post("/api/write", alice, `{"type":"task.create",`), 400, "validation_error", "invalid_json")
		p := requireProblem(t, e.post("/api/write", alice, `{"type":"task.create","payload":{"title":42}}`), 400, "validation_error", "")
		require.Equal(t, []any{map[string]any{"path": "title", "code": "type", "message": p["fields"].([]any)[0].(map[string]any)["message"]}}, p["fields"])
		requireProblem(t, e.post("/api/write", alice, deep(25)), 400, "validation_error", "too_deep")
	})
	t.Run("unauthenticated", func(t *testing.T) {
		r := e.post("/api/write", "", `{"type":"task.create","payload":{"title":"anon"}}`)
		requireProblem(t, r, 401, "unauthenticated", "")
		require.Contains(t, r.header.Get("WWW-Authenticate"), "Bearer")
		forged, err := khttp.IssueToken([]byte(strings.Repeat("x", 32)), "alice", tenantA.String(), []string{"Admin"}, 1e9)
		require.NoError(t, err)
		r = e.post("/api/query", forged, `{"type":"task.list"}`)
		requireProblem(t, r, 401, "unauthenticated", "invalid_token")
		require.Contains(t, r.header.Get("WWW-Authenticate"), `error="invalid_token"`)
	})
	t.Run("access_denied", func(t *testing.T) {
		viewer := token(t, "vera", tenantA, "Viewer")
		requireProblem(t, e.post("/api/write", viewer, `{"type":"task.create","payload":{"title":"v"}}`), 403, "access_denied", "")
	})
	t.Run("not_found", func(t *testing.T) {
		requireProblem(t, e.post("/api/write", alice, `{"type":"task.nuke","payload":{}}`), 404, "not_found", "handler_not_found")
		requireProblem(t, e.post("/api/write", alice, fmt.Sprintf(`{"type":"task.delete","payload":{"id":%q}}`, uuid.NewString())),
			404, "not_found", "aggregate_not_found")
		requireProblem(t, e.do(request{method: http.MethodGet, path: "/api/nowhere"}), 404, "not_found", "route_not_found")
	})
	t.Run("method_not_allowed", func(t *testing.T) {
		r := e.do(request{method: http.MethodGet, path: "/api/write"})
		requireProblem(t, r, 405, "method_not_allowed", "")
		require.Equal(t, "OPTIONS, POST", r.header.Get("Allow"))
	})
	t.Run("version_conflict", func(t *testing.T) {
		p := requireProblem(t, e.post("/api/write", alice, fmt.Sprintf(`{"type":"task.update","payload":{"id":%q,"version":5,"changes":{"done":true}}}`, id)),
			409, "version_conflict", "event_version_conflict")
		require.Equal(t, map[string]any{"expectedVersion": float64(5), "currentVersion": float64(1)}, p["details"])

		// In a batch the problem names the failing command, and nothing
		// of the batch is kept.
		before := e.events()
		batch := fmt.Sprintf(`{"commands":[{"type":"task.create","payload":{"title":"kept?"}},`+
			`{"type":"task.update","payload":{"id":%q,"version":5,"changes":{"done":true}}}]}`, id)
		p = requireProblem(t, e.post("/api/batch", alice, batch), 409, "version_conflict", "")
		require.Equal(t, float64(1), p["details"].(map[string]any)["failedIndex"])
		require.Equal(t, before, e.events())
		p = requireProblem(t, e.post("/api/batch", alice, `{"commands":[{"type":"task.create","payload":{"title":"x"}},{"type":"task.create","payload":{"title":false}}]}`),
			400, "validation_error", "")
		require.Equal(t, float64(1), p["details"].(map[string]any)["failedIndex"])
		require.Equal(t, "title", p["fields"].([]any)[0].(map[string]any)["path"])
	})
	t.Run("stream_archived", func(t *testing.T) {
		other := e.create(alice, "to archive")
		require.NoError(t, e.app.Store.Archive(context.Background(), tenantA, uuid.MustParse(other["id"].(string)), "alice", "test"))
		requireProblem(t, e.post("/api/write", alice, fmt.Sprintf(`{"type":"task.update","payload":{"id":%q,"version":1,"changes":{"done":true}}}`, other["id"])),
			409, "stream_archived", "")
	})
	t.Run("unique_violation", func(t *testing.T) {
		require.Equal(t, 200, e.post("/api/write", alice, `{"type":"member.create","payload":{"email":"a@example.com"}}`).status)
		requireProblem(t, e.post("/api/write", alice, `{"type":"member.create","payload":{"email":"a@example.com"}}`), 409, "unique_violation", "")
	})
	t.Run("unprocessable", func(t *testing.T) {
		done := e.create(alice, "to complete")
		cmd := fmt.Sprintf(`{"type":"task.complete","payload":{"id":%q,"version":1}}`, done["id"])
		r := e.post("/api/command", alice, cmd)
		require.Equal(t, 200, r.status, r.String())
		require.JSONEq(t, fmt.Sprintf(`{"data":{"id":%q,"version":3}}`, done["id"]), string(r.body))
		cmd = fmt.Sprintf(`{"type":"task.complete","payload":{"id":%q,"version":3}}`, done["id"])
		requireProblem(t, e.post("/api/command", alice, cmd), 422, "unprocessable", "already_done")
	})
	t.Run("payload_too_large", func(t *testing.T) {
		body := `{"type":"task.create","payload":{"title":"` + strings.Repeat("a", 2<<20) + `"}}`
		requireProblem(t, e.post("/api/write", alice, body), 413, "payload_too_large", "")
	})
	t.Run("idempotency_conflict", func(t *testing.T) {
		// request_in_progress, key_reused and already_applied, each from
		// real requests: see TestIdempotencyInProgress,
		// TestIdempotencyKeyReused and TestIdempotencyAlreadyApplied.
		body := `{"type":"task.create","payload":{"title":"keyed"}}`
		require.Equal(t, 200, e.post("/api/write", alice, body, "Idempotency-Key", "table-1").status)
		requireProblem(t, e.post("/api/write", alice, `{"type":"task.create","payload":{"title":"other"}}`, "Idempotency-Key", "table-1"),
			422, "idempotency_conflict", "key_reused")
	})
	t.Run("unavailable", func(t *testing.T) {
		down := newEnv(t)
		down.idem.down.Store(true)
		r := down.post("/api/write", alice, `{"type":"task.create","payload":{"title":"x"}}`, "Idempotency-Key", "k")
		requireProblem(t, r, 503, "unavailable", "idempotency_unavailable")
		require.Equal(t, "1", r.header.Get("Retry-After"))
	})
	t.Run("projection_rebuild_in_progress", func(t *testing.T) {
		// tasks_by_month created after its events, as when a projection
		// is added to an app with history: 503 until it is built.
		late := newEnv(t)
		late.create(alice, "before the table")
		late.app.Exec(t, "DROP TABLE tasks_by_month")
		require.NoError(t, late.app.Executor.EnsureSchema(context.Background()))
		stats := `{"type":"task.stats","payload":{}}`
		r := late.post("/api/query", alice, stats)
		requireProblem(t, r, 503, "projection_rebuild_in_progress", "")
		require.Equal(t, "1", r.header.Get("Retry-After"))
		_, err := late.app.Executor.RebuildProjection(context.Background(), "tasks_by_month", pipeline.RebuildOptions{})
		require.NoError(t, err)
		r = late.post("/api/query", alice, stats)
		require.Equal(t, 200, r.status, r.String())
		require.Len(t, r.obj(t)["data"], 1)
	})
	t.Run("internal_error", func(t *testing.T) {
		r := e.post("/api/command", alice, `{"type":"probe.fail","payload":{}}`)
		p := requireProblem(t, r, 500, "internal_error", "internal_error")
		require.Equal(t, "internal error", p["detail"])
		lines := e.logs.lines(map[string]any{"level": "ERROR", "requestId": r.header.Get("X-Request-ID")})
		require.Len(t, lines, 1, "a 5xx is logged once, with the request id")
		require.Contains(t, lines[0]["err"], "secret_users", "the cause is logged")
	})
}

// A panic in a handler answers internal_error and is logged with its stack.
func TestPanicIsRecovered(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.s.Echo().GET("/boom", func(echo.Context) error { panic("boom in secret_users") })
	r := e.do(request{method: http.MethodGet, path: "/boom"})
	requireProblem(t, r, 500, "internal_error", "internal_error")
	lines := e.logs.lines(map[string]any{"level": "ERROR", "requestId": r.header.Get("X-Request-ID")})
	require.Len(t, lines, 1)
	require.Contains(t, lines[0]["err"], "panic: boom in secret_users")
	require.Contains(t, lines[0]["err"], "goroutine", "the stack is logged")
	// The server keeps serving.
	require.Equal(t, 200, e.do(request{method: http.MethodGet, path: "/healthz"}).status)
}

// deep returns a create whose payload nests n levels.
func deep(n int) string {
	return `{"type":"task.create","payload":` + strings.Repeat(`{"a":`, n-1) + `{}` + strings.Repeat(`}`, n-1) + `}`
}

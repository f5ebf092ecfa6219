package http_test

import (
	"fmt"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/feature"
)

// ledger is a test feature whose commands answer a struct and nothing, each
// after a write.
var ledger = feature.Define("ledger", func(r *feature.Registrar) {
	r.Entity("entry", feature.Fields{"label": feature.Text().Required().MaxLen(100)})
	r.Crud("entry", feature.Access{Write: feature.Roles("User"), Read: feature.AnyUser()})
	feature.HandleCommand(r, "entry.relabel", feature.Roles("User"), func(ctx feature.CommandContext, in relabelEntry) (any, error) {
		agg, err := relabel(ctx, in)
		if err != nil {
			return nil, err
		}
		return relabeled{ID: in.ID, Version: agg.Version(), Label: in.Label}, nil
	})
	feature.HandleCommand(r, "entry.touch", feature.Roles("User"), func(ctx feature.CommandContext, in relabelEntry) (any, error) {
		_, err := relabel(ctx, in)
		return nil, err
	})
})

type relabelEntry struct {
	ID    uuid.UUID `json:"id" validate:"required"`
	Label string    `json:"label" validate:"required,max=100"`
}

type relabeled struct {
	ID      uuid.UUID `json:"id"`
	Version int       `json:"version"`
	Label   string    `json:"label"`
}

func relabel(ctx feature.CommandContext, in relabelEntry) (feature.Aggregate, error) {
	agg, err := ctx.FetchForWriting(in.ID, "entry", feature.AnyVersion)
	if err != nil {
		return nil, err
	}
	return agg, agg.Append("entry.updated", map[string]any{"label": in.Label})
}

// /api/command answers 200 {"data": the handler's result} — a map, a
// struct or nothing — and the command's effect is there for the very next
// read.
func TestCommandAnswersHandlerResult(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, 8, []*feature.Feature{ledger})
	alice := token(t, "alice", tenantA, "User")
	detail := func(typ, id string) map[string]any {
		t.Helper()
		r := e.post("/api/query", alice, fmt.Sprintf(`{"type":%q,"payload":{"id":%q}}`, typ, id))
		require.Equal(t, 200, r.status, r.String())
		return r.data(t)
	}

	task := e.create(alice, "to complete")["id"].(string)
	r := e.post("/api/command", alice, fmt.Sprintf(`{"type":"task.complete","payload":{"id":%q,"version":1}}`, task))
	require.Equal(t, 200, r.status, r.String())
	require.Equal(t, "application/json", r.header.Get("Content-Type"))
	require.JSONEq(t, fmt.Sprintf(`{"data":{"id":%q,"version":3}}`, task), string(r.body))
	got := detail("task.detail", task)
	require.Equal(t, true, got["done"])
	require.Equal(t, float64(3), got["version"])

	w := e.post("/api/write", alice, `{"type":"entry.create","payload":{"label":"old"}}`)
	require.Equal(t, 200, w.status, w.String())
	entry := w.data(t)["id"].(string)
	r = e.post("/api/command", alice, fmt.Sprintf(`{"type":"entry.relabel","payload":{"id":%q,"label":"new"}}`, entry))
	require.Equal(t, 200, r.status, r.String())
	require.JSONEq(t, fmt.Sprintf(`{"data":{"id":%q,"version":2,"label":"new"}}`, entry), string(r.body))
	require.Equal(t, "new", detail("entry.detail", entry)["label"])

	r = e.post("/api/command", alice, fmt.Sprintf(`{"type":"entry.touch","payload":{"id":%q,"label":"newer"}}`, entry))
	require.Equal(t, 200, r.status, r.String())
	require.JSONEq(t, `{"data":null}`, string(r.body))
	got = detail("entry.detail", entry)
	require.Equal(t, "newer", got["label"])
	require.Equal(t, float64(3), got["version"])
}

// Delete and restore over HTTP: a stale version is a 409 with the versions
// and writes nothing; the right version or none goes through; every answer
// carries the version after the write.
func TestDeleteRestoreVersionOverHTTP(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	alice := token(t, "alice", tenantA, "User")
	id := e.create(alice, "versioned")["id"].(string)
	write := func(typ, payload string) reply {
		t.Helper()
		return e.post("/api/write", alice, fmt.Sprintf(`{"type":%q,"payload":%s}`, typ, payload))
	}
	require.Equal(t, 200, write("task.update", fmt.Sprintf(`{"id":%q,"version":1,"changes":{"done":true}}`, id)).status)

	before := e.events()
	p := requireProblem(t, write("task.delete", fmt.Sprintf(`{"id":%q,"version":1}`, id)), 409, "version_conflict", "event_version_conflict")
	require.Equal(t, map[string]any{"expectedVersion": float64(1), "currentVersion": float64(2)}, p["details"])
	require.Equal(t, before, e.events())
	r := write("task.delete", fmt.Sprintf(`{"id":%q,"version":2}`, id))
	require.Equal(t, 200, r.status, r.String())
	require.Equal(t, float64(3), r.data(t)["version"])

	p = requireProblem(t, write("task.restore", fmt.Sprintf(`{"id":%q,"version":2}`, id)), 409, "version_conflict", "event_version_conflict")
	require.Equal(t, map[string]any{"expectedVersion": float64(2), "currentVersion": float64(3)}, p["details"])
	r = write("task.restore", fmt.Sprintf(`{"id":%q,"version":3}`, id))
	require.Equal(t, 200, r.status, r.String())
	require.Equal(t, float64(4), r.data(t)["version"])
	r = write("task.delete", fmt.Sprintf(`{"id":%q}`, id))
	require.Equal(t, 200, r.status, r.String())
	require.Equal(t, float64(5), r.data(t)["version"])

	p = requireProblem(t, write("task.restore", fmt.Sprintf(`{"id":%q,"version":4294967296}`, id)), 400, "validation_error", "")
	require.Equal(t, "version", p["fields"].([]any)[0].(map[string]any)["path"])

	// A hard delete answers the id and the delete event's version.
	m := write("member.create", `{"email":"gone@example.com"}`)
	require.Equal(t, 200, m.status, m.String())
	member := m.data(t)["id"].(string)
	r = write("member.delete", fmt.Sprintf(`{"id":%q,"version":1}`, member))
	require.Equal(t, 200, r.status, r.String())
	require.JSONEq(t, fmt.Sprintf(`{"data":{"id":%q,"version":2}}`, member), string(r.body))
}

// A batch that fails with an internal error still names the failing
// command, and shows nothing else of the failure.
func TestBatchInternalErrorNamesFailedIndex(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	alice := token(t, "alice", tenantA, "User")
	before := e.events()
	r := e.post("/api/batch", alice, `{"commands":[{"type":"task.create","payload":{"title":"rolled back"}},{"type":"probe.fail","payload":{}}]}`)
	p := requireProblem(t, r, 500, "internal_error", "internal_error")
	require.Equal(t, "internal error", p["detail"])
	require.Equal(t, map[string]any{"failedIndex": float64(1)}, p["details"])
	require.Equal(t, before, e.events(), "nothing of the batch is kept")
	lines := e.logs.lines(map[string]any{"level": "ERROR", "requestId": r.header.Get("X-Request-ID")})
	require.Len(t, lines, 1)
	require.Contains(t, lines[0]["err"], "secret_users", "the cause is logged")

	// Outside a batch a 500 has no details at all.
	p = requireProblem(t, e.post("/api/command", alice, `{"type":"probe.fail","payload":{}}`), 500, "internal_error", "internal_error")
	require.NotContains(t, p, "details")
}

package http_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/pipeline"
)

// An operator sees each projection's status, cursor, head and lag,
// including a rebuild's outcome; others, a tenant's admin included, are
// refused.
func TestProjections(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	alice := token(t, "alice", tenantA, "User")
	admin := token(t, "ada", tenantA, "Admin")
	operator := token(t, "olga", tenantA, "Operator")
	e.create(alice, "one")
	e.create(alice, "two")
	_, err := e.app.Executor.RebuildProjection(context.Background(), "tasks_by_month", pipeline.RebuildOptions{})
	require.NoError(t, err)

	r := e.do(get("/api/projections", operator))
	require.Equal(t, http.StatusOK, r.status, r.String())
	var body struct {
		Data []map[string]any `json:"data"`
	}
	require.NoError(t, json.Unmarshal(r.body, &body))
	var found map[string]any
	for _, p := range body.Data {
		if p["name"] == "tasks_by_month" {
			found = p
		}
	}
	require.NotNil(t, found, r.String())
	require.Equal(t, "ready", found["status"])
	require.Equal(t, "inline", found["kind"])
	require.Equal(t, float64(0), found["lag"])
	require.NotNil(t, found["lastRebuildAt"])

	require.Equal(t, http.StatusForbidden, e.do(get("/api/projections", alice)).status)
	require.Equal(t, http.StatusForbidden, e.do(get("/api/projections", admin)).status)
	require.Equal(t, http.StatusUnauthorized, e.do(get("/api/projections", "")).status)
}

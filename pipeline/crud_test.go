package pipeline_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/kumikotest"
)

func TestCrudLifecycle(t *testing.T) {
	t.Parallel()
	app := newTasks(t)

	created := write(t, app, alice, "task.create", `{"title":"Write docs","dueAt":"2026-12-01T10:00:00Z"}`)
	id := created["id"].(string)
	require.Equal(t, float64(1), created["version"])
	require.Equal(t, "Write docs", created["title"])
	require.Equal(t, false, created["done"], "defaults applied")
	require.Equal(t, "normal", created["priority"])
	require.Equal(t, "2026-12-01T10:00:00Z", created["dueAt"])
	require.Nil(t, created["deletedAt"])

	updated := write(t, app, alice, "task.update", fmt.Sprintf(`{"id":%q,"version":1,"changes":{"title":"Write more docs","priority":"high"}}`, id))
	require.Equal(t, float64(2), updated["version"])
	require.Equal(t, "Write more docs", updated["title"])
	require.Equal(t, "high", updated["priority"])
	require.Equal(t, "2026-12-01T10:00:00Z", updated["dueAt"], "unchanged fields stay")

	detail := query(t, app, alice, "task.detail", fmt.Sprintf(`{"id":%q}`, id))
	require.Equal(t, updated, detail)

	deleted := write(t, app, alice, "task.delete", fmt.Sprintf(`{"id":%q}`, id))
	require.Equal(t, float64(3), deleted["version"])
	require.NotNil(t, deleted["deletedAt"])
	require.Nil(t, query(t, app, alice, "task.detail", fmt.Sprintf(`{"id":%q}`, id)), "a deleted task reads as null")

	_, err := app.Dispatcher.Write(ctx, alice, req("task.delete", fmt.Sprintf(`{"id":%q}`, id)))
	c, _ := code(t, err)
	require.Equal(t, "not_found", c, "deleting twice")

	restored := write(t, app, alice, "task.restore", fmt.Sprintf(`{"id":%q}`, id))
	require.Equal(t, float64(4), restored["version"])
	require.Nil(t, restored["deletedAt"])

	require.Equal(t, 4, app.Count(t, "SELECT count(*) FROM kumiko_events WHERE aggregate_id = $1", id))
	var types []string
	rows, err := app.Pool.Query(ctx, "SELECT type FROM kumiko_events WHERE aggregate_id = $1 ORDER BY version", id)
	require.NoError(t, err)
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		types = append(types, s)
	}
	require.Equal(t, []string{"task.created", "task.updated", "task.deleted", "task.restored"}, types)
	require.Equal(t, "corr-alice", queryString(t, app, "SELECT metadata->>'correlationId' FROM kumiko_events WHERE aggregate_id = $1 AND version = 2", id))
	require.Equal(t, "alice", queryString(t, app, "SELECT created_by FROM kumiko_events WHERE aggregate_id = $1 AND version = 2", id))
}

func queryString(t *testing.T, app *kumikotest.App, sql string, args ...any) string {
	t.Helper()
	var s string
	require.NoError(t, app.Pool.QueryRow(ctx, sql, args...).Scan(&s))
	return s
}

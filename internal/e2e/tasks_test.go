package e2e_test

import (
	"net/http"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// task is the tasks sample's entity as the API answers it.
type task struct {
	entity
	Title     string  `json:"title"`
	Done      bool    `json:"done"`
	Priority  string  `json:"priority"`
	DueAt     *string `json:"dueAt"`
	DeletedAt *string `json:"deletedAt"`
}

// The task sample's binary under `serve`, one process, every line that
// needs no other: each subtest works in a tenant of its own.
func TestTasks(t *testing.T) {
	t.Parallel()
	a := newApp(t, "tasks")
	srv := a.serve(t, "tasks-1")

	t.Run("crud", func(t *testing.T) {
		t.Parallel()
		alice := a.as(t, srv, uuid.New(), "alice", "User")
		created := ok[task](alice.write("task.create", map[string]any{"title": "Try kumiko"}))
		require.Equal(t, 1, created.Version)
		require.Equal(t, "normal", created.Priority)

		updated := ok[task](alice.write("task.update", map[string]any{"id": created.ID, "version": 1, "changes": map[string]any{"priority": "high"}}))
		require.Equal(t, 2, updated.Version)
		require.Equal(t, "high", updated.Priority)

		p := alice.write("task.update", map[string]any{"id": created.ID, "version": 1, "changes": map[string]any{"title": "stale"}}).failed(http.StatusConflict)
		require.Equal(t, "version_conflict", p.Code)
		require.Equal(t, map[string]any{"currentVersion": float64(2), "expectedVersion": float64(1)}, p.Details)

		other := ok[task](alice.write("task.create", map[string]any{"title": "Second"}))
		list := ok[struct {
			Rows       []task `json:"rows"`
			NextCursor string `json:"nextCursor"`
		}](alice.query("task.list", map[string]any{"limit": 10, "sort": []map[string]any{{"field": "title"}}}))
		require.Len(t, list.Rows, 2)
		require.Equal(t, []string{"Second", "Try kumiko"}, []string{list.Rows[0].Title, list.Rows[1].Title})
		require.Equal(t, "", list.NextCursor)

		detail := ok[task](alice.query("task.detail", map[string]any{"id": created.ID}))
		require.Equal(t, updated, detail)

		deleted := ok[task](alice.write("task.delete", map[string]any{"id": other.ID, "version": 1}))
		require.NotNil(t, deleted.DeletedAt)
		list.Rows = nil
		list = ok[struct {
			Rows       []task `json:"rows"`
			NextCursor string `json:"nextCursor"`
		}](alice.query("task.list", map[string]any{"limit": 10}))
		require.Len(t, list.Rows, 1, "a deleted task leaves the list")
		require.Equal(t, created.ID, list.Rows[0].ID)

		require.Equal(t, 1, a.db.Count(t, "SELECT count(*) FROM read_task WHERE id = $1 AND deleted_at IS NOT NULL", other.ID))
		require.Equal(t, 2, a.db.Count(t, "SELECT count(*) FROM kumiko_events WHERE aggregate_id = $1", other.ID),
			"created and deleted, as events")
	})
}

package e2e_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// The relations sample's multi-stream projection, with two serve processes
// and a worker on one database: tasks written through one process are
// counted under their project in the answer of another.
func TestMultiStreamProjection(t *testing.T) {
	t.Parallel()
	reserve(t, 3)
	a := newApp(t, "relations")
	writer, reader := a.serve(t, "relations-a"), a.serve(t, "relations-b")
	w := a.worker(t, "relations-w")
	tenant := uuid.New()
	mia := a.as(t, writer, tenant, "mia", "Member")
	noah := a.as(t, reader, tenant, "noah", "Member")

	project := ok[entity](mia.write("project.create", map[string]any{"name": "Docs"}))
	var tasks []entity
	for _, title := range []string{"Quickstart", "Guides", "Reference"} {
		tasks = append(tasks, ok[entity](mia.write("task.create", map[string]any{"project": project.ID, "title": title})))
	}
	ok[entity](mia.write("task.update", map[string]any{"id": tasks[0].ID, "version": 1, "changes": map[string]any{"done": true}}))
	ok[entity](mia.write("task.delete", map[string]any{"id": tasks[2].ID, "version": 1}))

	type progress struct {
		Project uuid.UUID `json:"project"`
		Tasks   int       `json:"tasks"`
		Done    int       `json:"done"`
	}
	want := progress{Project: project.ID, Tasks: 2, Done: 1}
	// The two counts of an answer are two reads: one taken while the
	// worker applies may mix two moments. So the worker's shared shard is
	// waited for until it has applied every event, and then the answer is
	// the final one.
	head := a.db.Count(t, "SELECT max(id)::int FROM kumiko_events")
	waitFor(t, 20*time.Second, "the worker's one shared shard catches up", func() (bool, string) {
		cursor := a.db.Count(t, "SELECT coalesce(max(last_processed_event_id), 0)::int FROM kumiko_event_consumers WHERE name = 'project_tasks' AND instance_id = '__shared__'")
		return cursor >= head, fmt.Sprint("cursor ", cursor, " of ", head)
	})
	require.Equal(t, want, ok[progress](noah.query("project.progress", map[string]any{"id": project.ID})), "the other process answers the projected progress")
	require.Equal(t, 2, a.db.Count(t, "SELECT count(*) FROM project_tasks WHERE tenant_id = $1 AND project_id = $2", tenant, project.ID))

	for _, p := range []*proc{writer.proc, reader.proc, w} {
		p.stop(shutdownTimeout)
	}
}

package relations_test

import (
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/kumikotest"
	"github.com/kumiko-go/kumiko/samples/relations"
)

type row struct {
	ID      uuid.UUID `json:"id"`
	Version int       `json:"version"`
}

// Task writes on their own streams reach their project's progress once the
// projection has caught up: created, done, moved to another project,
// deleted.
func TestProjectProgress(t *testing.T) {
	t.Parallel()
	srv := kumikotest.NewServer(t, []*feature.Feature{relations.Feature})
	me := srv.As(t, uuid.New(), "mo", "Member")
	progress := func(p row) relations.Progress {
		srv.CatchUpAll(t)
		return kumikotest.Data[relations.Progress](me.Query("project.progress", relations.ProgressQuery{ID: p.ID}))
	}

	docs := kumikotest.Data[row](me.Write("project.create", map[string]any{"name": "Docs"}))
	site := kumikotest.Data[row](me.Write("project.create", map[string]any{"name": "Website"}))
	var tasks []row
	for _, title := range []string{"Quickstart", "Reference", "Landing page"} {
		tasks = append(tasks, kumikotest.Data[row](me.Write("task.create", map[string]any{"project": docs.ID, "title": title})))
	}
	require.Equal(t, relations.Progress{Project: docs.ID, Tasks: 3}, progress(docs))

	kumikotest.Data[row](me.Write("task.update", map[string]any{"id": tasks[0].ID, "version": 1, "changes": map[string]any{"done": true}}))
	kumikotest.Data[row](me.Write("task.update", map[string]any{"id": tasks[2].ID, "version": 1, "changes": map[string]any{"project": site.ID}}))
	kumikotest.Data[row](me.Write("task.delete", map[string]any{"id": tasks[1].ID}))
	require.Equal(t, relations.Progress{Project: docs.ID, Tasks: 1, Done: 1}, progress(docs))
	require.Equal(t, relations.Progress{Project: site.ID, Tasks: 1}, progress(site))
}

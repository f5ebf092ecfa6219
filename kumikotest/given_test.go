package kumikotest_test

import (
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/kumikotest"
	"github.com/kumiko-go/kumiko/samples/tasks"
)

// Given a stored history, When a command runs, Then it appended exactly
// the expected events, or refused with the expected code and appended none.
func TestGivenWhenThen(t *testing.T) {
	t.Parallel()
	app := kumikotest.NewApp(t, []*feature.Feature{tasks.Feature})
	tenant, id := uuid.New(), uuid.New()
	alice := kumikotest.User(tenant, "alice", "User")
	app.Given(t, tenant,
		kumikotest.Given{Stream: id, AggregateType: "task", Type: "task.created", Payload: map[string]any{"title": "Write docs"}})

	o := app.When(t, alice, "task.complete", tasks.CompleteTask{ID: id, Version: 1, Note: "shipped"}).
		ThenEvents("task.completed", "task.updated")
	require.Equal(t, tasks.TaskCompleted{CompletedBy: "alice", Note: "shipped"}, kumikotest.Payload[tasks.TaskCompleted](o, 0))
	require.Equal(t, 3, kumikotest.Result[struct {
		Version int `json:"version"`
	}](o).Version)
	require.Equal(t, tasks.Completed{ID: id, Version: 3}, kumikotest.Result[tasks.Completed](o),
		"the typed command's own result")

	app.When(t, alice, "task.complete", tasks.CompleteTask{ID: id, Version: 3}).ThenError("unprocessable", "already_done")
	app.When(t, alice, "task.complete", tasks.CompleteTask{ID: id, Version: 1}).ThenError("version_conflict")
}

// A stored event of an old payload version is read as the current one.
func TestGivenOldEventVersion(t *testing.T) {
	t.Parallel()
	app := kumikotest.NewApp(t, []*feature.Feature{tasks.Feature})
	tenant, id := uuid.New(), uuid.New()
	app.Given(t, tenant,
		kumikotest.Given{Stream: id, AggregateType: "task", Type: "task.created", Payload: map[string]any{"title": "Old"}},
		kumikotest.Given{Stream: id, AggregateType: "task", Type: "task.completed", EventVersion: 1, Payload: map[string]any{"by": "bob"}})
	o := app.When(t, kumikotest.User(tenant, "alice", "User"), "task.complete", tasks.CompleteTask{ID: id, Version: 2}).
		ThenEvents("task.completed", "task.updated")
	require.Equal(t, 3, o.Events[0].Version, "Given appended at versions 1 and 2")

	events, err := app.Store.Load(t.Context(), tenant, id, eventstore.LoadOptions{})
	require.NoError(t, err)
	require.Equal(t, 1, events[1].StoredEventVersion)
	require.JSONEq(t, `{"completedBy":"bob","note":""}`, string(events[1].Payload), "read as version 3")
}

// Over HTTP: typed data of a success, a typed problem of a failure, and the
// rows of an inline projection.
func TestServer(t *testing.T) {
	t.Parallel()
	srv := kumikotest.NewServer(t, []*feature.Feature{tasks.Feature})
	tenant := uuid.New()
	alice := srv.As(t, tenant, "alice", "User")

	type task struct {
		ID      uuid.UUID `json:"id"`
		Version int       `json:"version"`
		Title   string    `json:"title"`
	}
	created := kumikotest.Data[task](alice.Write("task.create", map[string]any{"title": "Write docs"}))
	require.Equal(t, "Write docs", created.Title)
	require.Equal(t, 1, created.Version)

	p := alice.Write("task.create", map[string]any{}).Problem()
	require.Equal(t, 400, p.Status)
	require.Equal(t, "validation_error", p.Code)
	require.Equal(t, "title", p.Fields[0].Path)

	type month struct {
		Created   int `json:"created"`
		Completed int `json:"completed"`
	}
	require.Equal(t, []month{{Created: 1}}, kumikotest.Rows[month](t, srv.App, "tasks_by_month", tenant))
	require.Empty(t, kumikotest.Rows[month](t, srv.App, "tasks_by_month", uuid.New()), "another tenant's rows")
}

// An event stored in a version newer than the app knows is never guessed
// at: the command that loads it to write is refused (409 version_conflict,
// reason event_schema_unknown_version: a newer release wrote it) and writes
// nothing; a read of it over HTTP is a 500 with that reason.
func TestGivenNewerEventVersion(t *testing.T) {
	t.Parallel()
	srv := kumikotest.NewServer(t, []*feature.Feature{tasks.Feature})
	tenant, id := uuid.New(), uuid.New()
	srv.Given(t, tenant,
		kumikotest.Given{Stream: id, AggregateType: "task", Type: "task.created", Payload: map[string]any{"title": "Old"}},
		kumikotest.Given{Stream: id, AggregateType: "task", Type: "task.completed", EventVersion: 4, Payload: map[string]any{"completedBy": "bob"}})

	srv.When(t, kumikotest.User(tenant, "alice", "User"), "task.complete", tasks.CompleteTask{ID: id, Version: 2}).
		ThenError("version_conflict", "event_schema_unknown_version")

	p := srv.As(t, tenant, "root", "Admin").Get("/api/inspect/task/" + id.String()).Problem()
	require.Equal(t, 500, p.Status)
	require.Equal(t, "event_schema_unknown_version", p.Reason)
}

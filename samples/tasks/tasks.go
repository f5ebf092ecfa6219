// Package tasks is the classic task list, written with the kumiko DSL at all
// four levels: a CRUD entity (level 1), a domain event and the command that
// emits it (level 2), an inline projection and a query over it (level 3), and
// an event migration (level 4). Copy it as the start of a feature of your own.
package tasks

import (
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/kumiko-go/kumiko/feature"
)

// TaskCompleted is the payload of "task.completed", version 3. Version 1
// called the user "by"; version 2 renamed it to completedBy; version 3 added
// the note. Stored events of every version are read as version 3.
type TaskCompleted struct {
	CompletedBy string `json:"completedBy" validate:"required"`
	Note        string `json:"note" validate:"max=500"`
}

// CompleteTask is the input of the "task.complete" command: the task and the
// version the client last saw.
type CompleteTask struct {
	ID      uuid.UUID `json:"id" validate:"required"`
	Version int       `json:"version" validate:"required,min=1"`
	Note    string    `json:"note" validate:"max=500"`
}

// Completed is what "task.complete" answers: the task and its version
// after the command, for the client's next write.
type Completed struct {
	ID      uuid.UUID `json:"id"`
	Version int       `json:"version"`
}

// taskDone is what complete reads of a task's state: done is empty (nil)
// in a task whose created event did not carry it.
type taskDone struct {
	Done *bool `json:"done"`
}

// doneChange is the change of the task's own fields that completing it
// makes, appended as task.updated next to task.completed.
type doneChange struct {
	Done bool `json:"done"`
}

// StatsQuery is the input of the "task.stats" query: no parameters.
type StatsQuery struct{}

// MonthStats is one row of the "task.stats" answer.
type MonthStats struct {
	Month     string `json:"month"`
	Created   int64  `json:"created"`
	Completed int64  `json:"completed"`
}

// Feature is the task list.
var Feature = feature.Define("tasks", func(r *feature.Registrar) {
	// Level 1: an entity with CRUD. Underneath, task.created/updated/deleted/
	// restored events and the read_task table.
	r.Entity("task", feature.Fields{
		"title":    feature.Text().Required().MaxLen(200).Sortable(),
		"done":     feature.Bool().Default(false),
		"priority": feature.Enum("low", "normal", "high").Default("normal").Sortable(),
		"dueAt":    feature.Timestamp().Sortable(),
		"notes":    feature.Text().MaxLen(2000),
	}, feature.SoftDelete(), feature.StateStruct[taskDone](), feature.StateStruct[remindedTask]())
	r.Crud("task", feature.Access{Write: feature.Roles("Admin", "User"), Read: feature.AnyUser()})

	// Level 2: a domain event and the command that emits it.
	r.DefineEvent("task.completed", TaskCompleted{}, feature.EventVersion(3))
	feature.Command(r, "task.complete", feature.Roles("Admin", "User"), complete)

	// Level 4: how stored task.completed events of older versions are read.
	r.EventMigration("task.completed", 1, 2, feature.Rename("by", "completedBy"))
	r.EventMigration("task.completed", 2, 3, feature.DefaultValue("note", ""))

	// Level 3: a second read model, kept in the write transaction.
	r.Projection("tasks_by_month", feature.InlineProjection{
		Source: "task",
		Table: feature.TableDef{
			Name: "tasks_by_month",
			Columns: []feature.Column{
				{Name: "tenant_id", Type: "uuid", NotNull: true},
				{Name: "month", Type: "text", NotNull: true},
				{Name: "created", Type: "bigint", NotNull: true},
				{Name: "completed", Type: "bigint", NotNull: true},
			},
			PrimaryKey: []string{"tenant_id", "month"},
			// stats reads the rows into MonthStats: the boot checks it fits.
			Row: MonthStats{},
		},
		Apply: map[string]feature.ProjectionApplyFunc{
			"task.created":   countMonth("created"),
			"task.completed": countMonth("completed"),
		},
		// Who may follow its rows live (GET /api/projections/tasks_by_month/events).
		Read: feature.AnyUser(),
	})
	feature.Query(r, "task.stats", feature.AnyUser(), stats)
})

// complete marks a task done: it refuses a stale version before writing
// anything, refuses a task that is already done, and appends the domain
// event plus the field change.
func complete(ctx feature.CommandContext, in CompleteTask) (Completed, error) {
	task, err := ctx.FetchForWriting(in.ID, "task", in.Version)
	if err != nil {
		return Completed{}, err
	}
	state, err := feature.StateAs[taskDone](task)
	if err != nil {
		return Completed{}, err
	}
	if state.Done != nil && *state.Done {
		return Completed{}, feature.Refuse("already_done", "the task is already done")
	}
	if err := task.Append("task.completed", TaskCompleted{CompletedBy: ctx.User().ID, Note: in.Note}); err != nil {
		return Completed{}, err
	}
	if err := task.Append("task.updated", doneChange{Done: true}); err != nil {
		return Completed{}, err
	}
	return Completed{ID: in.ID, Version: task.Version()}, nil
}

// countMonth adds one to the created or completed count of the event's month.
func countMonth(column string) feature.ProjectionApplyFunc {
	created, completed := 0, 0
	if column == "created" {
		created = 1
	} else {
		completed = 1
	}
	return func(ctx feature.ProjectionContext, e feature.Event) error {
		_, err := ctx.DB().Exec(ctx.Context(), fmt.Sprintf(`
INSERT INTO %[1]s AS t (tenant_id, month, created, completed) VALUES ($1, $2, $3, $4)
ON CONFLICT (tenant_id, month) DO UPDATE
	SET created = t.created + EXCLUDED.created, completed = t.completed + EXCLUDED.completed`, ctx.Table()),
			ctx.Tenant(), month(e.CreatedAt), created, completed)
		return err
	}
}

func month(t time.Time) string { return t.UTC().Format("2006-01") }

// stats answers the months of the caller's tenant, newest first.
func stats(ctx feature.CommandContext, _ StatsQuery) ([]MonthStats, error) {
	return feature.RowsAs[MonthStats](ctx.QueryProjection("tasks_by_month"), feature.ProjectionFilter{OrderBy: "month DESC"})
}

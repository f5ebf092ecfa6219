// Package relations shows events that cross aggregates: tasks belong to
// projects, and a multi-stream projection follows the events of every task
// stream to keep, per project, which tasks it has and which are done. The
// project's progress is read from that table; no task write ever locks or
// loads its project.
package relations

import (
	"github.com/google/uuid"

	"github.com/kumiko-go/kumiko/feature"
)

// ProgressQuery is the input of "project.progress".
type ProgressQuery struct {
	ID uuid.UUID `json:"id" validate:"required"`
}

// Progress is the answer of "project.progress".
type Progress struct {
	Project uuid.UUID `json:"project"`
	Tasks   int64     `json:"tasks"`
	Done    int64     `json:"done"`
}

// taskState is what the projection reads of a task.
type taskState struct {
	Project   uuid.UUID `json:"project"`
	Done      bool      `json:"done"`
	DeletedAt *string   `json:"deletedAt"`
}

// Feature is project planning.
var Feature = feature.Define("planning", func(r *feature.Registrar) {
	access := feature.Access{Write: feature.Roles("Member"), Read: feature.AnyUser()}
	r.Entity("project", feature.Fields{"name": feature.Text().Required().MaxLen(200)})
	r.Crud("project", access)
	r.Entity("task", feature.Fields{
		"project": feature.Reference("project").Required(),
		"title":   feature.Text().Required().MaxLen(200),
		"done":    feature.Bool().Default(false),
	}, feature.SoftDelete())
	r.Crud("task", access)

	r.MultiStreamProjection(feature.MultiStreamProjection{
		Name: "project_tasks",
		Table: &feature.TableDef{
			Name: "project_tasks",
			Columns: []feature.Column{
				{Name: "tenant_id", Type: "uuid", NotNull: true},
				{Name: "task_id", Type: "uuid", NotNull: true},
				{Name: "project_id", Type: "uuid", NotNull: true},
				{Name: "done", Type: "boolean", NotNull: true},
			},
			PrimaryKey: []string{"tenant_id", "task_id"},
			Indexes:    []feature.Index{{Columns: []string{"tenant_id", "project_id"}}},
		},
		Apply: map[string]feature.ApplyFunc{
			"task.created":  trackTask,
			"task.updated":  trackTask,
			"task.deleted":  trackTask,
			"task.restored": trackTask,
		},
	})
	feature.HandleQuery(r, "project.progress", feature.AnyUser(), progress)
})

// trackTask puts the task, as it was after e, under its project: the
// event itself names only what changed, so the task is loaded at e's version.
func trackTask(ctx feature.ApplyContext, e feature.Event) error {
	agg, err := ctx.LoadAggregate(e.AggregateID, "task", feature.LoadOptions{Version: e.Version})
	if err != nil {
		return err
	}
	var t taskState
	if err := decodeState(agg.State(), &t); err != nil {
		return err
	}
	if t.DeletedAt != nil {
		_, err = ctx.DB().Exec(ctx.Context(), `DELETE FROM `+ctx.Table()+` WHERE tenant_id = $1 AND task_id = $2`, ctx.Tenant(), e.AggregateID)
		return err
	}
	_, err = ctx.DB().Exec(ctx.Context(), `
INSERT INTO `+ctx.Table()+` (tenant_id, task_id, project_id, done) VALUES ($1, $2, $3, $4)
ON CONFLICT (tenant_id, task_id) DO UPDATE SET project_id = EXCLUDED.project_id, done = EXCLUDED.done`,
		ctx.Tenant(), e.AggregateID, t.Project, t.Done)
	return err
}

// progress counts a project's tasks and the done ones. It is as current as
// the projection: a task written a moment ago may not be counted yet.
func progress(ctx feature.CommandContext, in ProgressQuery) (any, error) {
	q := ctx.QueryProjection("project_tasks")
	tasks, err := q.Count(feature.ProjectionFilter{Where: "project_id = $1", Args: []any{in.ID}})
	if err != nil {
		return nil, err
	}
	done, err := q.Count(feature.ProjectionFilter{Where: "project_id = $1 AND done", Args: []any{in.ID}})
	if err != nil {
		return nil, err
	}
	return Progress{Project: in.ID, Tasks: tasks, Done: done}, nil
}

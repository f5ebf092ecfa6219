package feature_test

import (
	"fmt"

	"github.com/google/uuid"

	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/registry"
)

// Level 1: an entity and its CRUD handlers. The framework stores
// task.created/updated/deleted events and keeps the read table read_task.
func Example() {
	tasks := feature.Define("tasks", func(r *feature.Registrar) {
		r.Entity("task", feature.Fields{
			"title":    feature.Text().Required().MaxLen(200),
			"done":     feature.Bool().Default(false),
			"priority": feature.Enum("low", "normal", "high").Default("normal").Sortable(),
		}, feature.SoftDelete())
		r.Crud("task", feature.Access{Write: feature.Roles("User"), Read: feature.AnyUser()})
	})

	reg, err := registry.Build(tasks)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, h := range reg.Handlers() {
		fmt.Println(h.Name, h.Kind, h.Access)
	}
	// Output:
	// task.create write roles(User)
	// task.delete write roles(User)
	// task.detail query any-user
	// task.list query any-user
	// task.restore write roles(User)
	// task.update write roles(User)
}

// TaskCompleted is the payload of the domain event task.completed.
type TaskCompleted struct {
	ID uuid.UUID `json:"id" validate:"required"`
	By string    `json:"by" validate:"required"`
}

// CompleteTask is the input of the command task.complete.
type CompleteTask struct {
	ID      uuid.UUID `json:"id" validate:"required"`
	Version int       `json:"version" validate:"min=1"`
}

// Level 2: a domain event with a validated payload, a command that appends
// it after checking the client's version, and an upcaster for an older
// payload shape.
func Example_commands() {
	tasks := feature.Define("tasks", func(r *feature.Registrar) {
		r.Entity("task", feature.Fields{"title": feature.Text().Required()})
		r.Crud("task", feature.Access{Write: feature.Roles("User"), Read: feature.AnyUser()})

		r.DefineEvent("task.completed", TaskCompleted{}, feature.EventVersion(2))
		r.EventMigration("task.completed", 1, 2, feature.Rename("user", "by"))

		feature.HandleCommand(r, "task.complete", feature.Roles("User"), func(ctx feature.CommandContext, in CompleteTask) (any, error) {
			agg, err := ctx.FetchForWriting(in.ID, "task", in.Version)
			if err != nil {
				return nil, err
			}
			if agg.State()["done"] == true {
				return nil, feature.Refuse("already_done", "the task is already done")
			}
			return nil, agg.Append("task.completed", TaskCompleted{ID: in.ID, By: ctx.User().ID})
		})
	})

	reg, err := registry.Build(tasks)
	if err != nil {
		fmt.Println(err)
		return
	}
	h, _ := reg.Handler("task.complete")
	ev, _ := reg.Event("task.completed")
	fmt.Println(h.Kind, h.Access, ev.Version)
	// Output: command roles(User) 2
}

// Level 3: an inline projection kept in the write transaction, and a
// multi-stream projection without a table that reacts to committed events
// (mail, webhooks) once per event across all processes.
func Example_projections() {
	tasks := feature.Define("tasks", func(r *feature.Registrar) {
		r.Entity("task", feature.Fields{"title": feature.Text().Required()})
		r.Crud("task", feature.Access{Write: feature.Roles("User"), Read: feature.AnyUser()})

		r.Projection("task_titles", feature.InlineProjection{
			Source: "task",
			Table: feature.TableDef{
				Name: "task_titles",
				Columns: []feature.Column{
					{Name: "id", Type: "uuid", NotNull: true},
					{Name: "tenant_id", Type: "uuid", NotNull: true},
					{Name: "title", Type: "text"},
				},
				PrimaryKey: []string{"id"},
			},
			Apply: map[string]feature.ProjectionApplyFunc{
				"task.created": func(ctx feature.ProjectionContext, e feature.Event) error {
					in, err := feature.Decode[struct {
						Title string `json:"title"`
					}](e)
					if err != nil {
						return err
					}
					_, err = ctx.DB().Exec(ctx.Context(),
						"INSERT INTO "+ctx.Table()+" (id, tenant_id, title) VALUES ($1, $2, $3)",
						e.AggregateID, ctx.Tenant(), in.Title)
					return err
				},
			},
		})

		r.MultiStreamProjection(feature.MultiStreamProjection{
			Name: "task-mailer",
			Apply: map[string]feature.ApplyFunc{
				"task.created": func(ctx feature.ApplyContext, e feature.Event) error {
					// Send a mail; a failure is retried (at-least-once).
					return nil
				},
			},
		})
	})

	reg, err := registry.Build(tasks)
	if err != nil {
		fmt.Println(err)
		return
	}
	p, _ := reg.Projection("task_titles")
	m, _ := reg.MSP("task-mailer")
	_, hasTable := m.Table()
	fmt.Println(p.Source(), p.Events(), m.Delivery(), hasTable, m.MaxAttempts())
	// Output: task [task.created] shared false 10
}

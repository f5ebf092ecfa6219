package registry_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/registry"
)

// The "tasks" app of docs/features.md, with a second feature whose events the tasks
// feature consumes.

type TaskCompleted struct {
	CompletedBy string    `json:"completedBy" validate:"required"`
	Note        string    `json:"note"`
	At          time.Time `json:"at"`
}

type CompleteTask struct {
	ID      uuid.UUID `json:"id" validate:"required"`
	Version int       `json:"version" validate:"required,min=1"`
}

type StatsQuery struct {
	Month string `json:"month,omitempty" validate:"omitempty,len=7"`
}

type Stats struct {
	Open, Done int
}

type UserInvited struct {
	Email string `json:"email" validate:"required,email"`
	Name  string `json:"name" validate:"max=100"`
}

// fakeCtx is a CommandContext for calling handlers without a pipeline; only
// the methods the handlers here use are implemented.
type fakeCtx struct {
	feature.CommandContext
	user feature.User
}

func (c fakeCtx) User() feature.User { return c.user }

func tasksFeature() *feature.Feature {
	return feature.Define("tasks", func(r *feature.Registrar) {
		r.Entity("task", feature.Fields{
			"title":    feature.Text().Required().MaxLen(200).Sortable(),
			"done":     feature.Bool().Default(false),
			"priority": feature.Enum("low", "normal", "high").Default("normal"),
			"dueAt":    feature.Timestamp(),
			"assignee": feature.Reference("user"),
			"labels":   feature.JSON(),
			"estimate": feature.Number(),
			"code":     feature.Text().Unique().WriteRoles("Admin"),
		}, feature.SoftDelete())
		r.Crud("task", feature.Access{Write: feature.Roles("Admin", "User"), Read: feature.AnyUser()})

		r.DefineEvent("task.completed", TaskCompleted{}, feature.EventVersion(2))
		r.EventMigration("task.completed", 1, 2, feature.Rename("by", "completedBy"), feature.DefaultValue("note", ""))

		r.Command("task.complete", CompleteTask{}, feature.Roles("User"), func(ctx feature.CommandContext, in CompleteTask) (any, error) {
			if in.Version > 10 {
				return nil, feature.Refuse("too_late", "the task is archived")
			}
			return map[string]any{"completedBy": ctx.User().ID, "id": in.ID}, nil
		})
		feature.HandleQuery(r, "task.stats", feature.AnyUser(), func(ctx feature.CommandContext, in StatsQuery) (any, error) {
			return Stats{Open: 3, Done: len(in.Month)}, nil
		})

		r.Projection("tasks_by_month", feature.InlineProjection{
			Source: "task",
			Table: feature.TableDef{
				Name: "tasks_by_month",
				Columns: []feature.Column{
					{Name: "tenant_id", Type: "uuid", NotNull: true},
					{Name: "month", Type: "text", NotNull: true},
					{Name: "count", Type: "integer", NotNull: true},
				},
				PrimaryKey: []string{"tenant_id", "month"},
			},
			Apply: map[string]feature.ProjectionApplyFunc{
				"task.created":   func(feature.ProjectionContext, feature.Event) error { return nil },
				"task.deleted":   func(feature.ProjectionContext, feature.Event) error { return nil },
				"task.completed": func(feature.ProjectionContext, feature.Event) error { return nil },
			},
		})
		r.MultiStreamProjection(feature.MultiStreamProjection{
			Name:     "send-welcome-email",
			Delivery: feature.Shared,
			Apply: map[string]feature.ApplyFunc{
				"user.invited": func(feature.ApplyContext, feature.Event) error { return nil },
			},
		})
		r.MultiStreamProjection(feature.MultiStreamProjection{
			Name:  "completions",
			Table: &feature.TableDef{Name: "completions", Columns: []feature.Column{{Name: "task_id", Type: "uuid"}, {Name: "n", Type: "bigint"}}, PrimaryKey: []string{"task_id"}},
			Apply: map[string]feature.ApplyFunc{
				"task.completed": func(feature.ApplyContext, feature.Event) error { return nil },
				"task.created":   func(feature.ApplyContext, feature.Event) error { return nil },
			},
			StartFrom: feature.FromNow,
		})
	})
}

func usersFeature() *feature.Feature {
	return feature.Define("users", func(r *feature.Registrar) {
		r.Entity("user", feature.Fields{
			"email": feature.Text().Required().Unique(),
			"name":  feature.Text(),
		}, feature.SystemStream())
		r.Crud("user", feature.Access{Write: feature.Roles("Admin"), Read: feature.AnyUser(), Delete: feature.Deny()})
		r.DefineEvent("user.invited", UserInvited{})
	})
}

func buildApp(t *testing.T) *registry.Registry {
	t.Helper()
	reg, err := registry.Build(tasksFeature(), usersFeature())
	require.NoError(t, err)
	return reg
}

func TestTasksAppBuildsCleanly(t *testing.T) {
	t.Parallel()
	reg := buildApp(t)

	require.Equal(t, []registry.FeatureInfo{
		{
			Name:        "tasks",
			Entities:    []string{"task"},
			Events:      []string{"task.completed"},
			Handlers:    []string{"task.create", "task.update", "task.delete", "task.restore", "task.list", "task.detail", "task.complete", "task.stats"},
			Projections: []string{"tasks_by_month"},
			MSPs:        []string{"send-welcome-email", "completions"},
		},
		{
			Name:     "users",
			Entities: []string{"user"},
			Events:   []string{"user.invited"},
			Handlers: []string{"user.create", "user.update", "user.list", "user.detail"},
		},
	}, reg.Features())

	task, ok := reg.Entity("task")
	require.True(t, ok)
	require.Equal(t, "tasks", task.Feature())
	require.True(t, task.SoftDelete())
	require.False(t, task.SystemStream())
	require.Equal(t, 100, task.SnapshotEvery())
	require.Equal(t, 1, task.SnapshotVersion())
	require.Equal(t, []string{"assignee", "code", "done", "dueAt", "estimate", "labels", "priority", "title"}, task.FieldNames())
	require.Equal(t, []registry.CrudVerb{"create", "update", "delete", "restore", "list", "detail"}, task.Verbs())
	prio, ok := task.Field("priority")
	require.True(t, ok)
	require.Equal(t, "normal", prio.Default)

	user, _ := reg.Entity("user")
	require.True(t, user.SystemStream())
	require.Equal(t, []registry.CrudVerb{"create", "update", "list", "detail"}, user.Verbs(), "Deny omits delete; no restore without soft delete")
	_, ok = reg.Handler("user.delete")
	require.False(t, ok)

	require.Len(t, reg.Entities(), 2)
	require.Equal(t, "task", reg.Entities()[0].Name())
}

func TestEntityReadTable(t *testing.T) {
	t.Parallel()
	task, _ := buildApp(t).Entity("task")
	tbl := task.Table()
	require.Equal(t, "read_task", tbl.Name)
	require.Equal(t, []string{"id"}, tbl.PrimaryKey)
	var cols []string
	for _, c := range tbl.Columns {
		cols = append(cols, c.Name+" "+c.Type)
	}
	require.Equal(t, []string{
		"id uuid", "tenant_id uuid", "version integer",
		"assignee uuid", "code text", "done boolean", "due_at timestamptz", "estimate numeric",
		"labels jsonb", "priority text", "title text",
		"created_at timestamptz", "updated_at timestamptz", "deleted_at timestamptz",
	}, cols)
	title, _ := tbl.Column("title")
	require.True(t, title.NotNull)
	require.Equal(t, []feature.Index{
		{Columns: []string{"tenant_id", "code"}, Unique: true},
		{Columns: []string{"tenant_id", "title", "id"}},
		{Columns: []string{"tenant_id", "created_at", "id"}},
	}, tbl.Indexes)
}

func TestHandlers(t *testing.T) {
	t.Parallel()
	reg := buildApp(t)

	create, ok := reg.Handler("task.create")
	require.True(t, ok)
	require.Equal(t, registry.KindWrite, create.Kind)
	require.Equal(t, registry.VerbCreate, create.Verb)
	require.Equal(t, "task", create.Entity)
	require.Equal(t, "tasks", create.Feature)
	require.Equal(t, reflect.TypeFor[registry.CreateInput](), create.Input)
	require.Nil(t, create.Invoke)
	require.True(t, create.Access.Allows(feature.User{Roles: []string{"User"}, Authenticated: true}))

	list, _ := reg.Handler("task.list")
	require.Equal(t, registry.KindQuery, list.Kind)
	require.Equal(t, "any-user", list.Access.String())

	complete, ok := reg.Handler("task.complete")
	require.True(t, ok)
	require.Equal(t, registry.KindCommand, complete.Kind)
	require.Equal(t, reflect.TypeFor[CompleteTask](), complete.Input)
	id := uuid.New()
	in, err := reg.DecodePayload("task.complete", json.RawMessage(`{"id":"`+id.String()+`","version":3}`))
	require.NoError(t, err)
	out, err := complete.Invoke(fakeCtx{user: feature.User{ID: "ann"}}, in)
	require.NoError(t, err)
	require.Equal(t, map[string]any{"completedBy": "ann", "id": id}, out)

	_, err = complete.Invoke(fakeCtx{}, CompleteTask{ID: id, Version: 11})
	var refused *feature.RefusedError
	require.True(t, errors.As(err, &refused))
	require.Equal(t, "too_late", refused.Reason())

	_, err = complete.Invoke(fakeCtx{}, "not the input")
	require.ErrorContains(t, err, "want registry_test.CompleteTask")

	stats, ok := reg.Handler("task.stats")
	require.True(t, ok)
	require.Equal(t, registry.KindQuery, stats.Kind)

	require.Equal(t, "write", registry.KindWrite.String())
	require.Equal(t, "command", registry.KindCommand.String())
	require.Equal(t, "query", registry.KindQuery.String())
	require.Equal(t, "HandlerKind(9)", registry.HandlerKind(9).String())
	out, err = stats.Invoke(fakeCtx{}, StatsQuery{Month: "2026-04"})
	require.NoError(t, err)
	require.Equal(t, Stats{Open: 3, Done: 7}, out)

	var names []string
	for _, h := range reg.Handlers() {
		names = append(names, h.Name)
	}
	require.Equal(t, []string{
		"task.complete", "task.create", "task.delete", "task.detail", "task.list", "task.restore", "task.stats", "task.update",
		"user.create", "user.detail", "user.list", "user.update",
	}, names)
}

func TestEvents(t *testing.T) {
	t.Parallel()
	reg := buildApp(t)

	ev, ok := reg.Event("task.completed")
	require.True(t, ok)
	require.Equal(t, registry.EventType{Name: "task.completed", Feature: "tasks", Version: 2, GoType: reflect.TypeFor[TaskCompleted]()}, ev)

	created, ok := reg.Event("task.created")
	require.True(t, ok)
	require.Equal(t, registry.EventType{Name: "task.created", Feature: "tasks", Version: 1, Entity: "task", Verb: registry.VerbCreate}, created)
	_, ok = reg.Event("task.restored")
	require.True(t, ok)
	_, ok = reg.Event("user.restored")
	require.False(t, ok, "no restore event without soft delete")

	var names []string
	for _, e := range reg.Events() {
		names = append(names, e.Name)
	}
	require.Equal(t, []string{
		"kumiko.subject.forgotten", // the framework's own: what a forget appends
		"task.completed", "task.created", "task.deleted", "task.restored", "task.updated",
		"user.created", "user.deleted", "user.invited", "user.updated",
	}, names)
}

func TestCanEmit(t *testing.T) {
	t.Parallel()
	reg := buildApp(t)
	require.True(t, reg.CanEmit("tasks", "task.completed"))
	require.True(t, reg.CanEmit("tasks", "task.created"), "CRUD events of its own entity")
	require.True(t, reg.CanEmit("users", "user.invited"))
	require.False(t, reg.CanEmit("tasks", "user.invited"), "another feature's event")
	require.False(t, reg.CanEmit("tasks", "user.created"), "another feature's CRUD event")
	require.False(t, reg.CanEmit("tasks", "task.nonsense"))
	require.False(t, reg.CanEmit("nobody", "task.completed"))
}

func TestProjections(t *testing.T) {
	t.Parallel()
	reg := buildApp(t)

	p, ok := reg.Projection("tasks_by_month")
	require.True(t, ok)
	require.Equal(t, "tasks", p.Feature())
	require.Equal(t, "task", p.Source())
	require.Equal(t, []string{"task.completed", "task.created", "task.deleted"}, p.Events())
	require.Equal(t, "tasks_by_month", p.Table().Name)
	_, ok = p.Apply("task.created")
	require.True(t, ok)
	_, ok = p.Apply("task.updated")
	require.False(t, ok)

	require.Equal(t, []*registry.Projection{p}, reg.ProjectionsFor("task"))
	require.Empty(t, reg.ProjectionsFor("user"))
	require.Equal(t, []*registry.Projection{p}, reg.Projections())

	msps := reg.MSPs()
	require.Len(t, msps, 2)
	mail := msps[0]
	require.Equal(t, "send-welcome-email", mail.Name())
	require.Equal(t, "tasks", mail.Feature())
	require.Equal(t, feature.Shared, mail.Delivery())
	require.Equal(t, feature.DefaultMaxAttempts, mail.MaxAttempts())
	require.Equal(t, feature.DefaultBatchSize, mail.BatchSize())
	require.Equal(t, feature.FromBeginning, mail.StartFrom())
	require.False(t, mail.SkipApplyErrors())
	_, hasTable := mail.Table()
	require.False(t, hasTable)
	require.Equal(t, []string{"user.invited"}, mail.Events())
	_, ok = mail.Apply("user.invited")
	require.True(t, ok)

	comp, ok := reg.MSP("completions")
	require.True(t, ok)
	tbl, hasTable := comp.Table()
	require.True(t, hasTable)
	require.Equal(t, "completions", tbl.Name)
	require.Equal(t, feature.FromNow, comp.StartFrom())
	_, ok = reg.MSP("nope")
	require.False(t, ok)
}

func TestRegistryHandsOutCopies(t *testing.T) {
	t.Parallel()
	reg := buildApp(t)

	task, _ := reg.Entity("task")
	task.FieldNames()[0] = "changed"
	spec, _ := task.Field("priority")
	spec.Enum[0] = "changed"
	task.Table().Columns[0].Name = "changed"
	task.Verbs()[0] = "changed"
	require.Equal(t, "assignee", task.FieldNames()[0])
	spec, _ = task.Field("priority")
	require.Equal(t, "low", spec.Enum[0])
	require.Equal(t, "id", task.Table().Columns[0].Name)
	require.Equal(t, registry.VerbCreate, task.Verbs()[0])

	reg.Features()[0].Handlers[0] = "changed"
	require.Equal(t, "task.create", reg.Features()[0].Handlers[0])

	reg.Projections()[0] = nil
	reg.ProjectionsFor("task")[0] = nil
	reg.MSPs()[0] = nil
	require.NotNil(t, reg.Projections()[0])
	require.NotNil(t, reg.ProjectionsFor("task")[0])
	require.NotNil(t, reg.MSPs()[0])

	schema := reg.Schema("task.completed")
	schema[0] = 'X'
	require.Equal(t, byte('{'), reg.Schema("task.completed")[0])

	p, _ := reg.Projection("tasks_by_month")
	p.Events()[0] = "changed"
	p.Table().Columns[0].Name = "changed"
	require.Equal(t, "task.completed", p.Events()[0])
	require.Equal(t, "tenant_id", p.Table().Columns[0].Name)
}

func TestBuildDoesNotShareStateBetweenRegistries(t *testing.T) {
	t.Parallel()
	tasks, users := tasksFeature(), usersFeature()
	a, err := registry.Build(tasks, users)
	require.NoError(t, err)
	b, err := registry.Build(tasks, users)
	require.NoError(t, err, "a feature can be built into many registries")
	require.NotSame(t, a, b)
	ea, _ := a.Entity("task")
	eb, _ := b.Entity("task")
	require.NotSame(t, ea, eb)
}

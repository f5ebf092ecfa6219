package feature_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/internal/spec"
)

type taskCompleted struct {
	By string `json:"by" validate:"required"`
}

type completeTask struct {
	ID string `json:"id"`
}

func noopApply(feature.ApplyContext, feature.Event) error { return nil }

func noopProject(feature.ProjectionContext, feature.Event) error { return nil }

func TestDefineRecordsDeclarationsWithDefaults(t *testing.T) {
	t.Parallel()
	title := feature.Text().Required().MaxLen(200)
	f := feature.Define("tasks", func(r *feature.Registrar) {
		r.Entity("task", feature.Fields{"title": title, "done": feature.Bool().Default(false)})
		r.Entity("note", feature.Fields{"body": feature.Text()},
			feature.SoftDelete(), feature.SystemStream(), feature.SnapshotEvery(5), feature.SnapshotVersion(3), feature.Table("notes"))
		r.Crud("task", feature.Access{Write: feature.Roles("User"), Read: feature.AnyUser()})
		r.DefineEvent("task.completed", taskCompleted{}, feature.EventVersion(2))
		r.EventMigration("task.completed", 1, 2, feature.Rename("who", "by"))
		r.Command("task.complete", completeTask{}, feature.Roles("User"), func(feature.CommandContext, completeTask) (any, error) { return nil, nil })
		feature.HandleQuery(r, "task.stats", feature.AnyUser(), func(feature.CommandContext, completeTask) (any, error) { return "ok", nil })
		r.Projection("tasks_by_month", feature.InlineProjection{Source: "task", Apply: map[string]feature.ProjectionApplyFunc{"task.created": noopProject}})
		r.MultiStreamProjection(feature.MultiStreamProjection{Name: "mailer", Apply: map[string]feature.ApplyFunc{"task.completed": noopApply}})
	})
	// Changing a builder after Entity does not change what was recorded.
	title.MaxLen(5)

	require.Equal(t, "tasks", f.Name())
	d := f.Spec()
	require.Empty(t, d.Problems)
	require.Len(t, d.Entities, 2)

	task := d.Entities[0]
	require.Equal(t, "task", task.Name)
	require.Equal(t, feature.DefaultSnapshotEvery, task.SnapshotEvery)
	require.Equal(t, 1, task.SnapshotVersion)
	require.Equal(t, "read_task", task.Table)
	require.False(t, task.SoftDelete)
	require.Equal(t, 200, task.Fields["title"].MaxLen)
	require.True(t, task.Fields["title"].Required)
	require.True(t, task.Fields["done"].HasDefault)
	require.Equal(t, false, task.Fields["done"].Default)

	note := d.Entities[1]
	require.True(t, note.SoftDelete)
	require.True(t, note.SystemStream)
	require.Equal(t, 5, note.SnapshotEvery)
	require.Equal(t, 3, note.SnapshotVersion)
	require.Equal(t, "notes", note.Table)

	require.Equal(t, []spec.Crud{{Entity: "task", Access: feature.Access{Write: feature.Roles("User"), Read: feature.AnyUser()}}}, d.Cruds)
	require.Equal(t, []spec.Event{{Name: "task.completed", Payload: reflect.TypeFor[taskCompleted](), Version: 2}}, d.Events)
	require.Len(t, d.Migrations, 1)
	require.Equal(t, 1, d.Migrations[0].From)
	require.Equal(t, 2, d.Migrations[0].To)

	require.Len(t, d.Handlers, 2)
	require.False(t, d.Handlers[0].Query)
	require.NotNil(t, d.Handlers[0].Handler)
	require.Nil(t, d.Handlers[0].Invoke)
	require.True(t, d.Handlers[1].Query)
	require.Equal(t, reflect.TypeFor[completeTask](), d.Handlers[1].Input)
	invoke := d.Handlers[1].Invoke.(func(feature.CommandContext, any) (any, error))
	out, err := invoke(nil, completeTask{})
	require.NoError(t, err)
	require.Equal(t, "ok", out)
	_, err = invoke(nil, "wrong")
	require.ErrorContains(t, err, "want feature_test.completeTask")

	require.Len(t, d.Projections, 1)
	require.Equal(t, "task", d.Projections[0].Inline.(feature.InlineProjection).Source)
	require.Len(t, d.MSPs, 1)
	require.Equal(t, "mailer", d.MSPs[0].(feature.MultiStreamProjection).Name)
}

func TestDefinitionsAreCopies(t *testing.T) {
	t.Parallel()
	apply := map[string]feature.ApplyFunc{"a.b": noopApply}
	table := &feature.TableDef{Name: "t", Columns: []feature.Column{{Name: "a", Type: "text"}}}
	f := feature.Define("f", func(r *feature.Registrar) {
		r.Entity("e", feature.Fields{"kind": feature.Enum("a", "b")})
		r.MultiStreamProjection(feature.MultiStreamProjection{Name: "m", Table: table, Apply: apply})
	})
	// Changing the caller's values after Define changes nothing recorded.
	apply["c.d"] = noopApply
	table.Columns[0].Name = "changed"

	d := f.Spec()
	m := d.MSPs[0].(feature.MultiStreamProjection)
	require.Len(t, m.Apply, 1)
	require.Equal(t, "a", m.Table.Columns[0].Name)

	// Changing a returned copy changes nothing either.
	d.Entities[0].Fields["kind"].Enum[0] = "zzz"
	m.Apply["x.y"] = noopApply
	again := f.Spec()
	require.Equal(t, []string{"a", "b"}, again.Entities[0].Fields["kind"].Enum)
	require.Len(t, again.MSPs[0].(feature.MultiStreamProjection).Apply, 1)
}

func problems(f *feature.Feature) []string {
	var out []string
	for _, p := range f.Spec().Problems {
		out = append(out, p.Item+": "+p.Message)
	}
	return out
}

func TestDefineRecordsMistakesInsteadOfPanicking(t *testing.T) {
	t.Parallel()

	t.Run("nil function", func(t *testing.T) {
		t.Parallel()
		f := feature.Define("x", nil)
		require.Equal(t, []string{`feature "x": Define called with a nil function`}, problems(f))
	})

	t.Run("panic inside the function", func(t *testing.T) {
		t.Parallel()
		var f *feature.Feature
		require.NotPanics(t, func() {
			f = feature.Define("x", func(r *feature.Registrar) {
				r.Entity("before", feature.Fields{})
				panic("boom")
			})
		})
		ps := problems(f)
		require.Len(t, ps, 1)
		require.Contains(t, ps[0], "panic while defining the feature: boom")
		require.Contains(t, ps[0], "feature_test.go:")
		require.Len(t, f.Spec().Entities, 1, "declarations before the panic are kept")
	})

	t.Run("registrar used after Define", func(t *testing.T) {
		t.Parallel()
		var kept *feature.Registrar
		f := feature.Define("x", func(r *feature.Registrar) { kept = r })
		kept.Entity("late", feature.Fields{})
		kept.Crud("late", feature.Access{})
		d := f.Spec()
		require.Empty(t, d.Entities)
		require.Empty(t, d.Cruds)
		require.Len(t, d.Problems, 2)
		require.Contains(t, d.Problems[0].Message, "after Define returned")
	})

	t.Run("nil field and zero options", func(t *testing.T) {
		t.Parallel()
		f := feature.Define("x", func(r *feature.Registrar) {
			r.Entity("e", feature.Fields{"title": nil}, feature.EntityOption{})
			r.DefineEvent("e.done", struct{}{}, feature.EventOption{})
			r.DefineEvent("e.keyed", struct{}{}, feature.MessageKey("id"))
			r.OnIntegrationEvent("e.sent", "h", nil, feature.IntegrationOption{})
		})
		ps := problems(f)
		require.Len(t, ps, 5)
		require.Contains(t, ps[0], `entity "e" field "title": field is nil`)
		require.Contains(t, ps[1], `entity "e": zero EntityOption`)
		require.Contains(t, ps[2], `event "e.done": zero EventOption`)
		require.Contains(t, ps[3], `event "e.keyed": MessageKey is an option of integration events`)
		require.Contains(t, ps[4], `integration handler "h": zero IntegrationOption`)
	})
}

func TestFieldBuilderMisuseIsRecorded(t *testing.T) {
	t.Parallel()
	cases := []struct {
		field *feature.Field
		want  string
	}{
		{feature.Bool().MaxLen(3), "MaxLen applies to text fields, not bool"},
		{feature.Text().MaxLen(0), "MaxLen(0) must be at least 1"},
		{feature.Enum(), "Enum needs at least one value"},
		{feature.Enum("a", "a"), `Enum value "a" is listed twice`},
		{feature.Enum("a", ""), "Enum value is empty"},
		{feature.Text().Default(nil), "Default(nil)"},
		{feature.JSON().Sortable(), "json fields cannot be sortable"},
		{feature.JSON().Unique(), "json fields cannot be unique"},
		{feature.Reference(""), "Reference needs an entity name"},
		{feature.Text().ReadRoles(), "ReadRoles needs at least one role"},
		{feature.Text().WriteRoles("Admin", ""), "WriteRoles has an empty role name"},
	}
	for _, c := range cases {
		ps := feature.SpecOf(c.field).Problems
		require.Len(t, ps, 1, c.want)
		require.Contains(t, ps[0], c.want)
	}
	require.Empty(t, feature.SpecOf(feature.Text().Required().MaxLen(10).Sortable().Unique().ReadRoles("A").WriteRoles("B")).Problems)
}

func TestFieldSpec(t *testing.T) {
	t.Parallel()
	s := feature.SpecOf(feature.Reference("user").Required())
	require.Equal(t, spec.TypeReference, s.Type)
	require.Equal(t, "user", s.Ref)
	require.True(t, s.Required)

	s = feature.SpecOf(feature.Enum("low", "high").Default("low").Sortable())
	require.Equal(t, []string{"low", "high"}, s.Enum)
	require.True(t, s.HasDefault)
	require.True(t, s.Sortable)

	secret := feature.SpecOf(feature.Text().ReadRoles("Admin").WriteRoles("Owner"))
	admin := feature.User{ID: "1", Roles: []string{"Admin"}, Authenticated: true}
	owner := feature.User{ID: "2", Roles: []string{"Owner"}, Authenticated: true}
	forged := feature.User{Roles: []string{"Admin"}} // roles without authentication
	require.True(t, secret.CanRead(admin.Authenticated, admin.HasRole))
	require.False(t, secret.CanRead(owner.Authenticated, owner.HasRole))
	require.False(t, secret.CanRead(forged.Authenticated, forged.HasRole))
	require.True(t, secret.CanWrite(owner.Authenticated, owner.HasRole))
	require.False(t, secret.CanWrite(admin.Authenticated, admin.HasRole))

	open := feature.SpecOf(feature.Text())
	require.True(t, open.CanRead(false, feature.User{}.HasRole))
	require.True(t, open.CanWrite(false, feature.User{}.HasRole))
}

func TestFieldTypeColumnType(t *testing.T) {
	t.Parallel()
	want := map[*feature.Field]string{
		feature.Text():           "text",
		feature.Number():         "numeric",
		feature.Bool():           "boolean",
		feature.Enum("a"):        "text",
		feature.Timestamp():      "timestamptz",
		feature.UUID():           "uuid",
		feature.Reference("org"): "uuid",
		feature.JSON():           "jsonb",
	}
	for f, col := range want {
		require.Equal(t, col, feature.SpecOf(f).Type.ColumnType(), string(feature.SpecOf(f).Type))
	}
	require.Empty(t, spec.FieldType("nope").ColumnType())
}

func TestRuleAllows(t *testing.T) {
	t.Parallel()
	anon := feature.User{}
	user := feature.User{ID: "u", Roles: []string{"User"}, Authenticated: true}
	admin := feature.User{ID: "a", Roles: []string{"Admin", "User"}, Authenticated: true}
	forged := feature.User{Roles: []string{"Admin"}}

	cases := []struct {
		rule  feature.Rule
		str   string
		allow []feature.User
		deny  []feature.User
	}{
		{feature.Rule{}, "none", nil, []feature.User{anon, user, admin}},
		{feature.Anonymous(), "anonymous", []feature.User{anon, user, admin}, nil},
		{feature.AnyUser(), "any-user", []feature.User{user, admin}, []feature.User{anon, forged}},
		{feature.Roles("Admin"), "roles(Admin)", []feature.User{admin}, []feature.User{anon, user, forged}},
		{feature.Roles("Admin", "User"), "roles(Admin,User)", []feature.User{user, admin}, []feature.User{anon}},
		{feature.Roles(), "roles()", nil, []feature.User{user, admin}},
		{feature.Roles(""), "roles()", nil, []feature.User{{Roles: []string{""}, Authenticated: true}}},
		{feature.Deny(), "deny", nil, []feature.User{anon, user, admin}},
	}
	for _, c := range cases {
		require.Equal(t, c.str, c.rule.String())
		for _, u := range c.allow {
			require.True(t, c.rule.Allows(u), "%s should allow %+v", c.rule, u)
		}
		for _, u := range c.deny {
			require.False(t, c.rule.Allows(u), "%s should deny %+v", c.rule, u)
		}
	}
	require.True(t, feature.Rule{}.IsZero())
	require.False(t, feature.Deny().IsZero())
	require.True(t, feature.Deny().IsDeny())
	require.False(t, feature.Roles("Admin").IsDeny())
	require.Empty(t, feature.Roles("Admin").Problem())
	require.Empty(t, feature.Deny().Problem())
	require.Contains(t, feature.Roles().Problem(), "without role names")
	require.Contains(t, feature.Roles("Admin", "").Problem(), "empty role name")

	// Rules own their role list.
	names := []string{"Admin"}
	r := feature.Roles(names...)
	names[0] = "User"
	r.RoleNames()[0] = "User"
	require.Equal(t, []string{"Admin"}, r.RoleNames())
}

func TestHandleCommandWithNilFunctionRecordsNothingCallable(t *testing.T) {
	t.Parallel()
	f := feature.Define("f", func(r *feature.Registrar) {
		feature.HandleCommand[completeTask](r, "a.b", feature.AnyUser(), nil)
		var fn func(feature.CommandContext, completeTask) (any, error)
		r.Command("a.c", completeTask{}, feature.AnyUser(), fn)
	})
	d := f.Spec()
	require.Nil(t, d.Handlers[0].Invoke)
	require.Nil(t, d.Handlers[0].Handler)
	require.Nil(t, d.Handlers[1].Handler, "a typed nil function is recorded as nil")
}

func TestRefuse(t *testing.T) {
	t.Parallel()
	err := feature.Refuse("already_done", "the task is already done")
	var re *feature.RefusedError
	require.True(t, errors.As(err, &re))
	require.Equal(t, "unprocessable", re.Code())
	require.Equal(t, "already_done", re.Reason())
	require.Equal(t, "the task is already done", re.Detail())
	require.Equal(t, "refused: already_done: the task is already done", err.Error())
	require.Equal(t, "refused: x", feature.Refuse("x", "").Error())
}

func TestDeliveryAndStartFromStrings(t *testing.T) {
	t.Parallel()
	require.Equal(t, "shared", feature.Shared.String())
	require.Equal(t, "per-instance", feature.PerInstance.String())
	require.Equal(t, "invalid", feature.Delivery(7).String())
	require.Equal(t, "beginning", feature.FromBeginning.String())
	require.Equal(t, "now", feature.FromNow.String())
	require.Equal(t, "invalid", feature.StartFrom(7).String())
}

func TestTableDef(t *testing.T) {
	t.Parallel()
	td := feature.TableDef{
		Name:       "t",
		Columns:    []feature.Column{{Name: "id", Type: "uuid", NotNull: true}},
		PrimaryKey: []string{"id"},
		Indexes:    []feature.Index{{Columns: []string{"id"}, Unique: true}},
	}
	c := td.Clone()
	c.Columns[0].Name = "x"
	c.PrimaryKey[0] = "x"
	c.Indexes[0].Columns[0] = "x"
	require.Equal(t, "id", td.Columns[0].Name)
	require.Equal(t, "id", td.PrimaryKey[0])
	require.Equal(t, "id", td.Indexes[0].Columns[0])

	col, ok := td.Column("id")
	require.True(t, ok)
	require.True(t, col.NotNull)
	_, ok = td.Column("nope")
	require.False(t, ok)
	require.Nil(t, feature.TableDef{}.Clone().Indexes)
}

func TestDecode(t *testing.T) {
	t.Parallel()
	e := feature.Event{ID: 7, Type: "task.completed", Payload: []byte(`{"by":"ann","extra":1}`)}
	v, err := feature.Decode[taskCompleted](e)
	require.NoError(t, err, "unknown fields are tolerated")
	require.Equal(t, "ann", v.By)

	_, err = feature.Decode[taskCompleted](feature.Event{ID: 8, Type: "task.completed", Payload: []byte(`{"by":1}`)})
	require.Error(t, err)
	require.True(t, strings.HasPrefix(err.Error(), "decode task.completed event 8:"))
}

package pipeline_test

import (
	"cmp"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/kumikotest"
	"github.com/kumiko-go/kumiko/pipeline"
	"github.com/kumiko-go/kumiko/registry"
)

// setSalary is the input of the staff commands that change one field.
type setSalary struct {
	ID      uuid.UUID `json:"id"`
	Version int       `json:"version"`
	Salary  float64   `json:"salary"`
}

// staff has an employee whose salary only HR writes (and reads) and whose
// level only employee.promote sets, with commands that append the entity's
// events themselves.
var staff = feature.Define("staff", func(r *feature.Registrar) {
	r.Entity("employee", feature.Fields{
		"name":   feature.Text(),
		"salary": feature.Number().WriteRoles("HR").ReadRoles("HR"),
		"level":  feature.Number().WriteRoles("nobody").WrittenBy("employee.promote"),
	})
	r.Crud("employee", feature.Access{Write: feature.Roles("User", "HR"), Read: feature.AnyUser()})
	writers := feature.Roles("User", "HR")
	// employee.raise sets the salary through the loaded aggregate.
	feature.HandleCommand(r, "employee.raise", writers, func(ctx feature.CommandContext, in setSalary) (any, error) {
		e, err := ctx.FetchForWriting(in.ID, "employee", in.Version)
		if err != nil {
			return nil, err
		}
		return nil, e.Append("employee.updated", map[string]any{"salary": in.Salary})
	})
	// employee.hire creates an employee with AppendEvent, with a salary
	// when one is given.
	feature.HandleCommand(r, "employee.hire", writers, func(ctx feature.CommandContext, in setSalary) (any, error) {
		payload := map[string]any{"name": "new"}
		if in.Salary != 0 {
			payload["salary"] = in.Salary
		}
		ref, err := ctx.AppendEvent(feature.AppendSpec{AggregateID: in.ID, Type: "employee.created", Payload: payload})
		return ref.AggregateID, err
	})
	// employee.promote sets the level, which names it in WrittenBy.
	feature.HandleCommand(r, "employee.promote", writers, func(ctx feature.CommandContext, in setSalary) (any, error) {
		_, err := ctx.AppendEvent(feature.AppendSpec{AggregateID: in.ID, Type: "employee.updated",
			ExpectedVersion: in.Version, Payload: map[string]any{"level": in.Salary}})
		return nil, err
	})
	// employee.demote sets the level too, but is not named in WrittenBy.
	feature.HandleCommand(r, "employee.demote", writers, func(ctx feature.CommandContext, in setSalary) (any, error) {
		_, err := ctx.AppendEvent(feature.AppendSpec{AggregateID: in.ID, Type: "employee.updated",
			ExpectedVersion: in.Version, Payload: map[string]any{"level": in.Salary}})
		return nil, err
	})
	// employee.try tries the salary with TryAppendEvent, ignores the
	// refusal and renames the employee instead.
	feature.HandleCommand(r, "employee.try", writers, func(ctx feature.CommandContext, in setSalary) (any, error) {
		_, _, _ = ctx.TryAppendEvent(feature.AppendSpec{AggregateID: in.ID, Type: "employee.updated",
			ExpectedVersion: in.Version, Payload: map[string]any{"salary": in.Salary}})
		_, err := ctx.AppendEvent(feature.AppendSpec{AggregateID: in.ID, Type: "employee.updated",
			ExpectedVersion: feature.AnyVersion, Payload: map[string]any{"name": "renamed"}})
		return nil, err
	})
	// payslips copies the salary into a projection, with the field's read
	// rule on its column.
	r.Projection("payslips", feature.InlineProjection{
		Source: "employee",
		Table: feature.TableDef{Name: "payslips", Columns: []feature.Column{
			{Name: "tenant_id", Type: "uuid", NotNull: true},
			{Name: "id", Type: "uuid", NotNull: true},
			{Name: "salary", Type: "numeric", ReadRoles: []string{"HR"}},
		}, PrimaryKey: []string{"id"}},
		Apply: map[string]feature.ProjectionApplyFunc{
			"employee.created": func(ctx feature.ProjectionContext, e feature.Event) error {
				p, err := feature.Decode[struct{ Salary *float64 }](e)
				if err != nil {
					return err
				}
				_, err = ctx.DB().Exec(ctx.Context(), "INSERT INTO "+ctx.Table()+" (tenant_id, id, salary) VALUES ($1, $2, $3)",
					ctx.Tenant(), e.AggregateID, p.Salary)
				return err
			},
		},
	})
	// employee.find reads the entity's table through QueryProjection with
	// the filter the request brings.
	feature.HandleQuery(r, "employee.find", writers, func(ctx feature.CommandContext, in findSecrets) (any, error) {
		f := feature.ProjectionFilter{Where: in.Where, Args: in.Args, OrderBy: in.OrderBy}
		source := cmp.Or(in.Source, "employee")
		rows, err := ctx.QueryProjection(source).Rows(f)
		if err != nil {
			return nil, err
		}
		n, err := ctx.QueryProjection(source).Count(f)
		return map[string]any{"rows": rows, "count": n}, err
	})
})

var (
	clerk = kumikotest.User(tenantA, "clerk", "User")
	hr    = kumikotest.User(tenantA, "hr", "HR")
)

func staffCommand(app *kumikotest.App, c pipeline.Caller, typ string, id uuid.UUID, version int, salary float64) error {
	raw, _ := json.Marshal(setSalary{ID: id, Version: version, Salary: salary})
	_, err := app.Executor.Command(ctx, c, pipeline.Request{Type: typ, Payload: raw})
	return err
}

// employeeRow reads the employee's row as the table holds it.
func employeeRow(t *testing.T, app *kumikotest.App, id uuid.UUID) string {
	t.Helper()
	var out string
	require.NoError(t, app.Pool.QueryRow(ctx,
		`SELECT concat_ws(' ', name, coalesce(salary::text, '-'), coalesce(level::text, '-'), 'v' || version)
		FROM read_employee WHERE id = $1`, id).Scan(&out))
	return out
}

func requireFieldDenied(t *testing.T, err error, field string) {
	t.Helper()
	c, pe := code(t, err)
	require.Equal(t, pipeline.CodeAccessDenied, c)
	require.Equal(t, "field_access", pe.Reason())
	require.Equal(t, field, pe.Details()["field"])
}

// A command that appends the entity's updated event is held to the
// caller's field write rules: without the role nothing is written, with it
// the field changes.
func TestCommandAuthoringChecksFieldWriteRoles(t *testing.T) {
	t.Parallel()
	app := kumikotest.NewApp(t, []*feature.Feature{staff})
	e := write(t, app, hr, "employee.create", `{"name":"ann","salary":100}`)
	id := uuid.MustParse(e["id"].(string))
	before, n := employeeRow(t, app, id), events(t, app)

	requireFieldDenied(t, staffCommand(app, clerk, "employee.raise", id, 1, 1e6), "salary")
	require.Equal(t, n, events(t, app), "no event")
	require.Equal(t, before, employeeRow(t, app, id), "no row change")

	require.NoError(t, staffCommand(app, hr, "employee.raise", id, 1, 200))
	require.Equal(t, "ann 200 - v2", employeeRow(t, app, id))
}

// The created event counts the fields its payload carries: a create
// without the restricted field passes, one with it is refused.
func TestCommandAuthoringChecksCreatedEvents(t *testing.T) {
	t.Parallel()
	app := kumikotest.NewApp(t, []*feature.Feature{staff})
	id := uuid.New()
	requireFieldDenied(t, staffCommand(app, clerk, "employee.hire", id, 1, 50), "salary")
	require.Equal(t, 0, events(t, app))
	require.NoError(t, staffCommand(app, clerk, "employee.hire", id, 1, 0))
	require.Equal(t, "new - - v1", employeeRow(t, app, id))
}

// WrittenBy lets its command set the field whatever the caller's roles;
// another command setting it is refused, and so is a CRUD update.
func TestWrittenByNamesTheCommandsThatSetAField(t *testing.T) {
	t.Parallel()
	app := kumikotest.NewApp(t, []*feature.Feature{staff})
	id := uuid.MustParse(write(t, app, clerk, "employee.create", `{"name":"bo"}`)["id"].(string))

	require.NoError(t, staffCommand(app, clerk, "employee.promote", id, 1, 2))
	require.Equal(t, "bo - 2 v2", employeeRow(t, app, id))

	requireFieldDenied(t, staffCommand(app, hr, "employee.demote", id, 2, 1), "level")
	_, err := app.Executor.Write(ctx, hr, req("employee.update", fmt.Sprintf(`{"id":%q,"version":2,"changes":{"level":1}}`, id)))
	requireFieldDenied(t, err, "level")
	require.Equal(t, "bo - 2 v2", employeeRow(t, app, id))
}

// A handler that swallows the refusal does not commit what else it wrote:
// the refused write fails the command.
func TestRefusedFieldWriteFailsTheCommand(t *testing.T) {
	t.Parallel()
	app := kumikotest.NewApp(t, []*feature.Feature{staff})
	id := uuid.MustParse(write(t, app, clerk, "employee.create", `{"name":"cy"}`)["id"].(string))
	n := events(t, app)
	requireFieldDenied(t, staffCommand(app, clerk, "employee.try", id, 1, 9), "salary")
	require.Equal(t, n, events(t, app))
	require.Equal(t, "cy - - v1", employeeRow(t, app, id))
}

// The system's own code (integration handlers and jobs through RunInTx,
// multi-stream projections) runs without the user's roles and is not held
// to field write rules.
func TestSystemAuthoringIsNotChecked(t *testing.T) {
	t.Parallel()
	app := kumikotest.NewApp(t, []*feature.Feature{staff})
	id := uuid.MustParse(write(t, app, clerk, "employee.create", `{"name":"di"}`)["id"].(string))
	c := pipeline.Caller{User: feature.User{ID: "clerk", TenantID: tenantA, Authenticated: true}}
	tx, err := app.Pool.Begin(ctx)
	require.NoError(t, err)
	err = app.Executor.RunInTx(ctx, tx, c, "staff", "msg-1", func(cc feature.CommandContext) error {
		_, err := cc.AppendEvent(feature.AppendSpec{AggregateID: id, Type: "employee.updated", ExpectedVersion: 1,
			Payload: map[string]any{"salary": 7, "level": 3}})
		return err
	})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	require.Equal(t, "di 7 3 v2", employeeRow(t, app, id))
}

// WrittenBy must name a command of the entity's feature, on a field with
// WriteRoles.
func TestWrittenByNamesACommandOfTheFeature(t *testing.T) {
	t.Parallel()
	f := feature.Define("bad", func(r *feature.Registrar) {
		r.Entity("thing", feature.Fields{"x": feature.Text().WriteRoles("A").WrittenBy("thing.nope")})
	})
	_, err := registry.Build(f)
	require.ErrorContains(t, err, `WrittenBy names "thing.nope", which is not a command of feature "bad"`)

	f = feature.Define("bad", func(r *feature.Registrar) {
		r.Entity("thing", feature.Fields{"x": feature.Text().WrittenBy("thing.set")})
		feature.HandleCommand(r, "thing.set", feature.AnyUser(), func(feature.CommandContext, struct{}) (any, error) { return nil, nil })
	})
	_, err = registry.Build(f)
	require.ErrorContains(t, err, "WrittenBy without WriteRoles changes nothing")
}

// Reading an entity's table through QueryProjection applies the fields'
// read rules like detail and list: the caller without the role gets rows
// without the field and cannot filter or sort by it; the caller with it
// gets the whole row.
func TestQueryProjectionHidesUnreadableFields(t *testing.T) {
	t.Parallel()
	app := kumikotest.NewApp(t, []*feature.Feature{staff})
	write(t, app, hr, "employee.create", `{"name":"ann","salary":100}`)
	find := func(c pipeline.Caller, in findSecrets) (map[string]any, error) {
		out, err := app.Executor.Query(ctx, c, req("employee.find", mustJSON(t, in)))
		if err != nil {
			return nil, err
		}
		return row(t, out), nil
	}

	res, err := find(clerk, findSecrets{})
	require.NoError(t, err)
	got := res["rows"].([]any)[0].(map[string]any)
	require.Equal(t, "ann", got["name"])
	require.NotContains(t, got, "salary")

	_, err = find(clerk, findSecrets{Where: "salary > 50"})
	require.Error(t, err, "no filtering by a field the caller may not read")
	_, err = find(clerk, findSecrets{OrderBy: "salary"})
	require.ErrorContains(t, err, `"salary" is not a column`)

	res, err = find(hr, findSecrets{Where: "salary > 50", OrderBy: "salary"})
	require.NoError(t, err)
	require.Equal(t, float64(100), res["rows"].([]any)[0].(map[string]any)["salary"])
	require.Equal(t, float64(1), res["count"])
}

// A projection column with ReadRoles is left out of the rows a caller
// without the role reads through QueryProjection, and is no column to
// filter or sort by for it.
func TestQueryProjectionHidesRestrictedColumns(t *testing.T) {
	t.Parallel()
	app := kumikotest.NewApp(t, []*feature.Feature{staff})
	write(t, app, hr, "employee.create", `{"name":"ann","salary":100}`)
	find := func(c pipeline.Caller, in findSecrets) (map[string]any, error) {
		in.Source = "payslips"
		out, err := app.Executor.Query(ctx, c, req("employee.find", mustJSON(t, in)))
		if err != nil {
			return nil, err
		}
		return row(t, out), nil
	}
	res, err := find(clerk, findSecrets{})
	require.NoError(t, err)
	got := res["rows"].([]any)[0].(map[string]any)
	require.Contains(t, got, "id")
	require.NotContains(t, got, "salary")
	_, err = find(clerk, findSecrets{Where: "salary > 50"})
	require.Error(t, err)
	_, err = find(clerk, findSecrets{OrderBy: "salary"})
	require.ErrorContains(t, err, `"salary" is not a column`)

	res, err = find(hr, findSecrets{Where: "salary > 50", OrderBy: "salary"})
	require.NoError(t, err)
	require.Equal(t, float64(100), res["rows"].([]any)[0].(map[string]any)["salary"])
}

// ReadRoles may not hide a row's key.
func TestColumnReadRolesNotOnKeys(t *testing.T) {
	t.Parallel()
	for _, col := range []string{"tenant_id", "id"} {
		f := feature.Define("bad", func(r *feature.Registrar) {
			r.Entity("thing", feature.Fields{"x": feature.Text()})
			cols := []feature.Column{{Name: "tenant_id", Type: "uuid", NotNull: true}, {Name: "id", Type: "uuid", NotNull: true}}
			for i := range cols {
				if cols[i].Name == col {
					cols[i].ReadRoles = []string{"A"}
				}
			}
			r.Projection("things", feature.InlineProjection{Source: "thing",
				Table: feature.TableDef{Name: "things", Columns: cols, PrimaryKey: []string{"id"}},
				Apply: map[string]feature.ProjectionApplyFunc{"thing.created": func(feature.ProjectionContext, feature.Event) error { return nil }}})
		})
		_, err := registry.Build(f)
		require.ErrorContains(t, err, fmt.Sprintf("column %q is part of every row's key and cannot have ReadRoles", col))
	}
}

package pipeline_test

import (
	"encoding/json"
	"maps"
	"math"
	"slices"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/kumikotest"
)

// findSecrets is the input of vault.find: a filter the handler passes on as
// it comes, like an author who built Where from user input.
type findSecrets struct {
	Source  string `json:"source"`
	Where   string `json:"where"`
	Args    []any  `json:"args"`
	OrderBy string `json:"orderBy"`
}

type secretAt struct {
	ID      uuid.UUID `json:"id"`
	Version int       `json:"version"`
}

// vault keeps one secret per row, in an entity table and an inline
// projection, and reads both through QueryProjection with whatever filter a
// request brings.
var vault = feature.Define("vault", func(r *feature.Registrar) {
	r.Entity("secret", feature.Fields{"body": feature.Text()})
	r.Crud("secret", feature.Access{Write: feature.Roles("User"), Read: feature.AnyUser()})
	r.Projection("secrets", feature.InlineProjection{
		Source: "secret",
		Table: feature.TableDef{Name: "secrets", Columns: []feature.Column{
			{Name: "tenant_id", Type: "uuid", NotNull: true},
			{Name: "id", Type: "uuid", NotNull: true},
			{Name: "body", Type: "text"},
		}, PrimaryKey: []string{"id"}},
		Apply: map[string]feature.ProjectionApplyFunc{
			"secret.created": func(ctx feature.ProjectionContext, e feature.Event) error {
				p, err := feature.Decode[struct{ Body string }](e)
				if err != nil {
					return err
				}
				_, err = ctx.DB().Exec(ctx.Context(), "INSERT INTO "+ctx.Table()+" (tenant_id, id, body) VALUES ($1, $2, $3)",
					ctx.Tenant(), e.AggregateID, p.Body)
				return err
			},
		},
	})
	feature.HandleQuery(r, "vault.find", feature.AnyUser(), func(ctx feature.CommandContext, in findSecrets) (any, error) {
		q := ctx.QueryProjection(in.Source)
		f := feature.ProjectionFilter{Where: in.Where, Args: in.Args, OrderBy: in.OrderBy}
		rows, err := q.Rows(f)
		if err != nil {
			return nil, err
		}
		n, err := q.Count(f)
		if err != nil {
			return nil, err
		}
		return map[string]any{"rows": rows, "count": n}, nil
	})
	feature.HandleQuery(r, "vault.at", feature.AnyUser(), func(ctx feature.CommandContext, in secretAt) (any, error) {
		s, err := ctx.LoadAggregate(in.ID, "secret", feature.LoadOptions{Version: in.Version})
		if err != nil {
			return nil, err
		}
		return s.Version(), nil
	})
})

// A Where or OrderBy can never read another tenant's rows: hostile ones are
// refused naming the projection, and what is let through only narrows the
// caller's own rows.
func TestQueryProjectionCannotEscapeTheTenant(t *testing.T) {
	t.Parallel()
	app := kumikotest.NewApp(t, []*feature.Feature{vault})
	for _, body := range []string{"a-1", "a-2)"} {
		write(t, app, alice, "secret.create", `{"body":"`+body+`"}`)
	}
	write(t, app, bob, "secret.create", `{"body":"b-secret"}`)

	for _, c := range []struct {
		name, where, orderBy string
		refused              bool
	}{
		{name: "closing the condition early", where: "true) OR (true", refused: true},
		{name: "a union", where: "true) UNION SELECT * FROM secrets WHERE (true", refused: true},
		{name: "a union inside parentheses", where: "(true) UNION (SELECT * FROM secrets)", refused: true},
		{name: "a line comment", where: "true) OR true --", refused: true},
		{name: "a block comment", where: "false /* ) OR (true */", refused: true},
		{name: "a second statement", where: "true; DELETE FROM secrets", refused: true},
		{name: "a dollar quote", where: "$$ ) OR (true $$ = body", refused: true},
		{name: "a tagged dollar quote", where: "$q$x$q$ = body", refused: true},
		{name: "an unclosed quote", where: "body = 'x", refused: true},
		{name: "an unclosed parenthesis", where: "(true", refused: true},
		{name: "a subquery on the same table", where: "EXISTS (SELECT 1 FROM secrets s WHERE s.body = 'b-secret')", refused: true},
		{name: "a TABLE subquery", where: "(id, tenant_id, body) IN (TABLE secrets)", refused: true},
		{name: "a subquery in upper case", where: "body IN (SeLeCt body FROM secrets)", refused: true},
		{name: "SQL run from text", where: "query_to_xml('select * from secrets', true, false, '') IS NOT NULL", refused: true},
		{name: "a table read by name", where: "table_to_xml('secrets', true, false, '') IS NOT NULL", refused: true},
		{name: "an escaped quote that hides a parenthesis", where: `body = E'\') OR (true' OR body IS NOT NULL`},
		{name: "a doubled quote that hides a parenthesis", where: "body = 'x'') OR (true' OR body IS NOT NULL"},
		{name: "a parenthesis in a string", where: "body = ')' OR true"},
		{name: "a quoted identifier that says select", where: `"body" IS NOT NULL AND body <> 'select'`},
		{name: "always true", where: "true OR tenant_id <> tenant_id"},
		{name: "a placeholder beyond the args", where: "tenant_id = $1 OR true"},
		{name: "order by an injection", orderBy: "body; DROP TABLE secrets", refused: true},
		{name: "order by a subquery", orderBy: "(SELECT 1)", refused: true},
		{name: "order by a union", orderBy: "body) UNION SELECT * FROM secrets --", refused: true},
		{name: "order by an expression", orderBy: "lower(body)", refused: true},
		{name: "order by a position", orderBy: "1", refused: true},
		{name: "order by an undeclared column", orderBy: "ctid", refused: true},
		{name: "order by half a NULLS", orderBy: "body NULLS", refused: true},
		{name: "order by two directions", orderBy: "body ASC DESC", refused: true},
		{name: "order by an empty item", orderBy: "body,", refused: true},
		{name: "order by declared columns", orderBy: `body DESC NULLS LAST, "id" asc`},
	} {
		for _, source := range []string{"secrets", "secret"} {
			t.Run(c.name+"/"+source, func(t *testing.T) {
				in := findSecrets{Source: source, Where: c.where, OrderBy: c.orderBy}
				if c.name == "a placeholder beyond the args" {
					in.Args = []any{tenantB.String()}
				}
				out, err := app.Executor.Query(ctx, alice, req("vault.find", mustJSON(t, in)))
				if c.refused {
					require.ErrorContains(t, err, "projection "+source+": ")
					return
				}
				require.NoError(t, err)
				res := row(t, out)
				rows, _ := res["rows"].([]any)
				require.NotEmpty(t, rows, "the legitimate filter still reads")
				require.LessOrEqual(t, len(rows), 2)
				require.LessOrEqual(t, res["count"], float64(2))
				for _, r := range rows {
					require.Contains(t, []any{"a-1", "a-2)"}, r.(map[string]any)["body"], "only the caller's rows")
				}
			})
		}
	}

	// Values still travel as Args, and legitimate orderings work.
	out, err := app.Executor.Query(ctx, alice, req("vault.find", mustJSON(t, findSecrets{
		Source: "secrets", Where: "body = $1 OR body = $2", Args: []any{"a-2)", "b-secret"}, OrderBy: "body DESC",
	})))
	require.NoError(t, err)
	res := row(t, out)
	require.Len(t, res["rows"], 1)
	require.Equal(t, "a-2)", res["rows"].([]any)[0].(map[string]any)["body"])
}

// Projection rows come back as a client should see them: JSON names in
// camelCase, without the tenant column, whether the table is an entity's or
// a projection's.
func TestQueryProjectionRowsAreCamelCase(t *testing.T) {
	t.Parallel()
	app := kumikotest.NewApp(t, []*feature.Feature{vault})
	s := write(t, app, alice, "secret.create", `{"body":"x"}`)
	for source, want := range map[string][]string{
		"secret":  {"id", "version", "body", "createdAt", "updatedAt"},
		"secrets": {"id", "body"},
	} {
		out, err := app.Executor.Query(ctx, alice, req("vault.find", mustJSON(t, findSecrets{Source: source})))
		require.NoError(t, err)
		rows := row(t, out)["rows"].([]any)
		require.Len(t, rows, 1, source)
		got := rows[0].(map[string]any)
		require.ElementsMatch(t, want, slices.Collect(maps.Keys(got)), source)
		require.Equal(t, s["id"], got["id"])
	}
}

// A version past the integer column loads the whole stream instead of
// failing in SQL.
func TestLoadAggregateVersionPastTheColumn(t *testing.T) {
	t.Parallel()
	app := kumikotest.NewApp(t, []*feature.Feature{vault})
	s := write(t, app, alice, "secret.create", `{"body":"x"}`)
	for _, v := range []int{math.MaxInt32 + 1, math.MaxInt64} {
		out, err := app.Executor.Query(ctx, alice, req("vault.at", mustJSON(t, secretAt{ID: uuid.MustParse(s["id"].(string)), Version: v})))
		require.NoError(t, err, v)
		require.Equal(t, 1, out)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	raw, err := json.Marshal(v)
	require.NoError(t, err)
	return string(raw)
}

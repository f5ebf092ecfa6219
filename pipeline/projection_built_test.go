package pipeline_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/consumer"
	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/kumikotest"
	"github.com/kumiko-go/kumiko/pipeline"
)

// noteCount is the input of note.count: which projection to count.
type noteCount struct {
	Source string `json:"source"`
}

// jotter keeps a row per note in an inline projection, and counts its rows
// through QueryProjection.
var jotter = feature.Define("jotter", func(r *feature.Registrar) {
	r.Entity("note", feature.Fields{"text": feature.Text()})
	r.Crud("note", feature.Access{Write: feature.AnyUser(), Read: feature.AnyUser()})
	r.Projection("note_rows", feature.InlineProjection{
		Source: "note",
		Table: feature.TableDef{Name: "note_rows", Columns: []feature.Column{
			{Name: "tenant_id", Type: "uuid", NotNull: true},
			{Name: "id", Type: "uuid", NotNull: true},
		}, PrimaryKey: []string{"id"}},
		Apply: map[string]feature.ProjectionApplyFunc{
			"note.created": func(ctx feature.ProjectionContext, e feature.Event) error {
				_, err := ctx.DB().Exec(ctx.Context(), "INSERT INTO "+ctx.Table()+" (tenant_id, id) VALUES ($1, $2)", ctx.Tenant(), e.AggregateID)
				return err
			},
		},
	})
	r.MultiStreamProjection(feature.MultiStreamProjection{
		Name: "note_feed", BatchSize: 1,
		Table: &feature.TableDef{Name: "note_feed", Columns: []feature.Column{
			{Name: "tenant_id", Type: "uuid", NotNull: true},
			{Name: "id", Type: "uuid", NotNull: true},
		}, PrimaryKey: []string{"id"}},
		Apply: map[string]feature.ApplyFunc{
			"note.created": func(ctx feature.ApplyContext, e feature.Event) error {
				_, err := ctx.DB().Exec(ctx.Context(), "INSERT INTO "+ctx.Table()+" (tenant_id, id) VALUES ($1, $2)", e.TenantID, e.AggregateID)
				return err
			},
		},
	})
	feature.HandleQuery(r, "note.count", feature.AnyUser(), func(ctx feature.CommandContext, in noteCount) (any, error) {
		return ctx.QueryProjection(in.Source).Count(feature.ProjectionFilter{})
	})
})

// countNotes counts note_rows (or source) as alice; it returns the error
// code on failure.
func countNotes(t *testing.T, app *kumikotest.App, source ...string) (float64, string) {
	t.Helper()
	src := "note_rows"
	if len(source) > 0 {
		src = source[0]
	}
	out, err := app.Executor.Query(ctx, alice, req("note.count", fmt.Sprintf(`{"source":%q}`, src)))
	if err != nil {
		c, _ := code(t, err)
		return 0, c
	}
	return row(t, map[string]any{"n": out})["n"].(float64), ""
}

// A projection table created after its events (here: dropped and created
// again, as for a projection added to an app with history) answers
// projection_rebuild_in_progress until a rebuild has filled it, also while
// the rebuild runs; then it answers every row. A later rebuild, which swaps
// a shadow table in, keeps serving the complete table.
func TestQueryOfATableBeingBuiltAnswersRebuildInProgress(t *testing.T) {
	t.Parallel()
	app := kumikotest.NewApp(t, []*feature.Feature{jotter})
	for i := range 5 {
		write(t, app, alice, "note.create", fmt.Sprintf(`{"text":"n%d"}`, i))
	}
	app.Exec(t, "DROP TABLE note_rows")
	require.NoError(t, app.Executor.EnsureSchema(ctx))
	_, c := countNotes(t, app)
	require.Equal(t, pipeline.CodeProjectionRebuilding, c)

	// Hold each rebuild after its first batch and query meanwhile.
	rebuildHeld := func(check func()) {
		var (
			once    sync.Once
			reached = make(chan struct{})
			release = make(chan struct{})
			done    = make(chan error, 1)
		)
		go func() {
			_, err := app.Executor.RebuildProjection(ctx, "note_rows", pipeline.RebuildOptions{BatchSize: 2,
				Progress: func(int64, int64) {
					once.Do(func() { close(reached); <-release })
				}})
			done <- err
		}()
		<-reached
		check()
		close(release)
		require.NoError(t, <-done)
	}
	rebuildHeld(func() {
		_, c := countNotes(t, app)
		require.Equal(t, pipeline.CodeProjectionRebuilding, c, "the live table is still incomplete")
	})
	n, c := countNotes(t, app)
	require.Empty(t, c)
	require.Equal(t, float64(5), n)

	write(t, app, alice, "note.create", `{"text":"n5"}`)
	rebuildHeld(func() {
		n, c := countNotes(t, app)
		require.Empty(t, c, "a rebuild of a complete table serves it")
		require.Equal(t, float64(6), n)
	})
}

// A table created with no events to apply is complete at once.
func TestQueryOfANewTableWithoutHistoryAnswers(t *testing.T) {
	t.Parallel()
	app := kumikotest.NewApp(t, []*feature.Feature{jotter})
	n, c := countNotes(t, app)
	require.Empty(t, c)
	require.Zero(t, n)
}

// A multi-stream projection reading from the beginning whose table is
// created after its events answers projection_rebuild_in_progress while
// its consumer catches up, and every row once it has passed them.
func TestQueryOfAMultiStreamProjectionCatchingUp(t *testing.T) {
	t.Parallel()
	app := kumikotest.NewApp(t, []*feature.Feature{jotter})
	for i := range 3 {
		write(t, app, alice, "note.create", fmt.Sprintf(`{"text":"n%d"}`, i))
	}
	app.Exec(t, "DROP TABLE note_feed")
	require.NoError(t, app.Executor.EnsureSchema(ctx))
	d, err := consumer.New(app.Store, consumer.Config{InstanceID: "t"}, app.Executor.Consumers()...)
	require.NoError(t, err)
	require.NoError(t, d.Register(ctx))

	_, c := countNotes(t, app, "note_feed")
	require.Equal(t, pipeline.CodeProjectionRebuilding, c)
	res, err := d.RunPass(ctx, "note_feed") // one event of three
	require.NoError(t, err)
	require.True(t, res.More)
	_, c = countNotes(t, app, "note_feed")
	require.Equal(t, pipeline.CodeProjectionRebuilding, c, "mid-way")

	kumikotest.CatchUp(t, d, "note_feed")
	n, c := countNotes(t, app, "note_feed")
	require.Empty(t, c)
	require.Equal(t, float64(3), n)
}

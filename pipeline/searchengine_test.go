package pipeline_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/kumikotest"
	"github.com/kumiko-go/kumiko/pipeline"
	"github.com/kumiko-go/kumiko/registry"
	ksearch "github.com/kumiko-go/kumiko/search"
	"github.com/kumiko-go/kumiko/search/pgsearch"
)

// memos searches memos on the engine "docs": title (A), body (B, readable
// by staff only), the author's name (C, personal data).
func memos(weights feature.SearchFields) *feature.Feature {
	return feature.Define("memos", func(r *feature.Registrar) {
		r.Entity("memo", feature.Fields{
			"title":  feature.Text().Required(),
			"body":   feature.Text().ReadRoles("Staff"),
			"author": feature.Text().Personal(),
			"status": feature.Enum("draft", "sent").Default("draft"),
		}, feature.SoftDelete())
		r.Crud("memo", feature.Access{Write: feature.AnyUser(), Read: feature.AnyUser()})
		r.Search("memo", weights, feature.SearchEngine("docs"))
	})
}

var memoWeights = feature.SearchFields{"title": feature.WeightA, "body": feature.WeightB, "author": feature.WeightC}

// newEngine is a reference engine in a database of its own.
func newEngine(t *testing.T) ksearch.Engine {
	t.Helper()
	db := kumikotest.NewDB(t)
	e, err := pgsearch.New(db.Pool, db.Schema)
	require.NoError(t, err)
	return e
}

func memoTitles(t *testing.T, app *kumikotest.App, c pipeline.Caller, payload string) ([]string, searchPage) {
	t.Helper()
	out, err := app.Executor.Query(ctx, c, req("memo.search", payload))
	require.NoError(t, err, payload)
	raw, err := json.Marshal(out)
	require.NoError(t, err)
	var p searchPage
	require.NoError(t, json.Unmarshal(raw, &p), "%s", raw)
	titles := []string{}
	for _, h := range p.Hits {
		titles = append(titles, h.Row["title"].(string))
	}
	return titles, p
}

func TestSearchOnAnEngineIsFedByItsConsumer(t *testing.T) {
	t.Parallel()
	engine := newEngine(t)
	app := kumikotest.NewApp(t, []*feature.Feature{memos(memoWeights)},
		kumikotest.ExecutorConfig(pipeline.Config{SearchEngines: map[string]ksearch.Engine{"docs": engine}}))
	staff := kumikotest.User(tenantA, "staff", "User", "Staff")

	byTitle := write(t, app, alice, "memo.create", `{"title":"Invoice overdue","body":"call the customer"}`)
	write(t, app, alice, "memo.create", `{"title":"Lunch","body":"the invoice is attached","status":"sent"}`)
	write(t, app, alice, "memo.create", `{"title":"Harbour","author":"Ada Lovelace"}`)
	write(t, app, bob, "memo.create", `{"title":"Invoice of another tenant"}`)

	titles, _ := memoTitles(t, app, staff, `{"q":"invoice"}`)
	require.Empty(t, titles, "the engine hears of rows from the consumer, after the commit")
	app.CatchUpAll(t)

	titles, p := memoTitles(t, app, staff, `{"q":"inv"}`)
	require.Equal(t, []string{"Invoice overdue", "Lunch"}, titles, "a title hit ranks above a body hit; the other tenant's never")
	require.Equal(t, "<mark>Invoice</mark> overdue", p.Hits[0].Highlights["title"])
	require.Equal(t, "the <mark>invoice</mark> is attached", p.Hits[1].Highlights["body"])
	titles, p = memoTitles(t, app, alice, `{"q":"invoice"}`)
	require.Equal(t, []string{"Invoice overdue"}, titles, "a field the caller may not read does not match")
	require.NotContains(t, p.Hits[0].Row, "body", "nor show")
	titles, _ = memoTitles(t, app, staff, `{"q":"invocie"}`)
	require.Equal(t, []string{"Invoice overdue", "Lunch"}, titles, "with a typo")
	titles, _ = memoTitles(t, app, staff, `{"q":"invoice","filter":{"status":"sent"}}`)
	require.Equal(t, []string{"Lunch"}, titles)

	titles, p = memoTitles(t, app, staff, `{"q":"invoice","limit":1}`)
	require.Equal(t, []string{"Invoice overdue"}, titles)
	require.NotEmpty(t, p.NextCursor)
	titles, p = memoTitles(t, app, staff, `{"q":"invoice","limit":1,"cursor":"`+p.NextCursor+`"}`)
	require.Equal(t, []string{"Lunch"}, titles)
	require.Empty(t, p.NextCursor)
	_, err := app.Executor.Query(ctx, staff, req("memo.search", `{"q":"lunch","cursor":"bm90IGEgY3Vyc29y"}`))
	c, pe := code(t, err)
	require.Equal(t, pipeline.CodeValidation, c)
	require.Equal(t, "invalid_cursor", pe.Reason())

	// An update changes what matches, a delete removes the row.
	write(t, app, alice, "memo.update", `{"id":"`+byTitle["id"].(string)+`","version":1,"changes":{"title":"Paid"}}`)
	write(t, app, alice, "memo.delete", `{"id":"`+byTitle["id"].(string)+`","version":2}`)
	app.CatchUpAll(t)
	titles, _ = memoTitles(t, app, staff, `{"q":"invoice"}`)
	require.Equal(t, []string{"Lunch"}, titles)
	titles, _ = memoTitles(t, app, staff, `{"q":"paid"}`)
	require.Empty(t, titles, "a deleted row is not found")

	// A forgotten subject's values leave the engine.
	titles, _ = memoTitles(t, app, staff, `{"q":"lovelace"}`)
	require.Equal(t, []string{"Harbour"}, titles)
	page, err := engine.Search(ctx, "memo", ksearch.Query{Tenant: tenantA, Text: "lovelace", Fields: []string{"author"}, Limit: 10})
	require.NoError(t, err)
	require.Len(t, page.Hits, 1)
	harbour := page.Hits[0].ID
	require.NoError(t, app.Executor.ForgetSubject(ctx, tenantA, harbour))
	app.CatchUpAll(t)
	page, err = engine.Search(ctx, "memo", ksearch.Query{Tenant: tenantA, Text: "lovelace", Fields: []string{"author"}, Limit: 10})
	require.NoError(t, err)
	require.Empty(t, page.Hits, "the engine no longer holds the forgotten name")
	titles, _ = memoTitles(t, app, staff, `{"q":"harbour"}`)
	require.Equal(t, []string{"Harbour"}, titles, "the row is still found by what is not personal")
}

func TestSearchOnAnEngineReindexesAChangedDeclaration(t *testing.T) {
	t.Parallel()
	engine := newEngine(t)
	cfg := kumikotest.ExecutorConfig(pipeline.Config{SearchEngines: map[string]ksearch.Engine{"docs": engine}})
	app := kumikotest.NewApp(t, []*feature.Feature{memos(memoWeights)}, cfg)
	staff := kumikotest.User(tenantA, "staff", "User", "Staff")
	write(t, app, alice, "memo.create", `{"title":"Quarterly report","body":"numbers"}`)
	write(t, app, alice, "memo.create", `{"title":"Numbers","body":"quarterly"}`)
	app.CatchUpAll(t)
	titles, _ := memoTitles(t, app, staff, `{"q":"quarterly"}`)
	require.Equal(t, []string{"Quarterly report", "Numbers"}, titles)

	// The next start declares body above title: the engine's index is new
	// and empty, and its consumer starts again from the beginning.
	reg, err := registry.Build(memos(feature.SearchFields{"title": feature.WeightC, "body": feature.WeightA}))
	require.NoError(t, err)
	next, err := pipeline.New(reg, app.Store, pipeline.Config{SearchEngines: map[string]ksearch.Engine{"docs": engine}})
	require.NoError(t, err)
	require.NoError(t, next.EnsureSchema(ctx))
	out, err := next.Query(ctx, staff, req("memo.search", `{"q":"quarterly"}`))
	require.NoError(t, err)
	raw, err := json.Marshal(out)
	require.NoError(t, err)
	require.JSONEq(t, `{"hits":[],"nextCursor":""}`, string(raw), "the new index is empty until the consumer has passed again")
	app.CatchUpAll(t) // the same consumer name, reset to the beginning
	titles, _ = memoTitles(t, app, staff, `{"q":"quarterly"}`)
	require.Equal(t, []string{"Numbers", "Quarterly report"}, titles, "body now ranks above title")
}

func TestSearchOnAnEngineTheConfigurationLacksFailsTheStart(t *testing.T) {
	t.Parallel()
	reg, err := registry.Build(memos(memoWeights))
	require.NoError(t, err)
	db := kumikotest.NewDB(t)
	_, err = pipeline.New(reg, db.Store, pipeline.Config{})
	require.ErrorContains(t, err, `search of memo runs on the search engine "docs", which the configuration does not register`)
}

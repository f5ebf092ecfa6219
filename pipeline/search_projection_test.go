package pipeline_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/kumikotest"
	"github.com/kumiko-go/kumiko/kumikotype"
	"github.com/kumiko-go/kumiko/pipeline"
	"github.com/kumiko-go/kumiko/registry"
)

// cardTable is what an inline projection's and a multi-stream
// projection's apply contexts share: where a card's row goes.
type cardTable interface {
	Context() context.Context
	DB() feature.DB
	Tenant() uuid.UUID
	Table() string
}

// cardFields are the fields of a card's created and updated events; nil
// is a field an update leaves.
type cardFields struct {
	Title    *string `json:"title"`
	Summary  *string `json:"summary"`
	LeadNote *string `json:"leadNote"`
	Lane     *string `json:"lane"`
}

// applyCard keeps a card's row in the table of c: a row per card, with a
// count of its edits.
func applyCard(c cardTable, e feature.Event) error {
	ctx, db, table := c.Context(), c.DB(), c.Table()
	if e.Type == "card.deleted" {
		_, err := db.Exec(ctx, "DELETE FROM "+table+" WHERE tenant_id = $1 AND card_id = $2", c.Tenant(), e.AggregateID)
		return err
	}
	f, err := feature.Decode[cardFields](e)
	if err != nil {
		return err
	}
	if e.Type == "card.created" {
		_, err = db.Exec(ctx, "INSERT INTO "+table+` (tenant_id, card_id, title, summary, lead_note, lane, edits)
			VALUES ($1, $2, $3, $4, $5, $6, 0)`, c.Tenant(), e.AggregateID, f.Title, f.Summary, f.LeadNote, f.Lane)
		return err
	}
	_, err = db.Exec(ctx, "UPDATE "+table+` SET title = coalesce($3, title), summary = coalesce($4, summary),
		lead_note = coalesce($5, lead_note), lane = coalesce($6, lane), edits = edits + 1
		WHERE tenant_id = $1 AND card_id = $2`, c.Tenant(), e.AggregateID, f.Title, f.Summary, f.LeadNote, f.Lane)
	return err
}

// cardColumns are the columns of the card tables; lead_note is the leads'.
func cardColumns() []feature.Column {
	return []feature.Column{
		{Name: "tenant_id", Type: "uuid", NotNull: true},
		{Name: "card_id", Type: "uuid", NotNull: true},
		{Name: "title", Type: "text"},
		{Name: "summary", Type: "text"},
		{Name: "lead_note", Type: "text", ReadRoles: []string{"Lead"}},
		{Name: "lane", Type: "text"},
		{Name: "edits", Type: "integer", NotNull: true},
	}
}

// planning declares cards and three searches of them: the entity's read
// table, an inline projection's table (card_board, kept in the write
// transaction) and a multi-stream projection's (card_wall, kept by its
// consumer). weights are the title's and the summary's in the projections.
func planning(title, summary feature.Weight) *feature.Feature {
	return feature.Define("planning", func(r *feature.Registrar) {
		r.Entity("card", feature.Fields{
			"title":    feature.Text().Required(),
			"summary":  feature.Text(),
			"leadNote": feature.Text().ReadRoles("Lead"),
			"lane":     feature.Enum("todo", "done").Default("todo"),
		})
		r.Crud("card", feature.Access{Write: feature.AnyUser(), Read: feature.AnyUser()})
		r.Search("card", feature.SearchFields{"title": feature.WeightA, "summary": feature.WeightB, "leadNote": feature.WeightC},
			feature.SearchConfig("english"))

		r.Projection("card_board", feature.InlineProjection{
			Source: "card",
			Table:  feature.TableDef{Name: "card_board", Columns: cardColumns(), PrimaryKey: []string{"tenant_id", "card_id"}},
			Apply: map[string]feature.ProjectionApplyFunc{
				"card.created": func(ctx feature.ProjectionContext, e feature.Event) error { return applyCard(ctx, e) },
				"card.updated": func(ctx feature.ProjectionContext, e feature.Event) error { return applyCard(ctx, e) },
				"card.deleted": func(ctx feature.ProjectionContext, e feature.Event) error { return applyCard(ctx, e) },
			},
			Read: feature.AnyUser(),
		})
		r.Search("card_board", feature.SearchFields{"title": title, "summary": summary, "lead_note": feature.WeightC},
			feature.SearchConfig("english"))

		r.MultiStreamProjection(feature.MultiStreamProjection{
			Name:  "card_wall",
			Table: &feature.TableDef{Name: "card_wall", Columns: cardColumns(), PrimaryKey: []string{"card_id"}},
			Apply: map[string]feature.ApplyFunc{
				"card.created": func(ctx feature.ApplyContext, e feature.Event) error { return applyCard(ctx, e) },
				"card.updated": func(ctx feature.ApplyContext, e feature.Event) error { return applyCard(ctx, e) },
				"card.deleted": func(ctx feature.ApplyContext, e feature.Event) error { return applyCard(ctx, e) },
			},
		})
		r.Search("card_wall", feature.SearchFields{"title": title, "summary": summary, "lead_note": feature.WeightC},
			feature.SearchConfig("english"), feature.SearchAccess(feature.AnyUser()))

		feature.HandleQuery(r, "planning.rows", feature.AnyUser(), func(ctx feature.CommandContext, in noteCount) (any, error) {
			return ctx.QueryProjection(in.Source).Rows(feature.ProjectionFilter{})
		})
	})
}

var (
	lead   = kumikotest.User(tenantA, "lead", "User", "Lead")
	member = kumikotest.User(tenantA, "member", "User")
)

func card(t *testing.T, app *kumikotest.App, c pipeline.Caller, title, summary, leadNote string) string {
	t.Helper()
	raw, err := json.Marshal(map[string]any{"title": title, "summary": summary, "leadNote": leadNote})
	require.NoError(t, err)
	return write(t, app, c, "card.create", string(raw))["id"].(string)
}

// A projection's table is searched like an entity's: a title hit ranks
// above a summary hit, prefixes and one typo match, matches are
// highlighted, filters and keyset pages (by a key of two columns) hold,
// another tenant's rows never match, and a hit's row is the table's row as
// QueryProjection answers it — which, like an entity's, holds none of the
// search's own columns.
func TestSearchOfAProjectionFindsRanksAndHighlights(t *testing.T) {
	t.Parallel()
	app := kumikotest.NewApp(t, []*feature.Feature{planning(feature.WeightA, feature.WeightB)})
	inTitle := card(t, app, lead, "Invoice 5 < 7 & overdue <script>", "customer called twice", "")
	inSummary := card(t, app, lead, "Printer jammed", "asked about the invoice again", "")
	card(t, app, lead, "Lunch order", "nothing to see", "")
	card(t, app, kumikotest.User(tenantB, "other", "User", "Lead"), "Invoice of tenant B", "invoice", "invoice")
	find := func(payload string) searchPage { return searchOn(t, app.Executor, lead, "card_board.search", payload) }

	p := find(`{"q":"invoice"}`)
	require.Equal(t, []string{"Invoice 5 < 7 & overdue <script>", "Printer jammed"}, p.titles(), "the title hit first; tenant B's never")
	require.Greater(t, p.Hits[0].Rank, p.Hits[1].Rank)
	require.Equal(t, map[string]string{"title": "<mark>Invoice</mark> 5 &lt; 7 &amp; overdue"}, p.Hits[0].Highlights, "escaped; markup left out")
	require.Equal(t, map[string]string{"summary": "asked about the <mark>invoice</mark> again"}, p.Hits[1].Highlights)
	require.Equal(t, map[string]any{"cardId": inTitle, "title": "Invoice 5 < 7 & overdue <script>", "summary": "customer called twice",
		"leadNote": "", "lane": "todo", "edits": float64(0)}, p.Hits[0].Row, "the row by JSON names, without tenant_id")
	require.Equal(t, inSummary, p.Hits[1].Row["cardId"])

	require.Equal(t, []string{"Invoice 5 < 7 & overdue <script>", "Printer jammed"}, find(`{"q":"INV"}`).titles(), "a prefix")
	require.Equal(t, []string{"Invoice 5 < 7 & overdue <script>", "Printer jammed"}, find(`{"q":"invocie"}`).titles(), "one typo")
	require.Equal(t, []string{"Invoice 5 < 7 & overdue <script>"}, find(`{"q":"invoices overdue"}`).titles(), "every word, stemmed")
	require.Empty(t, find(`{"q":"zebra"}`).Hits)

	// Filters by the columns' JSON names, of text and of numbers.
	write(t, app, lead, "card.update", fmt.Sprintf(`{"id":%q,"version":1,"changes":{"lane":"done"}}`, inSummary))
	require.Equal(t, []string{"Printer jammed"}, find(`{"q":"invoice","filter":{"lane":"done"}}`).titles())
	require.Equal(t, []string{"Printer jammed"}, find(`{"q":"invoice","filter":{"edits":1}}`).titles())
	require.Equal(t, []string{"Invoice 5 < 7 & overdue <script>"}, find(fmt.Sprintf(`{"q":"invoice","filter":{"cardId":%q}}`, inTitle)).titles())
	require.Empty(t, find(`{"q":"invoice","filter":{"edits":1.5}}`).Hits)
	require.Empty(t, find(`{"q":"invoice","filter":{"lane":null}}`).Hits)

	// Pages.
	first := find(`{"q":"invoice","limit":1}`)
	require.Equal(t, []string{"Invoice 5 < 7 & overdue <script>"}, first.titles())
	require.NotEmpty(t, first.NextCursor)
	second := find(fmt.Sprintf(`{"q":"invoice","limit":1,"cursor":%q}`, first.NextCursor))
	require.Equal(t, []string{"Printer jammed"}, second.titles())
	require.Empty(t, second.NextCursor)
	typo := find(`{"q":"invocie","limit":1}`)
	require.Equal(t, []string{"Printer jammed"}, find(fmt.Sprintf(`{"q":"invocie","limit":1,"cursor":%q}`, typo.NextCursor)).titles(),
		"the pages of a search with typos match with typos")
	_, err := app.Executor.Query(ctx, lead, req("card_board.search", fmt.Sprintf(`{"q":"printer","cursor":%q}`, first.NextCursor)))
	requireCode(t, err, kumikotype.CodeValidation, kumikotype.ReasonInvalidCursor)

	// Equal ranks come in key order, page after page.
	var ids []string
	for i := range 5 {
		ids = append(ids, card(t, app, lead, fmt.Sprintf("Sprint review %d", i), "", ""))
	}
	slices.Sort(ids)
	var paged []string
	cursor := ""
	for {
		p := find(fmt.Sprintf(`{"q":"sprint review","limit":2,"cursor":%q}`, cursor))
		for _, h := range p.Hits {
			paged = append(paged, h.Row["cardId"].(string))
		}
		if cursor = p.NextCursor; cursor == "" {
			break
		}
	}
	require.Equal(t, ids, paged)

	// A deleted card's row is gone from the table, and from the search.
	write(t, app, lead, "card.delete", fmt.Sprintf(`{"id":%q}`, inTitle))
	require.Equal(t, []string{"Printer jammed"}, find(`{"q":"invoice"}`).titles())

	// QueryProjection answers the rows without the search's columns.
	for _, source := range []string{"card_board", "card"} {
		rows := query(t, app, lead, "planning.rows", fmt.Sprintf(`{"source":%q}`, source)).([]any)
		require.NotEmpty(t, rows)
		for col := range rows[0].(map[string]any) {
			require.False(t, strings.HasPrefix(col, "kumiko"), "%s answers %s", source, col)
		}
	}
}

// A column the caller may not read neither shows, matches, ranks nor
// highlights, and filtering by it is refused; a caller who may read it
// finds the row by it.
func TestSearchOfAProjectionKeepsColumnReadRoles(t *testing.T) {
	t.Parallel()
	app := kumikotest.NewApp(t, []*feature.Feature{planning(feature.WeightA, feature.WeightB)})
	card(t, app, lead, "Printer jammed", "asked about the invoice again", "")
	secret := card(t, app, lead, "Invoice overdue", "", "a secret remark about the invoice")

	p := searchOn(t, app.Executor, lead, "card_board.search", `{"q":"remark"}`)
	require.Len(t, p.Hits, 1)
	require.Equal(t, map[string]string{"leadNote": "a secret <mark>remark</mark> about the invoice"}, p.Hits[0].Highlights)
	require.Empty(t, searchOn(t, app.Executor, member, "card_board.search", `{"q":"remark"}`).Hits, "the lead note is not the member's to match")
	p = searchOn(t, app.Executor, member, "card_board.search", `{"q":"invoice"}`)
	require.Len(t, p.Hits, 2)
	for _, h := range p.Hits {
		require.NotContains(t, h.Row, "leadNote")
		require.NotContains(t, h.Highlights, "leadNote")
		if h.Row["cardId"] == secret {
			require.Equal(t, map[string]string{"title": "<mark>Invoice</mark> overdue"}, h.Highlights)
		}
	}
	leadRanks := searchOn(t, app.Executor, lead, "card_board.search", `{"q":"invoice"}`)
	require.Equal(t, secret, leadRanks.Hits[0].Row["cardId"])
	require.Greater(t, leadRanks.Hits[0].Rank, p.Hits[0].Rank, "for the member the lead note does not rank")
	_, err := app.Executor.Query(ctx, member, req("card_board.search", `{"q":"invoice","filter":{"leadNote":"x"}}`))
	requireCode(t, err, kumikotype.CodeAccessDenied, kumikotype.ReasonFieldAccess)
	_, err = app.Executor.Query(ctx, member, req("card_board.search", `{"q":"invoice","filter":{"leadNote":null}}`))
	requireCode(t, err, kumikotype.CodeAccessDenied, kumikotype.ReasonFieldAccess)
	_, err = app.Executor.Query(ctx, member, req("card_board.search", `{"q":"invoice","filter":{"tenantId":"0190a000-0000-7000-8000-00000000000b"}}`))
	c, _ := code(t, err)
	require.Equal(t, pipeline.CodeValidation, c, "tenant_id is no column of a row")
}

// A multi-stream projection's table is searched once its consumer has
// passed the writes: the search lags by the consumer's delay, and a table
// still being built from the stored events answers
// projection_rebuild_in_progress, as its queries do.
func TestSearchOfAMultiStreamProjection(t *testing.T) {
	t.Parallel()
	app := kumikotest.NewApp(t, []*feature.Feature{planning(feature.WeightA, feature.WeightB)})
	card(t, app, lead, "Invoice overdue", "", "")
	card(t, app, bob, "Invoice of tenant B", "", "")
	app.Exec(t, "DROP TABLE card_wall")
	require.NoError(t, app.Executor.EnsureSchema(ctx))
	_, err := app.Executor.Query(ctx, lead, req("card_wall.search", `{"q":"invoice"}`))
	c, _ := code(t, err)
	require.Equal(t, pipeline.CodeProjectionRebuilding, c)

	app.CatchUpAll(t)
	find := func() []string {
		return searchOn(t, app.Executor, lead, "card_wall.search", `{"q":"invoice"}`).titles()
	}
	require.Equal(t, []string{"Invoice overdue"}, find())
	card(t, app, lead, "Invoice paid", "", "")
	require.Equal(t, []string{"Invoice overdue"}, find(), "not before the consumer has passed the write")
	app.CatchUpAll(t)
	require.Equal(t, []string{"Invoice overdue", "Invoice paid"}, find())
}

// Whatever the query text, cursor or filter, a projection's search
// answers rows or a validation error, never anything else.
func TestSearchOfAProjectionWithHostileInput(t *testing.T) {
	t.Parallel()
	app := kumikotest.NewApp(t, []*feature.Feature{planning(feature.WeightA, feature.WeightB)})
	for i := range 3 {
		card(t, app, lead, fmt.Sprintf("Invoice overdue %d", i), "notes", "")
	}
	var payloads []string
	add := func(v map[string]any) {
		raw, err := json.Marshal(v)
		require.NoError(t, err)
		payloads = append(payloads, string(raw))
	}
	queries := hostileQueries(3000)
	for _, q := range queries {
		add(map[string]any{"q": q})
	}
	// Cursors of this very search whose key values were changed by hand:
	// they reach the SQL, which must refuse them as a cursor.
	page := searchOn(t, app.Executor, lead, "card_board.search", `{"q":"invoice","limit":1}`)
	raw, err := base64.RawURLEncoding.DecodeString(page.NextCursor)
	require.NoError(t, err)
	var cur map[string]any
	require.NoError(t, json.Unmarshal(raw, &cur))
	for i, q := range queries[:500] {
		cur["k"] = []any{q, queries[len(queries)-1-i]}
		cur["r"] = []any{0.5, 1e308, -1, "x"}[i%4]
		raw, err := json.Marshal(cur)
		require.NoError(t, err)
		add(map[string]any{"q": "invoice", "limit": 1, "cursor": base64.RawURLEncoding.EncodeToString(raw)})
		add(map[string]any{"q": "invoice", "cursor": q})
		add(map[string]any{"q": "invoice", "filter": map[string]any{"title": q, "edits": []any{1e300, -1, 1.5, q}[i%4]}})
	}
	requireNoServerError(t, app, member, "card_board.search", payloads)
}

// searchState is everything a search of table (its key cols) finds in it,
// as lines: each row's key and search columns as text, the table's search
// indexes, and the hits of a few queries — rows, ranks, highlights — for a
// caller who reads every column and one who does not.
func searchState(t *testing.T, app *kumikotest.App, table, key, handler string) []string {
	t.Helper()
	var state []string
	rows, err := app.Pool.Query(ctx, `SELECT attname FROM pg_attribute
WHERE attrelid = $1::regclass AND attname LIKE 'kumiko\_search\_%' AND NOT attisdropped ORDER BY 1`, table)
	require.NoError(t, err)
	vectors, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.NotEmpty(t, vectors)
	cols := []string{"concat_ws(' ', " + key + ")"}
	for _, v := range vectors {
		cols = append(cols, fmt.Sprintf("'%s: ' || coalesce(%s::text, 'NULL')", v, pgx.Identifier{v}.Sanitize()))
	}
	rows, err = app.Pool.Query(ctx, fmt.Sprintf("SELECT concat_ws(' | ', %s) FROM %s ORDER BY %s", strings.Join(cols, ", "), table, key))
	require.NoError(t, err)
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	state = append(state, lines...)
	rows, err = app.Pool.Query(ctx, `SELECT indexname || ': ' || indexdef FROM pg_indexes
WHERE schemaname = current_schema() AND tablename = $1 AND indexname LIKE 'kumiko\_search\_%' ORDER BY 1`, table)
	require.NoError(t, err)
	indexes, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Len(t, indexes, 2*3, "a tsvector and a trigram index per field")
	state = append(state, indexes...)
	for _, c := range []pipeline.Caller{lead, member, bob} {
		for _, q := range []string{"invoice", "inv", "invocie", "printer remark", "review", "zebra"} {
			for cursor := ""; ; {
				p := searchOn(t, app.Executor, c, handler, fmt.Sprintf(`{"q":%q,"limit":3,"cursor":%q}`, q, cursor))
				raw, err := json.Marshal(p.Hits)
				require.NoError(t, err)
				state = append(state, fmt.Sprintf("%s %s: %s", c.User.ID, q, raw))
				if cursor = p.NextCursor; cursor == "" {
					break
				}
			}
		}
	}
	return state
}

// searchObjects are the identities of table's search columns and indexes:
// a statement that dropped and made one again would change them.
func searchObjects(t *testing.T, app *kumikotest.App, table string) []string {
	t.Helper()
	rows, err := app.Pool.Query(ctx, `SELECT attname || ' #' || attnum FROM pg_attribute
WHERE attrelid = $1::regclass AND attname LIKE 'kumiko\_search\_%' AND NOT attisdropped
UNION ALL SELECT c.relname || ' #' || c.oid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
WHERE i.indrelid = $1::regclass AND c.relname LIKE 'kumiko\_search\_%' ORDER BY 1`, table)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return out
}

// cardHistory writes cards of two tenants, updates, deletes: the history
// every index is built of.
func cardHistory(t *testing.T, app *kumikotest.App) {
	t.Helper()
	overdue := card(t, app, lead, "Invoice overdue", "customer called twice", "a remark on the invoice")
	card(t, app, lead, "Printer jammed", "asked about the invoice again", "")
	gone := card(t, app, lead, "Invoice sent twice", "", "")
	card(t, app, bob, "Invoice of tenant B", "invoice", "invoice")
	for i := range 7 {
		card(t, app, lead, fmt.Sprintf("Sprint review %d", i), "an invoice review", "")
	}
	write(t, app, lead, "card.update", fmt.Sprintf(`{"id":%q,"version":1,"changes":{"title":"Invoice overdue again","leadNote":"printer remark"}}`, overdue))
	write(t, app, lead, "card.delete", fmt.Sprintf(`{"id":%q}`, gone))
}

// The index after a rebuild equals the live index: of an inline
// projection's table and a multi-stream projection's, rebuilt as `project
// rebuild` does, and of an entity's read table — which no rebuild replays —
// rebuilt by reindexing it (another declaration, then this one again).
// After a rebuild the next start finds nothing to change.
func TestSearchIndexAfterARebuildEqualsTheLiveIndex(t *testing.T) {
	t.Parallel()
	app := kumikotest.NewApp(t, []*feature.Feature{planning(feature.WeightA, feature.WeightB)})
	cardHistory(t, app)
	app.CatchUpAll(t)

	for _, c := range []struct{ projection, key string }{{"card_board", "tenant_id, card_id"}, {"card_wall", "card_id"}} {
		live := searchState(t, app, c.projection, c.key, c.projection+".search")
		_, err := app.Executor.RebuildProjection(ctx, c.projection, pipeline.RebuildOptions{BatchSize: 3})
		require.NoError(t, err)
		require.Equal(t, live, searchState(t, app, c.projection, c.key, c.projection+".search"), c.projection)
		objects := searchObjects(t, app, c.projection)
		require.NoError(t, app.Executor.EnsureSchema(ctx))
		require.Equal(t, objects, searchObjects(t, app, c.projection), "the next start changes nothing of %s", c.projection)
	}

	_, err := app.Executor.RebuildProjection(ctx, "card", pipeline.RebuildOptions{})
	require.ErrorIs(t, err, pipeline.ErrNoProjection, "an entity's read table has no rebuild")
	live := searchState(t, app, "read_card", "id", "card.search")
	for _, f := range []*feature.Feature{
		feature.Define("planning", func(r *feature.Registrar) {
			r.Entity("card", feature.Fields{"title": feature.Text().Required(), "summary": feature.Text(),
				"leadNote": feature.Text().ReadRoles("Lead"), "lane": feature.Enum("todo", "done").Default("todo")})
			r.Crud("card", feature.Access{Write: feature.AnyUser(), Read: feature.AnyUser()})
			r.Search("card", feature.SearchFields{"title": feature.WeightD})
		}),
		planning(feature.WeightA, feature.WeightB),
	} {
		reg, err := registry.Build(f)
		require.NoError(t, err)
		d, err := pipeline.New(reg, app.Store, pipeline.Config{})
		require.NoError(t, err)
		require.NoError(t, d.EnsureSchema(ctx))
	}
	require.Equal(t, live, searchState(t, app, "read_card", "id", "card.search"), "the entity's index made again over its rows")
}

// A projection's search with another declaration reindexes at the next
// start: the old columns go, the new weights rank.
func TestSearchOfAProjectionDeclarationChangeReindexes(t *testing.T) {
	t.Parallel()
	app := kumikotest.NewApp(t, []*feature.Feature{planning(feature.WeightA, feature.WeightD)})
	a := card(t, app, lead, "gear", "other", "")
	b := card(t, app, lead, "other", "gear", "")
	app.CatchUpAll(t)
	ids := func(d *pipeline.Executor, handler string) []any {
		var got []any
		for _, h := range searchOn(t, d, lead, handler, `{"q":"gear"}`).Hits {
			got = append(got, h.Row["cardId"])
		}
		return got
	}
	require.Equal(t, []any{a, b}, ids(app.Executor, "card_board.search"))
	require.Equal(t, []any{a, b}, ids(app.Executor, "card_wall.search"))
	before := searchObjects(t, app, "card_board")

	// The app's next release, on the same database.
	reg, err := registry.Build(planning(feature.WeightD, feature.WeightA))
	require.NoError(t, err)
	next, err := pipeline.New(reg, app.Store, pipeline.Config{})
	require.NoError(t, err)
	require.NoError(t, next.EnsureSchema(ctx))
	require.Equal(t, []any{b, a}, ids(next, "card_board.search"))
	require.Equal(t, []any{b, a}, ids(next, "card_wall.search"))
	after := searchObjects(t, app, "card_board")
	require.Len(t, after, len(before), "three columns and six indexes, as before")
	require.NotEqual(t, before, after)
	for _, table := range []string{"card_board", "card_wall"} {
		require.Equal(t, 3, app.Count(t, `SELECT count(*) FROM pg_attribute
WHERE attrelid = '`+table+`'::regclass AND attname LIKE 'kumiko\_search\_%' AND NOT attisdropped`), "the old columns are dropped")
	}
}

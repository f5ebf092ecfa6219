package pipeline_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/kumikotest"
	"github.com/kumiko-go/kumiko/kumikotype"
	"github.com/kumiko-go/kumiko/pipeline"
	"github.com/kumiko-go/kumiko/registry"
)

// helpdesk has tickets searchable by title (A), notes (B, readable by
// support only) and the reporter's name (C, personal data).
var helpdesk = feature.Define("helpdesk", func(r *feature.Registrar) {
	r.Entity("ticket", feature.Fields{
		"title":    feature.Text().Required(),
		"notes":    feature.Text().ReadRoles("Support"),
		"reporter": feature.Text().Personal(),
		"status":   feature.Enum("open", "closed").Default("open"),
	}, feature.SoftDelete())
	r.Crud("ticket", feature.Access{Write: feature.AnyUser(), Read: feature.AnyUser()})
	r.Search("ticket", feature.SearchFields{"title": feature.WeightA, "notes": feature.WeightB, "reporter": feature.WeightC},
		feature.SearchConfig("english"))
})

var (
	agent = kumikotest.User(tenantA, "agent", "User", "Support")
	guest = kumikotest.User(tenantA, "guest", "User")
)

type searchPage struct {
	Hits []struct {
		Row        map[string]any    `json:"row"`
		Rank       float64           `json:"rank"`
		Highlights map[string]string `json:"highlights"`
	} `json:"hits"`
	NextCursor string `json:"nextCursor"`
}

func searchTickets(t *testing.T, app *kumikotest.App, c pipeline.Caller, payload string) searchPage {
	t.Helper()
	return searchOn(t, app.Executor, c, "ticket.search", payload)
}

// searchOn runs the search query handler with payload as c on d.
func searchOn(t *testing.T, d *pipeline.Executor, c pipeline.Caller, handler, payload string) searchPage {
	t.Helper()
	out, err := d.Query(ctx, c, req(handler, payload))
	require.NoError(t, err, payload)
	raw, err := json.Marshal(out)
	require.NoError(t, err)
	var p searchPage
	require.NoError(t, json.Unmarshal(raw, &p), "%s", raw)
	return p
}

// titles are the titles of a page's hits, in order.
func (p searchPage) titles() []string {
	out := []string{}
	for _, h := range p.Hits {
		out = append(out, h.Row["title"].(string))
	}
	return out
}

func ticket(t *testing.T, app *kumikotest.App, c pipeline.Caller, title, notes, reporter string) string {
	t.Helper()
	raw, err := json.Marshal(map[string]any{"title": title, "notes": notes, "reporter": reporter})
	require.NoError(t, err)
	return write(t, app, c, "ticket.create", string(raw))["id"].(string)
}

// A fixed corpus: a title hit ranks above a notes hit, prefixes and one
// typo match, matches are highlighted (HTML-escaped around <mark>),
// filters and keyset pages hold, another tenant's rows never match.
func TestSearchFindsRanksAndHighlights(t *testing.T) {
	t.Parallel()
	app := kumikotest.NewApp(t, []*feature.Feature{helpdesk})
	inTitle := ticket(t, app, agent, "Invoice 5 < 7 & overdue <script>", "customer called twice", "Ada Lovelace")
	inNotes := ticket(t, app, agent, "Printer jammed", "asked about the invoice again", "Bob Byron")
	ticket(t, app, agent, "Lunch order", "nothing to see", "Cleo")
	ticket(t, app, kumikotest.User(tenantB, "other", "User", "Support"), "Invoice of tenant B", "invoice", "Dora")

	p := searchTickets(t, app, agent, `{"q":"invoice"}`)
	require.Equal(t, []string{"Invoice 5 < 7 & overdue <script>", "Printer jammed"}, p.titles(), "the title hit first; tenant B's never")
	require.Greater(t, p.Hits[0].Rank, p.Hits[1].Rank)
	require.Equal(t, "<mark>Invoice</mark> 5 &lt; 7 &amp; overdue", p.Hits[0].Highlights["title"], "escaped; markup left out")
	require.Equal(t, map[string]string{"notes": "asked about the <mark>invoice</mark> again"}, p.Hits[1].Highlights)
	require.Equal(t, inTitle, p.Hits[0].Row["id"])
	require.Equal(t, inNotes, p.Hits[1].Row["id"])

	require.Equal(t, []string{"Invoice 5 < 7 & overdue <script>", "Printer jammed"}, searchTickets(t, app, agent, `{"q":"INV"}`).titles(), "a prefix")
	require.Equal(t, []string{"Invoice 5 < 7 & overdue <script>", "Printer jammed"}, searchTickets(t, app, agent, `{"q":"invocie"}`).titles(), "one typo")
	require.Equal(t, []string{"Invoice 5 < 7 & overdue <script>"}, searchTickets(t, app, agent, `{"q":"invoices overdue"}`).titles(), "every word, stemmed")
	require.Equal(t, []string{"Invoice 5 < 7 & overdue <script>"}, searchTickets(t, app, agent, `{"q":"lovelace"}`).titles())
	require.Empty(t, searchTickets(t, app, agent, `{"q":"zebra"}`).Hits)

	// Filters and pages.
	write(t, app, agent, "ticket.update", fmt.Sprintf(`{"id":%q,"version":1,"changes":{"status":"closed"}}`, inNotes))
	require.Equal(t, []string{"Printer jammed"}, searchTickets(t, app, agent, `{"q":"invoice","filter":{"status":"closed"}}`).titles())
	first := searchTickets(t, app, agent, `{"q":"invoice","limit":1}`)
	require.Equal(t, []string{"Invoice 5 < 7 & overdue <script>"}, first.titles())
	require.NotEmpty(t, first.NextCursor)
	typo := searchTickets(t, app, agent, `{"q":"invocie","limit":1}`)
	require.Equal(t, []string{"Invoice 5 < 7 & overdue <script>"}, typo.titles())
	require.Equal(t, []string{"Printer jammed"}, searchTickets(t, app, agent, fmt.Sprintf(`{"q":"invocie","limit":1,"cursor":%q}`, typo.NextCursor)).titles(),
		"the pages of a search with typos match with typos")
	second := searchTickets(t, app, agent, fmt.Sprintf(`{"q":"invoice","limit":1,"cursor":%q}`, first.NextCursor))
	require.Equal(t, []string{"Printer jammed"}, second.titles())
	require.Empty(t, second.NextCursor)
	_, err := app.Executor.Query(ctx, agent, req("ticket.search", fmt.Sprintf(`{"q":"printer","cursor":%q}`, first.NextCursor)))
	requireCode(t, err, kumikotype.CodeValidation, kumikotype.ReasonInvalidCursor)

	// A deleted ticket is not found.
	write(t, app, agent, "ticket.delete", fmt.Sprintf(`{"id":%q}`, inTitle))
	require.Equal(t, []string{"Printer jammed"}, searchTickets(t, app, agent, `{"q":"invoice"}`).titles())
}

// A field the caller may not read neither matches nor shows; a forgotten
// subject's personal field no longer matches.
func TestSearchKeepsFieldRulesAndForgets(t *testing.T) {
	t.Parallel()
	app := kumikotest.NewApp(t, []*feature.Feature{helpdesk})
	ticket(t, app, agent, "Printer jammed", "asked about the invoice again", "Ada Lovelace")
	ada := ticket(t, app, agent, "Invoice overdue", "secret remark", "Ada Lovelace")

	require.Len(t, searchTickets(t, app, agent, `{"q":"remark"}`).Hits, 1)
	require.Empty(t, searchTickets(t, app, guest, `{"q":"remark"}`).Hits, "notes are not the guest's to match")
	p := searchTickets(t, app, guest, `{"q":"invoice"}`)
	require.Equal(t, []string{"Invoice overdue"}, p.titles(), "the ticket whose notes alone match is not found")
	require.NotContains(t, p.Hits[0].Row, "notes")
	_, err := app.Executor.Query(ctx, guest, req("ticket.search", `{"q":"invoice","filter":{"notes":"secret remark"}}`))
	requireCode(t, err, kumikotype.CodeAccessDenied, kumikotype.ReasonFieldAccess)

	require.Len(t, searchTickets(t, app, agent, `{"q":"lovelace"}`).Hits, 2)
	require.NoError(t, app.Executor.ForgetSubject(ctx, tenantA, ada))
	p = searchTickets(t, app, agent, `{"q":"lovelace"}`)
	require.Len(t, p.Hits, 1, "the forgotten reporter is no longer found")
	require.NotEqual(t, ada, p.Hits[0].Row["id"])
}

// Whatever the query text, a search answers rows or a validation error,
// never anything else.
func TestSearchWithHostileQueries(t *testing.T) {
	t.Parallel()
	app := kumikotest.NewApp(t, []*feature.Feature{helpdesk})
	ticket(t, app, agent, "Invoice overdue", "notes", "Ada")
	var payloads []string
	for _, q := range hostileQueries(10_000) {
		payload, _ := json.Marshal(map[string]any{"q": q})
		payloads = append(payloads, string(payload))
	}
	requireNoServerError(t, app, agent, "ticket.search", payloads)
	require.Len(t, searchTickets(t, app, agent, `{"q":"(invoice) & !"}`).Hits, 1, "operators are not operators")
}

// hostileQueries are n search texts: a few extreme ones, the rest random
// runs of what search syntax, SQL and encodings treat specially.
func hostileQueries(n int) []string {
	pieces := []string{"&", "|", "!", "<->", ":*", "'", "''", `"`, `\`, `\\`, "(", ")", "((", "))", "*", ":", "-", "<", ">",
		"\x00", "\\u0000", "%", "_", "$1", ";", "--", "/*", "*/", "AND", "OR", "NOT", "invoice", "inv", "ä", "日本", "🙂",
		" ", "\t", "\n", "DROP TABLE", "1e308", "NaN", "'; SELECT 1; --", "\u202e", "\ufeff", "\xff\xfe"}
	queries := []string{strings.Repeat("a", 100_000), strings.Repeat("invoice ", 200), strings.Repeat("(", 300),
		strings.Repeat("é", 250), ""}
	rng := rand.New(rand.NewPCG(1, 2))
	for len(queries) < n {
		var b strings.Builder
		for range 1 + rng.IntN(12) {
			b.WriteString(pieces[rng.IntN(len(pieces))])
		}
		queries = append(queries, b.String())
	}
	return queries
}

// requireNoServerError runs handler with each of payloads as c, four at a
// time, and requires each to answer or to fail with a 400.
func requireNoServerError(t *testing.T, app *kumikotest.App, c pipeline.Caller, handler string, payloads []string) {
	t.Helper()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		bad  []string
		next = make(chan string)
	)
	for range 4 {
		wg.Go(func() {
			for payload := range next {
				_, err := app.Executor.Query(ctx, c, req(handler, payload))
				var e *pipeline.Error
				if err != nil && (!errors.As(err, &e) || e.Status() != 400) {
					mu.Lock()
					bad = append(bad, fmt.Sprintf("%.120q (%d bytes): %v", payload, len(payload), err))
					mu.Unlock()
				}
			}
		})
	}
	for _, p := range payloads {
		next <- p
	}
	close(next)
	wg.Wait()
	require.Empty(t, bad)
}

// A search of an entity with another declaration reindexes: the old
// columns go, the new weights rank.
func TestSearchDeclarationChangeReindexes(t *testing.T) {
	t.Parallel()
	declare := func(title, notes feature.Weight) *feature.Feature {
		return feature.Define("helpdesk", func(r *feature.Registrar) {
			r.Entity("ticket", feature.Fields{"title": feature.Text(), "notes": feature.Text()})
			r.Crud("ticket", feature.Access{Write: feature.AnyUser(), Read: feature.AnyUser()})
			r.Search("ticket", feature.SearchFields{"title": title, "notes": notes})
		})
	}
	app := kumikotest.NewApp(t, []*feature.Feature{declare(feature.WeightA, feature.WeightD)})
	a := write(t, app, alice, "ticket.create", `{"title":"gear","notes":"other"}`)["id"]
	b := write(t, app, alice, "ticket.create", `{"title":"other","notes":"gear"}`)["id"]
	ids := func(d *pipeline.Executor) []any {
		out, err := d.Query(ctx, alice, req("ticket.search", `{"q":"gear"}`))
		require.NoError(t, err)
		raw, err := json.Marshal(out)
		require.NoError(t, err)
		var p searchPage
		require.NoError(t, json.Unmarshal(raw, &p))
		var got []any
		for _, h := range p.Hits {
			got = append(got, h.Row["id"])
		}
		return got
	}
	require.Equal(t, []any{a, b}, ids(app.Executor))

	// The app's next release, on the same database.
	reg, err := registry.Build(declare(feature.WeightD, feature.WeightA))
	require.NoError(t, err)
	next, err := pipeline.New(reg, app.Store, pipeline.Config{})
	require.NoError(t, err)
	require.NoError(t, next.EnsureSchema(ctx))
	require.Equal(t, []any{b, a}, ids(next))
	require.Equal(t, 2, app.Count(t, `SELECT count(*) FROM pg_attribute
WHERE attrelid = 'read_ticket'::regclass AND attname LIKE 'kumiko\_search\_%' AND NOT attisdropped`), "the old columns are dropped")
}

// requireCode fails unless err is a *pipeline.Error with code and reason.
func requireCode(t *testing.T, err error, code kumikotype.Code, reason kumikotype.Reason) {
	t.Helper()
	var e *pipeline.Error
	require.True(t, errors.As(err, &e), "%v", err)
	require.Equal(t, string(code), e.Code(), "%v", err)
	require.Equal(t, string(reason), e.Reason(), "%v", err)
}

// A field with a long name keeps its index names within PostgreSQL's 63
// bytes: a second start finds every column and index it made.
func TestSearchOfALongFieldName(t *testing.T) {
	t.Parallel()
	long := feature.Define("archive", func(r *feature.Registrar) {
		r.Entity("record", feature.Fields{"descriptionOfTheRecordAsTheClerkWroteItDown": feature.Text()})
		r.Crud("record", feature.Access{Write: feature.AnyUser(), Read: feature.AnyUser()})
		r.Search("record", feature.SearchFields{"descriptionOfTheRecordAsTheClerkWroteItDown": feature.WeightA})
		// The same field in another table: index names are the schema's.
		r.Entity("copy", feature.Fields{"descriptionOfTheRecordAsTheClerkWroteItDown": feature.Text()})
		r.Crud("copy", feature.Access{Write: feature.AnyUser(), Read: feature.AnyUser()})
		r.Search("copy", feature.SearchFields{"descriptionOfTheRecordAsTheClerkWroteItDown": feature.WeightA})
	})
	app := kumikotest.NewApp(t, []*feature.Feature{long})
	require.NoError(t, app.Executor.EnsureSchema(ctx), "a second start")
	for _, table := range []string{"read_record", "read_copy"} {
		require.Equal(t, 2, app.Count(t, `SELECT count(*) FROM pg_indexes WHERE schemaname = current_schema() AND tablename = '`+table+`' AND indexname LIKE 'kumiko\_search\_%'`),
			"the tsvector and the trigram index of %s", table)
	}
	write(t, app, alice, "record.create", `{"descriptionOfTheRecordAsTheClerkWroteItDown":"a ledger of the harbour"}`)
	out, err := app.Executor.Query(ctx, alice, req("record.search", `{"q":"harb"}`))
	require.NoError(t, err)
	raw, err := json.Marshal(out)
	require.NoError(t, err)
	var p searchPage
	require.NoError(t, json.Unmarshal(raw, &p))
	require.Len(t, p.Hits, 1)
	require.Equal(t, "a ledger of the <mark>harbour</mark>", p.Hits[0].Highlights["descriptionOfTheRecordAsTheClerkWroteItDown"])
}

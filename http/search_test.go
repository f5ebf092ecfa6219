package http_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/feature"
)

// notebook has notes searchable by title and body.
var notebook = feature.Define("notebook", func(r *feature.Registrar) {
	r.Entity("note", feature.Fields{"title": feature.Text().Required(), "body": feature.Text()})
	r.Crud("note", feature.Access{Write: feature.AnyUser(), Read: feature.AnyUser()})
	r.Search("note", feature.SearchFields{"title": feature.WeightA, "body": feature.WeightB})
})

// A search over HTTP: its request and answer, a 400 and a cursor's pages
// conform to the OpenAPI document; hostile query strings answer 200 or
// 400 with a problem, never anything else.
func TestSearchOverHTTP(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, 8, []*feature.Feature{notebook})
	v := openAPIValidator(t, e)
	tok := token(t, "u1", tenantA, "User")
	for _, n := range []string{`{"title":"Invoice overdue","body":"call the customer"}`, `{"title":"Printer","body":"the invoice printer jams"}`} {
		conform(t, e, v, "/api/write", tok, `{"type":"note.create","payload":`+n+`}`, http.StatusOK)
	}
	page := conform(t, e, v, "/api/query", tok, `{"type":"note.search","payload":{"q":"invoice","limit":1}}`, http.StatusOK)
	data := page["data"].(map[string]any)
	hits := data["hits"].([]any)
	require.Len(t, hits, 1)
	hit := hits[0].(map[string]any)
	require.Equal(t, "Invoice overdue", hit["row"].(map[string]any)["title"])
	require.Equal(t, map[string]any{"title": "<mark>Invoice</mark> overdue"}, hit["highlights"])
	next := conform(t, e, v, "/api/query", tok, fmt.Sprintf(`{"type":"note.search","payload":{"q":"invoice","limit":1,"cursor":%q}}`, data["nextCursor"]), http.StatusOK)
	require.Equal(t, "Printer", next["data"].(map[string]any)["hits"].([]any)[0].(map[string]any)["row"].(map[string]any)["title"])
	bad := conform(t, e, v, "/api/query", tok, `{"type":"note.search","payload":{"q":"!?"}}`, http.StatusBadRequest)
	require.Equal(t, "validation_error", bad["code"])

	pieces := []string{"&", "|", "!", "<->", ":*", "'", `"`, `\`, "(", ")", "*", ":", "%", "\x00", "\u0000", "invoice", "inv", "日本",
		" ", "\n", "DROP TABLE", "'; --", "\u202e", "\xff"}
	rng := rand.New(rand.NewPCG(3, 4))
	queries := []string{strings.Repeat("a", 100_000), strings.Repeat("(", 600)}
	for len(queries) < 2_000 {
		var b strings.Builder
		for range 1 + rng.IntN(10) {
			b.WriteString(pieces[rng.IntN(len(pieces))])
		}
		queries = append(queries, b.String())
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		bad5 []string
		work = make(chan string)
	)
	for range 4 {
		wg.Go(func() {
			for q := range work {
				body, _ := json.Marshal(map[string]any{"type": "note.search", "payload": map[string]any{"q": q}})
				r := e.do(request{method: http.MethodPost, path: "/api/query", token: tok, body: strings.NewReader(string(body))})
				if r.status != http.StatusOK && r.status != http.StatusBadRequest {
					mu.Lock()
					bad5 = append(bad5, fmt.Sprintf("%.60q → %d %s", q, r.status, r.body))
					mu.Unlock()
				}
			}
		})
	}
	for _, q := range queries {
		work <- q
	}
	close(work)
	wg.Wait()
	require.Empty(t, bad5)
}

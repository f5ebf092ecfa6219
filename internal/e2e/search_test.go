package e2e_test

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/samples/helpdesk"
)

// The helpdesk sample's binary under serve: a ticket is found by a prefix
// of its subject the moment its write answered, and with a typo.
func TestHelpdeskSearchUnderServe(t *testing.T) {
	t.Parallel()
	reserve(t, 1)
	a := newApp(t, "helpdesk")
	srv := a.serve(t, "helpdesk-1")
	c := a.as(t, srv, uuid.New(), "cus", "Customer")
	id := ok[helpdesk.Ticket](c.write("ticket.create", map[string]any{"subject": "Refund for a double charge"})).ID
	for _, q := range []string{"refun", "refnud"} {
		p := ok[helpdesk.Page](c.query("ticket.search", map[string]any{"q": q}))
		require.Len(t, p.Hits, 1, q)
		require.Equal(t, id, p.Hits[0].Row.ID)
	}
}

// A search on a search engine runs under serve: the shared consumer that
// feeds the engine runs in the process, and the query reads the engine.
func TestSearchOnAnEngineUnderServe(t *testing.T) {
	t.Parallel()
	reserve(t, 1)
	a := newApp(t, "e2eapp", "E2E_FEATURES=memos")
	srv := a.serve(t, "memos-1")
	c := a.as(t, srv, uuid.New(), "u", "User")
	type memo struct {
		ID string `json:"id"`
	}
	type page struct {
		Hits []struct {
			Row        memo              `json:"row"`
			Highlights map[string]string `json:"highlights"`
		} `json:"hits"`
	}
	id := ok[memo](c.write("memo.create", map[string]any{"title": "Harbour dues", "body": "the invoice for March"})).ID
	require.Eventually(t, func() bool {
		return len(ok[page](c.query("memo.search", map[string]any{"q": "invoce"})).Hits) == 1
	}, 20*time.Second, 50*time.Millisecond, "the consumer puts the memo into the engine")
	p := ok[page](c.query("memo.search", map[string]any{"q": "harb"}))
	require.Len(t, p.Hits, 1)
	require.Equal(t, id, p.Hits[0].Row.ID)
	require.Equal(t, "<mark>Harbour</mark> dues", p.Hits[0].Highlights["title"])
	other := a.as(t, srv, uuid.New(), "v", "User")
	require.Empty(t, ok[page](other.query("memo.search", map[string]any{"q": "harbour"})).Hits, "another tenant finds nothing")
}

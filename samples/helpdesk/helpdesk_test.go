package helpdesk_test

import (
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/kumikotest"
	"github.com/kumiko-go/kumiko/samples/helpdesk"
)

// Tickets are found by a prefix as the user types, with a typo, the
// subject hit first; the notes only by agents; another tenant's never.
func TestSearchTickets(t *testing.T) {
	t.Parallel()
	srv := kumikotest.NewServer(t, []*feature.Feature{helpdesk.Feature})
	tenant := uuid.New()
	ana := srv.As(t, tenant, "ana", "Agent")
	cus := srv.As(t, tenant, "cus", "Customer")
	create := func(c *kumikotest.Client, fields map[string]any) string {
		return kumikotest.Data[helpdesk.Ticket](c.Write("ticket.create", fields)).ID
	}
	refund := create(cus, map[string]any{"subject": "Refund for a double charge", "description": "I was charged twice in March."})
	card := create(cus, map[string]any{"subject": "Card declined", "description": "My card is declined when I ask for a refund."})
	create(ana, map[string]any{"subject": "Password reset", "notes": "escalated to security"})
	create(srv.As(t, uuid.New(), "other", "Customer"), map[string]any{"subject": "Refund please"})

	search := func(c *kumikotest.Client, q string) helpdesk.Page {
		return kumikotest.Data[helpdesk.Page](c.Query("ticket.search", map[string]any{"q": q}))
	}
	ids := func(p helpdesk.Page) []string {
		out := []string{}
		for _, h := range p.Hits {
			out = append(out, h.Row.ID)
		}
		return out
	}
	p := search(cus, "refun")
	require.Equal(t, []string{refund, card}, ids(p), "as the user types; the subject hit first; not another tenant's")
	require.Equal(t, "<mark>Refund</mark> for a double charge", p.Hits[0].Highlights["subject"])
	require.Equal(t, []string{refund, card}, ids(search(cus, "refnud")), "with a typo")
	require.Equal(t, []string{refund}, ids(search(cus, "charged twice")), "every word")
	require.Len(t, search(ana, "escalated").Hits, 1)
	require.Empty(t, search(cus, "escalated").Hits, "customers do not find tickets by the agents' notes")
}

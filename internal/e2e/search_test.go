package e2e_test

import (
	"testing"

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

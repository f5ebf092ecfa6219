// Package helpdesk shows search: support tickets found by what they say,
// as the user types, with typos, best first, with the matches highlighted —
// kept by PostgreSQL in the write transaction, nothing else to run.
package helpdesk

import "github.com/kumiko-go/kumiko/feature"

// Feature is a helpdesk: tickets whose subject, description and internal
// notes are searchable; only agents read (and so find by) the notes.
var Feature = feature.Define("helpdesk", func(r *feature.Registrar) {
	r.Entity("ticket", feature.Fields{
		"subject":     feature.Text().Required().MaxLen(200),
		"description": feature.Text().MaxLen(10_000),
		"notes":       feature.Text().ReadRoles("Agent"),
		"status":      feature.Enum("open", "solved").Default("open"),
	})
	r.Crud("ticket", feature.Access{Write: feature.AnyUser(), Read: feature.AnyUser()})
	r.Search("ticket", feature.SearchFields{
		"subject":     feature.WeightA,
		"description": feature.WeightB,
		"notes":       feature.WeightC,
	}, feature.SearchConfig("english"))
})

// Hit is a ticket a search found.
type Hit struct {
	Row        Ticket            `json:"row"`
	Rank       float64           `json:"rank"`
	Highlights map[string]string `json:"highlights"`
}

// Ticket is a ticket as the API answers it; Notes is missing for callers
// who may not read it.
type Ticket struct {
	ID          string `json:"id"`
	Subject     string `json:"subject"`
	Description string `json:"description"`
	Notes       string `json:"notes,omitempty"`
	Status      string `json:"status"`
}

// Page is a page of a search.
type Page struct {
	Hits       []Hit  `json:"hits"`
	NextCursor string `json:"nextCursor"`
}

package feature

import (
	"maps"
	"slices"

	"github.com/kumiko-go/kumiko/internal/spec"
)

// Weight is how much a match in a searchable field counts in a search's
// ranking: WeightA most, WeightD least.
type Weight byte

// The weights of SearchFields.
const (
	WeightA Weight = 'A'
	WeightB Weight = 'B'
	WeightC Weight = 'C'
	WeightD Weight = 'D'
)

// SearchFields maps the searchable text fields to their weights: an
// entity's fields by their JSON names, a projection table's text columns
// by their column names.
type SearchFields map[string]Weight

// SearchOption configures Registrar.Search.
type SearchOption struct {
	apply   func(*spec.Search)
	problem string
}

// SearchConfig names the PostgreSQL text search configuration the search
// splits and normalises words with: "simple" (the default: no stemming,
// fit for every language and for names), or a language's such as
// "english" or "german" (stemming: "invoices" finds "invoice"). An
// unknown configuration fails the start.
func SearchConfig(name string) SearchOption {
	o := SearchOption{apply: func(s *spec.Search) { s.Config = name }}
	if name == "" {
		o.problem = "SearchConfig needs a configuration name, such as simple or english"
	}
	return o
}

// SearchEngine runs the search on the search engine (a search.Engine)
// that the app's configuration registers under name (kumiko.Config
// SearchEngines) instead of in the entity's read table: a shared consumer
// named "search.<entity>" puts each row the entity's events change into
// the engine after the event commits (and removes deleted rows), so hits
// lag writes by the consumer's delay; the query asks the engine and reads
// the rows it names from the read table. See docs/search.md, "Engines".
// An engine the configuration lacks fails the start.
func SearchEngine(name string) SearchOption {
	o := SearchOption{apply: func(s *spec.Search) { s.Engine = name }}
	if name == "" {
		o.problem = "SearchEngine needs the name the engine is registered under"
	}
	return o
}

// SearchAccess is the access rule of the generated search query. A
// projection's search needs one unless the projection has a Read rule,
// which is its default; an entity's search defaults to the rule of the
// entity's list, which SearchAccess replaces.
func SearchAccess(rule Rule) SearchOption {
	rule.roles = slices.Clone(rule.roles)
	o := SearchOption{apply: func(s *spec.Search) { s.Access = rule }}
	if rule.IsZero() {
		o.problem = "SearchAccess needs a rule (AnyUser, Roles, …); the zero Rule allows nobody"
	}
	return o
}

// Search makes name searchable by the text fields in fields (see
// docs/search.md): an entity of this feature, by its text fields, or an
// inline projection or a multi-stream projection with a table of this
// feature, by its text columns (the table needs a tenant_id uuid column
// and a primary key). The generated query "<name>.search" takes {"q",
// "filter", "limit", "cursor"} and answers the matching rows of the
// caller's tenant, best first, with highlighted snippets. Every word must
// match: as a prefix ("inv" finds "invoice"), or — when nothing matches
// so — with a typo ("invocie" finds "invoice").
//
// The query's access rule is SearchAccess's, else the entity list's or
// the projection's Read rule; a field or column the caller may not read
// neither shows nor matches. The index lives in the searched table (an
// entity's may live in a search engine instead: SearchEngine): an
// entity's and an inline projection's are kept in the write transaction,
// a multi-stream projection's in its consumer's; a change of fields,
// weights or configuration reindexes at the next start, and a
// projection's rebuild rebuilds it.
func (r *Registrar) Search(name string, fields SearchFields, opts ...SearchOption) {
	it := item("search", name)
	def := spec.Search{Entity: name, Fields: make(map[string]byte, len(fields))}
	for name, w := range maps.All(fields) {
		def.Fields[name] = byte(w)
	}
	for _, o := range opts {
		if o.apply == nil {
			r.problem(it, "zero SearchOption; use the feature option constructors")
			continue
		}
		if o.problem != "" {
			r.problem(it, "%s", o.problem)
		}
		o.apply(&def)
	}
	r.record(it, func(d *spec.Definitions) { d.Searches = append(d.Searches, def) })
}

// SearchRequest is a search a handler runs with CommandContext.Search: the
// payload of a generated "<name>.search" query.
type SearchRequest struct {
	// Q is the text searched for (required; see docs/search.md).
	Q string `json:"q"`
	// Filter holds equality conditions on other fields or columns.
	Filter map[string]any `json:"filter,omitempty"`
	// Limit is the most hits of the page (1–200; 0: 50).
	Limit int `json:"limit,omitempty"`
	// Cursor is the previous page's NextCursor.
	Cursor string `json:"cursor,omitempty"`
}

// SearchResults is a page of a search.
type SearchResults struct {
	Hits []SearchHit `json:"hits"`
	// NextCursor continues after the page; "" on the last.
	NextCursor string `json:"nextCursor"`
}

// SearchHit is one row a search found.
type SearchHit struct {
	// Row is the row as the caller may see it.
	Row map[string]any `json:"row"`
	// Rank orders the hits: higher is better.
	Rank float64 `json:"rank"`
	// Highlights holds, for each searchable field the caller may read
	// that matched, a snippet of it with the matches in <mark>…</mark>;
	// the rest of the snippet is HTML-escaped.
	Highlights map[string]string `json:"highlights"`
}

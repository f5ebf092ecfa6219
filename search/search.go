// Package search is the contract between kumiko and a full-text search
// engine: an Engine keeps indexes of documents — the searchable text of a
// row, by tenant and id — and answers queries over them, best first, with
// highlighted snippets, in keyset pages.
//
// kumiko's own search (feature.Registrar.Search) runs on PostgreSQL inside
// the read tables, kept in the write transaction; an Engine is what a
// search declared with feature.SearchEngine runs on instead, fed by a
// shared consumer from the source's committed events. The package
// pgsearch is the reference engine on PostgreSQL; searchtest is the
// conformance suite every engine must pass (docs/search.md, "Engines").
package search

import (
	"context"
	"errors"

	"github.com/google/uuid"
)

// Engine is a full-text search engine. Its methods may be called
// concurrently. An index name is a lowercase SQL-style identifier (letters,
// digits and '_', starting with a letter, at most 40 bytes).
type Engine interface {
	// Ensure creates the index or changes it to def. It reports whether
	// the index was created or its fields, weights, filters or
	// configuration changed since the last Ensure: then it holds no
	// documents, and the caller puts every document again.
	Ensure(ctx context.Context, def Index) (fresh bool, err error)
	// Put adds documents to the index or replaces those of the same tenant
	// and id. A document of a tenant is never found by another tenant's
	// query.
	Put(ctx context.Context, index string, docs ...Document) error
	// Delete removes the documents of tenant with the ids; an unknown id
	// is no error.
	Delete(ctx context.Context, index string, tenant uuid.UUID, ids ...string) error
	// Search answers q (see Query for what must match and how hits are
	// ordered). A cursor the engine did not hand out for the same query is
	// ErrInvalidCursor. A cursor is bound to the query's tenant, text,
	// fields and filter.
	Search(ctx context.Context, index string, q Query) (Page, error)
}

// Index is what an index holds and how it matches.
type Index struct {
	// Name names the index.
	Name string
	// Fields maps each searchable field to its weight, 'A' (counts most)
	// to 'D'.
	Fields map[string]byte
	// Filters are the fields a query may filter by (Document.Values).
	Filters []string
	// Config is the text search configuration words are split and
	// normalised with: "simple" (no stemming) or a language's, such as
	// "english", as PostgreSQL names them. An engine maps it to its own
	// notion of a language, or refuses one it has no equivalent of.
	Config string
}

// Document is one row's searchable content.
type Document struct {
	Tenant uuid.UUID
	// ID identifies the document within its tenant (a row's id or its
	// primary key).
	ID string
	// Text holds the searchable fields' text; a missing or empty field
	// matches nothing.
	Text map[string]string
	// Values holds the values of the index's filter fields, as text; a
	// missing one matches no filter on it.
	Values map[string]string
}

// Query is one search of one tenant's documents.
type Query struct {
	Tenant uuid.UUID
	// Text is what the user typed. Its words are its runs of letters and
	// digits (Words). Every word must match one of Fields of a document:
	// as the beginning of a word of the field, or — when no document
	// matches so — with a typo (one wrong, missing or swapped letter in a
	// word of seven or more letters); a page of a search that matched with
	// typos is followed by pages that match so.
	Text string
	// Fields are the searchable fields that may match, rank and be
	// highlighted (those the caller may read); the others are as if the
	// document did not have them. No field matches nothing.
	Fields []string
	// Filter keeps the documents whose Values equal each of its values.
	Filter map[string]string
	// Limit is the most hits of the page (1–200).
	Limit int
	// Cursor is the NextCursor of the previous page; "" for the first.
	Cursor string
}

// Page is a page of a search's hits.
type Page struct {
	// Hits are best first: a match in a field of a higher weight ranks
	// above one in a lower; equal ranks by ID (in byte order). Never nil:
	// empty when nothing matched.
	Hits []Hit
	// NextCursor continues after the page; "" on the last.
	NextCursor string
}

// Hit is one document a search found.
type Hit struct {
	ID string
	// Rank orders the hits: higher is better.
	Rank float64
	// Highlights holds, for each field of the query's Fields that
	// matched, a snippet of its text with the matches in <mark>…</mark>,
	// the rest HTML-escaped.
	Highlights map[string]string
}

// ErrInvalidCursor is the error of a query whose cursor is not one the
// engine handed out for the same search.
var ErrInvalidCursor = errors.New("search: the cursor does not belong to this search")

// MaxWords is the number of a query's words that count.
const MaxWords = 16

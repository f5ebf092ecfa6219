// Package eventtimeline shows that the audit trail needs no configuration:
// a plain CRUD entity, and every change is recorded with who made it, when,
// in which request and as part of which business transaction. The tenant's
// admin reads it with inspect.
package eventtimeline

import "github.com/kumiko-go/kumiko/feature"

// Feature is a shared document store. Nothing in it mentions auditing.
var Feature = feature.Define("documents", func(r *feature.Registrar) {
	r.Entity("document", feature.Fields{
		"title": feature.Text().Required().MaxLen(200),
		"body":  feature.Text().MaxLen(100_000),
	}, feature.SoftDelete())
	r.Crud("document", feature.Access{Write: feature.Roles("Editor"), Read: feature.AnyUser()})
})

// Document is a document as the API answers it.
type Document struct {
	ID      string `json:"id"`
	Version int    `json:"version"`
	Title   string `json:"title"`
	Body    string `json:"body"`
}

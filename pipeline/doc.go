// Package pipeline executes requests against the event store: the write,
// batch, query and command dispatcher with its gates (handler exists →
// access → payload validation → field access → handler), the event-store
// executor that turns CRUD into events plus read-table rows in one
// transaction, inline projections, and the contexts handed to feature code.
//
// Every write is an event; the event, the entity's read row and every inline
// projection change of a request commit together or not at all. Every read
// of events is upcast to the current event version. Every read and write is
// confined to the caller's tenant.
//
// The pipeline never imports the HTTP layer, Echo, fx or go-redis: the HTTP
// adapter calls it, and its errors carry the stable codes of the error
// contract (see [Error]) for the adapter to map to statuses.
package pipeline

// Package pipeline is the event-store executor: it executes requests
// against the event store — writes, batches, queries and commands through
// their gates (handler exists → access → payload validation → field access
// → handler) — turns CRUD into events plus read-table rows in one
// transaction, runs inline projections, rebuilds projections, and hands the
// contexts to feature code. [New] builds the [Executor].
//
// Every write is an event; the event, the entity's read row and every inline
// projection change of a request commit together or not at all. Every read
// of events is upcast to the current event version. Every read and write is
// confined to the caller's tenant.
//
// Asynchronous delivery is not here: the consumer package dispatches
// committed events, and [Executor.Consumers] turns the registry's
// multi-stream projections into its consumers.
//
// The pipeline never imports the HTTP layer, Echo, fx or go-redis: the HTTP
// adapter calls it, and its errors carry the stable codes of the error
// contract (see [Error]) for the adapter to map to statuses.
package pipeline

// Package pipeline is the event-store executor: it executes requests
// against the event store — writes, batches, queries and commands through
// their gates (handler exists → access → payload validation → field access
// → handler) — turns CRUD into events, appends them and applies them to
// the read side in the same transaction, and hands the contexts to feature
// code. [New] builds the [Executor].
//
// The read side — read tables, lists and details, projection queries,
// rebuilds, the row feed — is internal/projection's; the executor's
// methods for it (EnsureSchema, RebuildProjection, ProjectionStatuses,
// RowFeed) hand over to it.
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

// Package eventstore is the PostgreSQL event store: the append-only kumiko_events
// table, optimistic concurrency per stream, tenant-guarded reads and writes,
// as-of reads, upcasting on every read, snapshots, stream archiving, a tail
// of the log that never skips a late commit, pruning behind a caller's guard,
// and the wake-up notification for committed events with its listener. It
// is the only package that names its tables in SQL; the packages that own
// tables next to them migrate those through [Store.MigrateOwned].
//
// Every write has two forms: X(ctx, …) runs in its own transaction (or a single
// autocommitted statement) and XTx(ctx, tx, …) joins the caller's transaction, so
// an event and the read-model rows derived from it commit or roll back together.
//
// A stream belongs to exactly one tenant. Reading or appending to another
// tenant's stream behaves like reading or appending to a stream that does not
// exist: nothing is returned, nothing is changed, and nothing about the foreign
// stream is disclosed.
//
// The store knows nothing of features, HTTP or dispatching; the registry plugs
// its upcaster chain in through [Upcaster].
package eventstore

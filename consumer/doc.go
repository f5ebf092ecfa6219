// Package consumer is the asynchronous event dispatcher: it delivers every
// committed event of the event store, in id order, to consumers, across any
// number of processes, and operates their state.
//
// A [Dispatcher] runs one loop per [Consumer]; each pass locks the
// consumer's state row in kumiko_event_consumers, reads a batch after its
// cursor, applies it and saves the new cursor in one transaction, so a
// handler that writes only in that transaction applies each event exactly
// once in effect. A committed event is never skipped: an event behind an id
// that a transaction still in flight may commit waits until that writer has
// ended (see docs/dispatcher.md for the claim, its proof and its tests).
//
// [Ops] lists and operates the shards (restart, skip, disable, enable) with
// or without a running dispatcher, and prunes old events behind the guard
// that no shard still needs them.
//
// The package knows the event store only: it never imports the executor
// (pipeline) or the registry. The executor turns multi-stream projections
// into consumers.
package consumer

// Package integration carries integration events between apps: the relay
// that publishes what the app's transactions published, the transports (in
// process by default, RabbitMQ), and the inbox that runs each handler once
// per message.
//
// The outbox is the event store: Publish appends the message to
// kumiko_events in the caller's transaction (see pipeline), so it exists
// only if that transaction commits. The relay is a shared consumer of the
// event dispatcher: it hands messages to the transport in id order and its
// cursor moves only after the transport confirmed them, so the dispatcher's
// gap handling keeps it from ever skipping one.
//
// Each handler runs in a write transaction of its own that also records
// (message id, handler) in kumiko_inbox: a redelivered message skips the
// handlers that already committed, and one failing handler never undoes or
// holds back another. A message of an older contract version reaches the
// handlers upcast to the app's version; one of a newer version is kept
// dead. Inbox rows past Config.InboxRetention are swept by every started
// instance, and PruneGuard lets a prune of the outbox remove only what the
// relay passed. Spans: see TracerName. See docs/integration-events.md.
package integration

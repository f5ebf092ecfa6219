// Package idempotency will hold HTTP request idempotency: the Store interface
// with a Redis implementation (go-redis) and an in-memory one, both passing one
// conformance suite.
package idempotency

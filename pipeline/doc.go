// Package pipeline will hold the write, query and command dispatcher, the
// event-store executor that turns CRUD into events plus projection rows in one
// transaction, inline projections, the async event dispatcher with its consumer
// state, retention and projection rebuilds. It never imports the HTTP layer,
// Echo, fx or go-redis.
package pipeline

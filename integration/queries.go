package integration

import (
	"strings"

	"github.com/jackc/pgx/v5"
)

// queries holds the statements on the package's tables (see migrations/),
// qualified with the store's schema.
type queries struct {
	// claim records that a handler handled a message, in the handler's
	// transaction; no row back means it did before. A concurrent claim of
	// the same pair waits for the first transaction and then finds its row
	// (or, after a rollback, takes over).
	claim string
	// sweepInbox deletes up to $2 rows handled before $1 that no other
	// transaction holds.
	sweepInbox string
	// Dead messages.
	putDead, listDead, getDead, dropDead string
	// forgetDead nulls the personal fields of the subject's dead messages.
	forgetDead string
	// The broker bindings of the app's queue.
	bindings, clearBindings, addBinding string
}

func newQueries(schema string) queries {
	r := strings.NewReplacer(
		"{inbox}", pgx.Identifier{schema, "kumiko_inbox"}.Sanitize(),
		"{dead}", pgx.Identifier{schema, "kumiko_integration_dead"}.Sanitize(),
		"{bindings}", pgx.Identifier{schema, "kumiko_integration_bindings"}.Sanitize(),
	)
	return queries{
		claim: r.Replace(`INSERT INTO {inbox} (message_id, handler) VALUES ($1, $2) ON CONFLICT DO NOTHING RETURNING true`),
		sweepInbox: r.Replace(`DELETE FROM {inbox} i USING (
    SELECT message_id, handler FROM {inbox} WHERE handled_at < $1
    ORDER BY handled_at LIMIT $2 FOR UPDATE SKIP LOCKED) old
WHERE i.message_id = old.message_id AND i.handler = old.handler`),
		putDead: r.Replace(`INSERT INTO {dead} (message_id, handler, type, tenant_id, message, attempts, last_error)
VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (message_id, handler) DO UPDATE SET attempts = {dead}.attempts + EXCLUDED.attempts,
    last_error = EXCLUDED.last_error, dead_at = now()`),
		listDead: r.Replace(`SELECT message_id, handler, type, tenant_id, message, attempts, last_error, dead_at
FROM {dead} ORDER BY dead_at, message_id, handler LIMIT $1`),
		getDead: r.Replace(`SELECT message_id, handler, type, tenant_id, message, attempts, last_error, dead_at
FROM {dead} WHERE message_id = $1 AND ($2 = '' OR handler = $2) ORDER BY handler`),
		dropDead: r.Replace(`DELETE FROM {dead} WHERE message_id = $1 AND ($2 = '' OR handler = $2)`),
		// $2 maps each contract with personal fields to its subject field
		// and its personal fields as nulls: {"type": {"subject": "customerId",
		// "nulls": {"email": null}}}; $3 is the subject of tenant $1.
		forgetDead: r.Replace(`UPDATE {dead} d SET message = jsonb_set(d.message, '{payload}', (d.message->'payload') || (c.value->'nulls'))
FROM jsonb_each($2::jsonb) c
WHERE d.tenant_id = $1 AND d.type = c.key AND d.message->'payload'->>(c.value->>'subject') = $3`),
		bindings:      r.Replace(`SELECT type FROM {bindings} WHERE queue = $1 AND exchange = $2 ORDER BY type`),
		clearBindings: r.Replace(`DELETE FROM {bindings} WHERE queue = $1 AND exchange = $2`),
		addBinding:    r.Replace(`INSERT INTO {bindings} (queue, exchange, type) SELECT $1, $2, unnest($3::text[])`),
	}
}

package consumer

import (
	"strings"

	"github.com/jackc/pgx/v5"
)

// queries holds every statement of the package, qualified with the store's
// schema. The package owns kumiko_event_consumers (see migrations/); where a
// statement must see the log and the shard in one snapshot (the pass's
// lock, the lag of a status), it reads the log through the event store's
// SQL functions kumiko_log_*.
type queries struct {
	// The passes.
	register, passLock, save string
	// The operations.
	list, status, opLock, next, restart, skip, setStatus string
	// The prune guard.
	pruneLock, pruneGuard string
	// For the owner of a consumer's handler (a projection rebuild).
	lockShards, moveShards, createShared, lowestCursor string
}

func newQueries(schema string) queries {
	r := strings.NewReplacer(
		"{consumers}", pgx.Identifier{schema, "kumiko_event_consumers"}.Sanitize(),
		"{log}", pgx.Identifier{schema}.Sanitize()+".kumiko_log",
	)
	const cols = `c.last_processed_event_id, c.status, c.attempts, c.last_error, c.gap_horizon, c.gap_writers,
	EXTRACT(EPOCH FROM clock_timestamp() - c.gap_since)::float8, c.updated_at`
	q := queries{
		register: r.Replace(`INSERT INTO {consumers} (name, instance_id, last_processed_event_id) VALUES ($1, $2, $3)
ON CONFLICT (name, instance_id) DO NOTHING`),
		// The row is locked only when a pass may have something to do: a
		// disabled shard, or an idle one with no gap recorded and no
		// committed event after its cursor, is left unlocked, so that an
		// idle pass takes no transaction id and writes no WAL. Otherwise
		// the first branch answers the locked row; when another process
		// holds it (SKIP LOCKED) or it needs no lock, the second answers it
		// unlocked, as the statement's snapshot sees it. head is the newest
		// committed event id; an event committing later wakes the loop
		// again. The gap wait is measured on the database's clock, the one
		// that set gap_since.
		passLock: r.Replace(`WITH h AS (SELECT {log}_head() AS head),
l AS (
	SELECT ` + cols + ` FROM {consumers} c, h
	WHERE c.name = $1 AND c.instance_id = $2
		AND c.status <> 'disabled' AND NOT (c.status = 'idle' AND c.gap_horizon = 0 AND c.last_processed_event_id >= h.head)
	FOR UPDATE OF c SKIP LOCKED)
SELECT true, h.head, l.* FROM l, h
UNION ALL
SELECT false, h.head, ` + cols + ` FROM {consumers} c, h
WHERE c.name = $1 AND c.instance_id = $2 AND NOT EXISTS (SELECT 1 FROM l)`),
		// $9: the shard waits at a gap; $10: a new gap, whose wait starts now.
		save: r.Replace(`UPDATE {consumers} SET last_processed_event_id = $3, status = $4, attempts = $5, last_error = $6,
	gap_horizon = $7, gap_writers = $8,
	gap_since = CASE WHEN NOT $9 THEN NULL WHEN $10 OR gap_since IS NULL THEN now() ELSE gap_since END,
	updated_at = now()
WHERE name = $1 AND instance_id = $2`),
	}
	// The lag of a shard: the events after its cursor up to the head (an
	// index range scan on the primary key, as long as the lag itself), and
	// the age of the first of them. The gap wait of an idle shard, and the
	// backends of the gap's writers still running: every transaction holds
	// the lock on its own virtual transaction id until it ends.
	const statusRow = `
SELECT c.name, c.instance_id, c.last_processed_event_id, h.head,
	{log}_count(c.last_processed_event_id, h.head),
	COALESCE(GREATEST(EXTRACT(EPOCH FROM clock_timestamp() - {log}_first_created_at(c.last_processed_event_id, h.head)), 0)::float8, 0),
	c.status, c.attempts, c.last_error,
	CASE WHEN c.status = 'idle' THEN COALESCE(GREATEST(EXTRACT(EPOCH FROM clock_timestamp() - c.gap_since), 0)::float8, 0) ELSE 0 END,
	CASE WHEN c.status = 'idle' AND c.gap_since IS NOT NULL THEN ARRAY(SELECT l.pid FROM pg_locks l
		WHERE l.locktype = 'virtualxid' AND l.virtualxid = ANY (c.gap_writers) AND l.granted AND l.pid IS NOT NULL ORDER BY l.pid)
	ELSE '{}'::int[] END,
	c.updated_at
FROM {consumers} c CROSS JOIN (SELECT {log}_head() AS head) h`
	q.list = r.Replace(statusRow + `
ORDER BY c.name, c.instance_id`)
	q.status = r.Replace(statusRow + `
WHERE c.name = $1 AND c.instance_id = $2`)
	// FOR UPDATE, not SKIP LOCKED: an operation waits for a running pass.
	q.opLock = r.Replace(`
SELECT last_processed_event_id, status, attempts, gap_horizon, gap_writers FROM {consumers}
WHERE name = $1 AND instance_id = $2 FOR UPDATE`)
	q.next = r.Replace(`SELECT {log}_next($1)`)
	q.restart = r.Replace(`
UPDATE {consumers} SET status = $3, attempts = 0, last_error = '', updated_at = now()
WHERE name = $1 AND instance_id = $2`)
	// The gap bookkeeping is dropped once the cursor is past its horizon,
	// as a pass does.
	q.skip = r.Replace(`
UPDATE {consumers} SET last_processed_event_id = $3, status = $4, attempts = 0, last_error = '',
	gap_horizon = CASE WHEN gap_horizon <= $3 THEN 0 ELSE gap_horizon END,
	gap_writers = CASE WHEN gap_horizon <= $3 THEN '{}'::text[] ELSE gap_writers END,
	gap_since = CASE WHEN gap_horizon <= $3 THEN NULL ELSE gap_since END,
	updated_at = now()
WHERE name = $1 AND instance_id = $2`)
	// A disabled shard waits for nobody: its gap wait starts afresh with
	// the first pass after Enable.
	q.setStatus = r.Replace(`
UPDATE {consumers} SET status = $3, gap_since = NULL, updated_at = now()
WHERE name = $1 AND instance_id = $2`)
	// SHARE conflicts with ROW EXCLUSIVE: a registration (INSERT), a pass
	// saving its cursor and every consumer operation (UPDATE) wait until
	// the prune commits or rolls back, so the shards and cursors the guard
	// reads stay as they are until the delete is committed. Readers
	// (SELECT … FOR UPDATE of a pass) are not held up.
	q.pruneLock = r.Replace(`LOCK TABLE {consumers} IN SHARE MODE`)
	// The shard furthest behind among those the guard counts: every one
	// that is not disabled — dead ones and per-instance rows of stopped
	// processes included.
	q.pruneGuard = r.Replace(`
SELECT name, instance_id, last_processed_event_id FROM {consumers}
WHERE status <> $1
ORDER BY last_processed_event_id, name, instance_id LIMIT 1`)
	q.lockShards = r.Replace(`SELECT instance_id FROM {consumers} WHERE name = $1 FOR UPDATE`)
	// The gap bookkeeping goes with the old cursor.
	q.moveShards = r.Replace(`
UPDATE {consumers} SET last_processed_event_id = $2, gap_horizon = 0, gap_writers = '{}', updated_at = now() WHERE name = $1`)
	q.createShared = r.Replace(`
INSERT INTO {consumers} (name, instance_id, last_processed_event_id) VALUES ($1, $2, $3)`)
	q.lowestCursor = r.Replace(`SELECT COALESCE(min(last_processed_event_id), 0) FROM {consumers} WHERE name = $1`)
	return q
}

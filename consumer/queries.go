package consumer

import (
	"strings"

	"github.com/jackc/pgx/v5"
)

// queries holds every statement of the package, qualified with the store's
// schema. The package owns kumiko_event_consumers, kumiko_instances and
// kumiko_consumer_stuck (see
// migrations/); where a
// statement must see the log and the shard in one snapshot (the pass's
// lock, the lag of a status), it reads the log through the event store's
// SQL functions kumiko_log_*.
type queries struct {
	// The passes.
	registerLock, register, registerShared, passLock, save string
	// The members of shared consumers (see partition.go).
	members, memberJoin, memberLeave string
	// Parked streams (see park.go).
	parkedActions, park, unpark, parkFailed, parkedList, parkedAct string
	// Resets and repartitions (see reset.go).
	reset, resetParked, audit, fence, unfence, shardsOf, dropShards, insertPartitions, moveParked, parkedStreams string
	// Instance liveness (see liveness.go).
	beat, stuckClear, stuckInsert, instances, gcTimeout, gcLockShards, gcLock, gcStale, gcCount, gcShards, gcInstances string
	// The operations.
	list, status, opLock, next, restart, skip, skipExpired, setStatus string
	// The prune guard.
	pruneLock, pruneGuard string
	// For the owner of a consumer's handler (a projection rebuild).
	lockShards, moveShards, createShared, lowestCursor string
}

func newQueries(schema string) queries {
	r := strings.NewReplacer(
		"{consumers}", pgx.Identifier{schema, "kumiko_event_consumers"}.Sanitize(),
		"{instances}", pgx.Identifier{schema, "kumiko_instances"}.Sanitize(),
		"{stuck}", pgx.Identifier{schema, "kumiko_consumer_stuck"}.Sanitize(),
		"{members}", pgx.Identifier{schema, "kumiko_consumer_members"}.Sanitize(),
		"{parked}", pgx.Identifier{schema, "kumiko_consumer_parked"}.Sanitize(),
		"{audit}", pgx.Identifier{schema, "kumiko_consumer_audit"}.Sanitize(),
		"{log}", pgx.Identifier{schema}.Sanitize()+".kumiko_log",
	)
	const cols = `c.last_processed_event_id, c.status, c.attempts, c.last_error, c.gap_horizon, c.gap_writers,
	EXTRACT(EPOCH FROM clock_timestamp() - c.gap_since)::float8, c.updated_at, c.pruned_ack,
	c.partition, c.partitions, c.fence,
	ARRAY(SELECT p.stream FROM {parked} p WHERE p.name = c.name AND p.shard = c.instance_id),
	EXISTS (SELECT 1 FROM {parked} p WHERE p.name = c.name AND p.shard = c.instance_id AND p.action <> '')`
	q := queries{
		// ROW EXCLUSIVE conflicts with the prune's SHARE lock: a
		// registration waits for a running prune to commit, and a new
		// shard then accepts every prune recorded so far (it starts on
		// the events that remain).
		// SHARE ROW EXCLUSIVE also keeps two processes apart that register
		// a new shared consumer's shards at once: the first creates them,
		// the second finds them.
		registerLock: r.Replace(`LOCK TABLE {consumers} IN SHARE ROW EXCLUSIVE MODE`),
		register: r.Replace(`INSERT INTO {consumers} (name, instance_id, last_processed_event_id, pruned_ack)
VALUES ($1, $2, $3, {log}_pruned_up_to(NULL))
ON CONFLICT (name, instance_id) DO NOTHING`),
		// A shared consumer's shards — the shared one, or $4 partitions
		// — unless it has some already: then the stored kind and count hold.
		registerShared: r.Replace(`INSERT INTO {consumers} (name, instance_id, last_processed_event_id, pruned_ack, partition, partitions)
SELECT $1, CASE WHEN $3 <= 1 THEN '` + SharedInstance + `' ELSE '` + partitionPrefix + `' || k || '__' END, $2, {log}_pruned_up_to(NULL),
	k, CASE WHEN $3 <= 1 THEN 0 ELSE $3 END
FROM generate_series(0, GREATEST($3, 1) - 1) k
WHERE NOT EXISTS (SELECT 1 FROM {consumers} WHERE name = $1 AND (instance_id = '` + SharedInstance + `' OR partitions > 0))
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
		// that set gap_since. An expired shard, like a disabled one, is
		// never locked. pruned is the highest id a prune removed among the
		// consumer's types ($3; NULL: all); a caught-up shard behind it
		// (the prune removed the newest events) is locked, to expire.
		passLock: r.Replace(`WITH h AS (SELECT {log}_head() AS head, {log}_pruned_up_to($3::text[]) AS pruned),
l AS (
	SELECT ` + cols + ` FROM {consumers} c, h
	WHERE c.name = $1 AND c.instance_id = $2
		AND c.status NOT IN ('disabled', 'expired') AND NOT (c.status = 'idle' AND c.gap_horizon = 0 AND c.last_processed_event_id >= h.head
			AND NOT (h.pruned > c.last_processed_event_id AND h.pruned > c.pruned_ack)
			AND NOT EXISTS (SELECT 1 FROM {parked} p WHERE p.name = c.name AND p.shard = c.instance_id AND p.action <> ''))
	FOR UPDATE OF c SKIP LOCKED)
SELECT true, h.head, h.pruned, l.* FROM l, h
UNION ALL
SELECT false, h.head, h.pruned, ` + cols + ` FROM {consumers} c, h
WHERE c.name = $1 AND c.instance_id = $2 AND NOT EXISTS (SELECT 1 FROM l)`),
		// $9: the shard waits at a gap; $10: a new gap, whose wait starts now;
		// $11: the pruned id that expired it (0 unless expired).
		save: r.Replace(`UPDATE {consumers} SET last_processed_event_id = $3, status = $4, attempts = $5, last_error = $6,
	gap_horizon = $7, gap_writers = $8, expired_up_to = $11,
	gap_since = CASE WHEN NOT $9 THEN NULL WHEN $10 OR gap_since IS NULL THEN now() ELSE gap_since END,
	updated_at = now()
WHERE name = $1 AND instance_id = $2`),
	}
	// The lag of a shard: the events after its cursor up to the head (an
	// index range scan on the primary key, as long as the lag itself), and
	// the age of the first of them. The gap wait of an idle shard, and the
	// backends of the gap's writers still running: every transaction holds
	// the lock on its own virtual transaction id until it ends.
	// The liveness of a per-instance shard's process: live or stale by its
	// last beat (see staleExpr), unknown when no process of this version has
	// beaten under its id; '' for a shared shard.
	// The handler call stuck on an idle shard's next event, as its process
	// recorded it (see stuck.go): trusted while that process beats and the
	// cursor has not passed the event — a record the process has not yet
	// cleared after the call returned and its pass committed is ignored.
	const statusRow = `
SELECT c.name, c.instance_id, c.last_processed_event_id, h.head,
	{log}_count(c.last_processed_event_id, h.head),
	COALESCE(GREATEST(EXTRACT(EPOCH FROM clock_timestamp() - {log}_first_created_at(c.last_processed_event_id, h.head)), 0)::float8, 0),
	c.status, c.attempts, c.last_error,
	CASE WHEN c.status = 'idle' THEN COALESCE(GREATEST(EXTRACT(EPOCH FROM clock_timestamp() - c.gap_since), 0)::float8, 0) ELSE 0 END,
	CASE WHEN c.status = 'idle' AND c.gap_since IS NOT NULL THEN ARRAY(SELECT l.pid FROM pg_locks l
		WHERE l.locktype = 'virtualxid' AND l.virtualxid = ANY (c.gap_writers) AND l.granted AND l.pid IS NOT NULL ORDER BY l.pid)
	ELSE '{}'::int[] END,
	c.updated_at, c.expired_up_to,
	CASE WHEN c.instance_id = '` + SharedInstance + `' OR c.partitions > 0 THEN '' WHEN i.instance_id IS NULL THEN 'unknown'
		WHEN ` + staleExpr + ` THEN 'stale' ELSE 'live' END,
	i.last_seen,
	COALESCE(st.event_id, 0), COALESCE(st.instance_id, ''), st.since,
	COALESCE(GREATEST(EXTRACT(EPOCH FROM clock_timestamp() - st.since), 0)::float8, 0),
	c.partition, c.partitions, (SELECT count(*)::int FROM {parked} p WHERE p.name = c.name AND p.shard = c.instance_id)
FROM {consumers} c CROSS JOIN (SELECT {log}_head() AS head) h
LEFT JOIN {instances} i ON i.instance_id = c.instance_id
LEFT JOIN LATERAL (SELECT s.event_id, s.instance_id, s.since FROM {stuck} s JOIN {instances} si ON si.instance_id = s.instance_id
	WHERE s.name = c.name AND s.shard_instance = c.instance_id AND c.status = 'idle' AND s.event_id > c.last_processed_event_id
		AND si.last_seen >= now() - GREATEST(si.stale_after, 3 * si.heartbeat)) st ON true`
	staleNow := strings.ReplaceAll(staleExpr, "$1", "NULL")
	q.list = r.Replace(strings.ReplaceAll(statusRow, staleExpr, staleNow) + `
ORDER BY c.name, c.instance_id`)
	q.status = r.Replace(strings.ReplaceAll(statusRow, staleExpr, staleNow) + `
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
	// Skipping an expired shard accepts the loss of the pruned events: it
	// resumes from its cursor, with the oldest retained event after it.
	q.skipExpired = r.Replace(`
UPDATE {consumers} SET status = $3, attempts = 0, last_error = '', pruned_ack = GREATEST(pruned_ack, expired_up_to),
	expired_up_to = 0, updated_at = now()
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
	// The gap bookkeeping goes with the old cursor. A rebuild has read
	// every retained event: an expired shard is idle again, and every
	// prune so far is accepted.
	q.moveShards = r.Replace(`
UPDATE {consumers} SET last_processed_event_id = $2, gap_horizon = 0, gap_writers = '{}',
	status = CASE WHEN status = 'expired' THEN 'idle' ELSE status END,
	last_error = CASE WHEN status = 'expired' THEN '' ELSE last_error END,
	pruned_ack = GREATEST(pruned_ack, {log}_pruned_up_to(NULL)), expired_up_to = 0, updated_at = now()
WHERE name = $1`)
	q.createShared = r.Replace(`
INSERT INTO {consumers} (name, instance_id, last_processed_event_id, pruned_ack) VALUES ($1, $2, $3, {log}_pruned_up_to(NULL))`)
	q.lowestCursor = r.Replace(`SELECT COALESCE(min(last_processed_event_id), 0) FROM {consumers} WHERE name = $1`)
	q.liveness(r)
	q.partitioning(r, staleNow)
	return q
}

// partitioning sets the statements of members, parked streams, resets and
// repartitions.
func (q *queries) partitioning(r *strings.Replacer, stale string) {
	// Byte order (COLLATE "C"), as Go sorts: every process computes the
	// same assignment from the same members.
	q.members = r.Replace(`
SELECT n.name, COALESCE((SELECT max(c.partitions) FROM {consumers} c WHERE c.name = n.name), 0),
	ARRAY(SELECT m.instance_id FROM {members} m JOIN {instances} i ON i.instance_id = m.instance_id
		WHERE m.name = n.name AND NOT (` + stale + `) ORDER BY m.instance_id COLLATE "C")
FROM unnest($1::text[]) AS n(name)`)
	q.memberJoin = r.Replace(`INSERT INTO {members} (name, instance_id) SELECT unnest($1::text[]), $2 ON CONFLICT DO NOTHING`)
	q.memberLeave = r.Replace(`DELETE FROM {members} WHERE instance_id = $1`)

	q.parkedActions = r.Replace(`SELECT stream, event_id, action FROM {parked} WHERE name = $1 AND shard = $2 AND action <> '' ORDER BY event_id`)
	q.park = r.Replace(`INSERT INTO {parked} (name, shard, stream, event_id, event_type, last_error, attempts) VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (name, shard, stream) DO UPDATE SET event_id = EXCLUDED.event_id, event_type = EXCLUDED.event_type,
	last_error = EXCLUDED.last_error, attempts = EXCLUDED.attempts, action = '', since = now()`)
	q.unpark = r.Replace(`DELETE FROM {parked} WHERE name = $1 AND shard = $2 AND stream = $3`)
	q.parkFailed = r.Replace(`UPDATE {parked} SET action = '', event_id = $4, event_type = $5, last_error = $6, attempts = attempts + 1
WHERE name = $1 AND shard = $2 AND stream = $3`)
	q.parkedList = r.Replace(`SELECT name, shard, stream, event_id, event_type, last_error, attempts, since, action FROM {parked}
WHERE $1 = '' OR name = $1 ORDER BY name, since, stream`)
	q.parkedAct = r.Replace(`UPDATE {parked} SET action = $3 WHERE name = $1 AND stream = $2
RETURNING name, shard, stream, event_id, event_type, last_error, attempts, since, action`)

	q.shardsOf = r.Replace(`SELECT instance_id, last_processed_event_id, status, partitions FROM {consumers} WHERE name = $1
ORDER BY instance_id FOR UPDATE`)
	q.reset = r.Replace(`UPDATE {consumers} SET last_processed_event_id = $2, status = CASE WHEN status = 'disabled' THEN status ELSE 'idle' END,
	attempts = 0, last_error = '', gap_horizon = 0, gap_writers = '{}', gap_since = NULL, fence = 0, expired_up_to = 0,
	pruned_ack = GREATEST(pruned_ack, {log}_pruned_up_to(NULL)), updated_at = now()
WHERE name = $1`)
	q.resetParked = r.Replace(`DELETE FROM {parked} WHERE name = $1 AND event_id > $2`)
	q.audit = r.Replace(`INSERT INTO {audit} (name, action, actor, detail) VALUES ($1, $2, $3, $4)`)
	q.fence = r.Replace(`UPDATE {consumers} SET fence = $2, updated_at = now() WHERE name = $1`)
	q.unfence = r.Replace(`UPDATE {consumers} SET fence = 0, updated_at = now() WHERE name = $1`)
	q.dropShards = r.Replace(`DELETE FROM {consumers} WHERE name = $1`)
	q.insertPartitions = r.Replace(`INSERT INTO {consumers} (name, instance_id, last_processed_event_id, pruned_ack, partition, partitions)
SELECT $1, CASE WHEN $3 <= 1 THEN '` + SharedInstance + `' ELSE '` + partitionPrefix + `' || k || '__' END, $2, {log}_pruned_up_to(NULL),
	k, CASE WHEN $3 <= 1 THEN 0 ELSE $3 END
FROM generate_series(0, GREATEST($3, 1) - 1) k`)
	q.parkedStreams = r.Replace(`SELECT stream FROM {parked} WHERE name = $1`)
	q.moveParked = r.Replace(`UPDATE {parked} SET shard = u.shard FROM unnest($2::text[], $3::text[]) AS u(stream, shard)
WHERE name = $1 AND {parked}.stream = u.stream`)
}

// staleExpr tells a stale instance row i: its last beat is older than the
// threshold — $1 when given, else the instance's own stale_after — and
// than three of its beats, so that no threshold makes a beating process
// stale.
const staleExpr = `i.last_seen < now() - GREATEST(COALESCE($1::interval, i.stale_after), 3 * i.heartbeat)`

// liveness sets the statements of the instance table.
func (q *queries) liveness(r *strings.Replacer) {
	// One row write per beat. inserted is true when the row did not exist:
	// on the first beat, or after a gc removed the instance as stale.
	q.beat = r.Replace(`
INSERT INTO {instances} AS i (instance_id, host, version, started_at, last_seen, heartbeat, stale_after)
VALUES ($1, $2, $3, $4, now(), $5, $6)
ON CONFLICT (instance_id) DO UPDATE SET last_seen = now(), host = EXCLUDED.host, version = EXCLUDED.version,
	started_at = EXCLUDED.started_at, heartbeat = EXCLUDED.heartbeat, stale_after = EXCLUDED.stale_after
RETURNING i.xmax = 0`)
	// A process replaces its stuck records at once (see recordStuck); a
	// record of another process for the same shard (a shared shard whose
	// process went away) gives way.
	q.stuckClear = r.Replace(`DELETE FROM {stuck} WHERE instance_id = $1`)
	q.stuckInsert = r.Replace(`
INSERT INTO {stuck} (name, shard_instance, instance_id, event_id, since)
SELECT u.name, u.shard, $1, u.event_id, u.since FROM unnest($2::text[], $3::text[], $4::bigint[], $5::timestamptz[]) AS u(name, shard, event_id, since)
ON CONFLICT (name, shard_instance) DO UPDATE SET instance_id = EXCLUDED.instance_id, event_id = EXCLUDED.event_id, since = EXCLUDED.since`)
	// Every instance known, by its record or only by its per-instance
	// shards (unknown liveness), with whether it is stale.
	q.instances = r.Replace(`
SELECT i.instance_id, i.host, i.version, i.started_at, i.last_seen, ` + strings.ReplaceAll(staleExpr, "$1", "NULL") + `, true
FROM {instances} i
UNION ALL
SELECT DISTINCT c.instance_id, '', '', NULL::timestamptz, NULL::timestamptz, true, false FROM {consumers} c
WHERE c.instance_id <> '` + SharedInstance + `' AND c.partitions = 0 AND NOT EXISTS (SELECT 1 FROM {instances} i WHERE i.instance_id = c.instance_id)
ORDER BY 1`)
	// A gc waits for a running prune (whose SHARE lock conflicts with
	// ROW EXCLUSIVE) before it locks the instances, so beats are not held
	// up meanwhile; and it gives up rather than hold them up for long (a
	// rebuild holding the shards' rows): a beat that waits too long would
	// make its process look stale to the next gc.
	q.gcTimeout = `SET LOCAL lock_timeout = '5s'`
	q.gcLockShards = r.Replace(`LOCK TABLE {consumers} IN ROW EXCLUSIVE MODE`)
	// SHARE ROW EXCLUSIVE conflicts with itself and with the beats' row
	// writes: a beat waits until the gc has committed, and then finds its
	// row gone (see Dispatcher.beat); a process starting meanwhile records
	// itself before it registers its shards, so the gc never takes its
	// shards for those of an unknown instance.
	q.gcLock = r.Replace(`LOCK TABLE {instances} IN SHARE ROW EXCLUSIVE MODE`)
	// $1: the threshold (NULL: each instance's own); $2: include the
	// instances of unknown liveness.
	q.gcStale = r.Replace(`
SELECT i.instance_id FROM {instances} i WHERE ` + staleExpr + `
UNION
SELECT DISTINCT c.instance_id FROM {consumers} c
WHERE $2 AND c.instance_id <> '` + SharedInstance + `' AND c.partitions = 0 AND NOT EXISTS (SELECT 1 FROM {instances} i WHERE i.instance_id = c.instance_id)
ORDER BY 1`)
	q.gcCount = r.Replace(`SELECT count(*) FROM {consumers} WHERE instance_id = ANY($1) AND instance_id <> '` + SharedInstance + `' AND partitions = 0`)
	q.gcShards = r.Replace(`DELETE FROM {consumers} WHERE instance_id = ANY($1) AND instance_id <> '` + SharedInstance + `' AND partitions = 0`)
	q.gcInstances = r.Replace(`WITH m AS (DELETE FROM {members} WHERE instance_id = ANY($1))
DELETE FROM {instances} WHERE instance_id = ANY($1)`)
}

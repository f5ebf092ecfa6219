package eventstore

import (
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// queries holds every SQL statement of the store, qualified with its schema.
type queries struct {
	appendNew, appendNext, appendMany, appendManyNew string
	appendNewAlone, appendNextAlone                  string
	// The same with the data keys of personal fields (keyGuard): of many
	// subjects [0] and of one [1].
	keyedNew, keyedNext, keyedNewAlone, keyedNextAlone [2]string
	keyedMany, keyedManyNew                            [2]string
	storedKeys                                         string
	streamHead                                         string
	load, readAll                                      string
	loadSnapshot, loadAfterSnapshot, saveSnap          string
	archive, restore, isArchived                       string
	notify, listen                                     string
	lastID, writers, readRange                         string
	head, tailStart                                    string
	filteredHead, filteredCount                        string
	filteredOldest                                     string
	pruneNewest, pruneCount, pruneDelete               string
	refuseUnknownVersions                              string
	subjectKeys, forgetSubject, keyChecks, addKeyCheck string
	staleKeys, rewrapKey, dropKeyChecks                string
	subjectEvents                                      string
	subjectRequests                                    string
}

const eventColumns = `id, aggregate_id, aggregate_type, tenant_id, version, type, event_version, payload, metadata, created_at, created_by, ` +
	`personal, ` + keysOfRow

// keysOfRow is the wrapped keys of the subjects of a row's sealed fields
// (its tenant_id and personal columns), in the reading statement's
// snapshot: subject → [kek id, hex of the wrapped key], a forgotten
// subject missing; NULL for a row without. It is what the function
// kumiko_subject_keys_of (migration 8, dropped by 9) answered, written out
// as a subquery, which is planned once with the statement where each call
// of the SQL function planned the function's query again; and each
// subject's key is looked up on its own, by the whole primary key, where
// the function's IN (subquery) had the planner expect a hundred subjects
// and — in a plan cached while the table was small — read every key of
// the tenant per row.
const keysOfRow = `CASE WHEN personal IS NOT NULL THEN (
	SELECT jsonb_strip_nulls(jsonb_object_agg(p.subject, (
		SELECT jsonb_build_array(k.kek_id, encode(k.wrapped, 'hex')) FROM {keys} k
		WHERE k.tenant_id = {row}.tenant_id AND k.subject = p.subject)))
	FROM (SELECT DISTINCT value FROM jsonb_each_text({row}.personal)) AS p(subject)) END`

// The single-event appends (see queries.appendNew), in parts: the insert,
// the conflict clause that keeps a caller's transaction usable after a lost
// race, and what the append returns.
const (
	appendNew = `
INSERT INTO {events} (aggregate_id, aggregate_type, tenant_id, version, type, event_version, payload, metadata, created_by, personal)
VALUES ($1, $2, $3, 1, $4, $5, $6::jsonb, $7::jsonb, $8, $9::jsonb)`
	appendNext = `
INSERT INTO {events} (aggregate_id, aggregate_type, tenant_id, version, type, event_version, payload, metadata, created_by, personal)
SELECT $1, $2, $3, $4, $5, $6, $7::jsonb, $8::jsonb, $9, $10::jsonb
WHERE EXISTS (SELECT 1 FROM {events} e WHERE e.aggregate_id = $1 AND e.version = $4 - 1 AND e.tenant_id = $3)
	AND NOT EXISTS (SELECT 1 FROM {archived} a WHERE a.aggregate_id = $1)`
	onConflict = `
ON CONFLICT (aggregate_id, version) DO NOTHING`
	returning = `
RETURNING id, created_at`
	// appendNew as a SELECT, which can carry a condition.
	appendNewSelect = `
INSERT INTO {events} (aggregate_id, aggregate_type, tenant_id, version, type, event_version, payload, metadata, created_by, personal)
SELECT $1, $2, $3, 1, $4, $5, $6::jsonb, $7::jsonb, $8, $9::jsonb`
)

// keyGuard returns the head and the condition of an append whose personal
// fields are sealed with the data keys it names in its parameters after
// its own n: tenant, subject, KEK id, wrapped key, and whether the key is
// new — arrays of them, or (one) those of a single subject. It inserts the
// new keys (a subject's first), and its insert carries the condition,
// which holds only when every new key was inserted and every other one is
// stored as named — locked until the append commits, so that a forget
// deleting it waits and the append never commits an event sealed with a
// key a forget has deleted. A new key losing to one a concurrent append
// inserted first, and a key forgotten or re-wrapped since it was seen,
// fail the condition: the append inserts nothing, and the caller seals
// again with the keys stored (storedKeys).
//
// The key rows are locked as found by their primary key alone, and
// compared with the keys named outside the locking subquery: with the
// comparison inside, a plan made while statistics lagged the table's
// growth used the index on kek_id too, reading every key of the KEK.
func keyGuard(n int, one bool) (head, cond string) {
	p := func(i int) string { return "$" + strconv.Itoa(n+i) }
	if one {
		// The common append: one subject, scalar parameters, no counts.
		head = `
WITH ins AS (
	INSERT INTO {keys} (tenant_id, subject, kek_id, wrapped)
	SELECT ` + p(1) + `::uuid, ` + p(2) + `::text, ` + p(3) + `::text, ` + p(4) + `::bytea WHERE ` + p(5) + `::bool
	ON CONFLICT (tenant_id, subject) DO NOTHING
	RETURNING 1),
held AS (
	SELECT kek_id, wrapped FROM {keys}
	WHERE NOT ` + p(5) + `::bool AND tenant_id = ` + p(1) + `::uuid AND subject = ` + p(2) + `::text
	FOR KEY SHARE)`
		cond = `(EXISTS (SELECT FROM ins) OR EXISTS (SELECT FROM held WHERE kek_id = ` + p(3) + `::text AND wrapped = ` + p(4) + `::bytea))`
		return head, cond
	}
	head = `
WITH k AS (SELECT * FROM unnest(` + p(1) + `::uuid[], ` + p(2) + `::text[], ` + p(3) + `::text[], ` + p(4) + `::bytea[], ` + p(5) + `::bool[])
	AS k(tenant_id, subject, kek_id, wrapped, new)),
ins AS (
	INSERT INTO {keys} (tenant_id, subject, kek_id, wrapped)
	SELECT tenant_id, subject, kek_id, wrapped FROM k WHERE new
	ON CONFLICT (tenant_id, subject) DO NOTHING
	RETURNING 1),
held AS (
	SELECT 1 FROM k, LATERAL (SELECT s.kek_id, s.wrapped FROM {keys} s
		WHERE s.tenant_id = k.tenant_id AND s.subject = k.subject
		FOR KEY SHARE) AS s
	WHERE NOT k.new AND s.kek_id = k.kek_id AND s.wrapped = k.wrapped)`
	cond = `(SELECT count(*) FROM ins) + (SELECT count(*) FROM held) = (SELECT count(*) FROM k)`
	return head, cond
}

func newQueries(schema string) queries {
	s := pgx.Identifier{schema}.Sanitize()
	cols := strings.NewReplacer("{keys}", s+".kumiko_subject_keys", "{row}", s+".kumiko_events").Replace(eventColumns)
	r := strings.NewReplacer(
		// The subjects of a row's sealed fields, as the index
		// kumiko_events_subjects has them.
		"{subjectsOf}", `jsonb_path_query_array(personal, '$.*')`,
		"{keys}", s+".kumiko_subject_keys",
		"{keyChecks}", s+".kumiko_key_checks",
		"{events}", s+".kumiko_events",
		"{snapshots}", s+".kumiko_snapshots",
		"{archived}", s+".kumiko_archived_streams",
		"{pruned}", s+".kumiko_pruned_types",
		"{cols}", cols,
	)
	// Many events of one or many streams, all or none: the rows, then the
	// order they are inserted (and numbered) in.
	const manyRows = `
INSERT INTO {events} (aggregate_id, aggregate_type, tenant_id, version, type, event_version, payload, metadata, created_by, personal)
SELECT v.aggregate_id, v.aggregate_type, v.tenant_id, v.version, v.type, v.event_version, v.payload::jsonb, v.metadata::jsonb, v.created_by, v.personal::jsonb
FROM unnest($1::uuid[], $2::text[], $3::uuid[], $4::int[], $5::text[], $6::int[], $7::text[], $8::text[], $9::text[], $10::text[])
	WITH ORDINALITY AS v(aggregate_id, aggregate_type, tenant_id, version, type, event_version, payload, metadata, created_by, personal, ord)
`
	const manyEnd = `ORDER BY v.ord
RETURNING id, aggregate_id, version, created_at`
	const manyCheck = `WHERE NOT EXISTS (
	SELECT 1 FROM unnest($11::uuid[], $12::uuid[], $13::int[]) AS s(aggregate_id, tenant_id, expected)
	WHERE s.expected > 0 AND (
		NOT EXISTS (SELECT 1 FROM {events} e
			WHERE e.aggregate_id = s.aggregate_id AND e.version = s.expected AND e.tenant_id = s.tenant_id)
		OR EXISTS (SELECT 1 FROM {archived} a WHERE a.aggregate_id = s.aggregate_id))
)
`
	// The appends with personal fields: each with the key guard after its
	// own parameters.
	keyed := func(n int, insert, join, end string) [2]string {
		var out [2]string
		for i, one := range []bool{false, true} {
			head, cond := keyGuard(n, one)
			out[i] = r.Replace(head + insert + "\n" + join + " " + cond + end)
		}
		return out
	}
	return queries{
		// The appends write versions the client computed from the expected
		// version. A stream is at version n exactly when its event n exists
		// and n+1 does not; the unique (aggregate_id, version) index refuses
		// an n+1 that exists, including one a concurrent writer inserted
		// first, so only "n exists for this tenant" and "not archived" are
		// checked here. A new stream needs neither check: an archived or
		// foreign stream already has a version 1. The two single-event
		// statements are separate so each keeps a cached generic plan. A lost
		// race inserts nothing instead of raising, so the transaction stays
		// usable and the loser's head is read in it.
		appendNew:  r.Replace(appendNew + onConflict + returning),
		appendNext: r.Replace(appendNext + onConflict + returning),
		// The same for an append that is its own transaction: a lost race
		// raises and ends it, which costs nothing there, and the insert
		// skips the speculative insertion ON CONFLICT needs (an arbiter
		// index probe and a second WAL record per event).
		appendNewAlone:  r.Replace(appendNew + returning),
		appendNextAlone: r.Replace(appendNext + returning),

		// Many events of one or many streams, all or none.
		appendMany: r.Replace(manyRows + manyCheck + manyEnd),
		// The same when every stream is new: the unique index on
		// (aggregate_id, version) is the whole check, and the statement
		// without the stream check is markedly cheaper.
		appendManyNew: r.Replace(manyRows + manyEnd),

		keyedNew:       keyed(9, appendNewSelect, "WHERE", onConflict+returning),
		keyedNext:      keyed(10, appendNext, "AND", onConflict+returning),
		keyedNewAlone:  keyed(9, appendNewSelect, "WHERE", returning),
		keyedNextAlone: keyed(10, appendNext, "AND", returning),
		keyedMany:      keyed(13, manyRows+manyCheck, "AND", "\n"+manyEnd),
		keyedManyNew:   keyed(10, manyRows, "WHERE", "\n"+manyEnd),
		// The data keys stored for subjects $2 of tenants $1.
		storedKeys: r.Replace(`SELECT k.tenant_id, k.subject, k.kek_id, k.wrapped FROM {keys} k
JOIN unnest($1::uuid[], $2::text[]) AS u(tenant_id, subject) ON k.tenant_id = u.tenant_id AND k.subject = u.subject`),

		refuseUnknownVersions: `SELECT ` + s + `.kumiko_refuse_unknown_versions($1, $2, $3, $4)`,

		// The data keys of subjects $2 of tenant $1: each one stored, or
		// else the one offered in $3 (wrapped by KEK $4), inserted. A
		// subject whose key a concurrent transaction inserts after this
		// statement's snapshot is missing from the answer: ask again.
		subjectKeys: r.Replace(`
WITH offered AS (SELECT * FROM unnest($2::text[], $3::bytea[]) AS o(subject, wrapped)),
ins AS (
	INSERT INTO {keys} (tenant_id, subject, kek_id, wrapped)
	SELECT $1, o.subject, $4, o.wrapped FROM offered o WHERE o.wrapped IS NOT NULL
	ON CONFLICT (tenant_id, subject) DO NOTHING
	RETURNING subject, kek_id, wrapped)
SELECT subject, kek_id, wrapped FROM ins
UNION ALL
SELECT k.subject, k.kek_id, k.wrapped FROM {keys} k JOIN offered o USING (subject) WHERE k.tenant_id = $1`),
		// The events of tenant $1 with sealed fields of subject $2, after
		// id $3, a page of $4.
		subjectEvents: r.Replace(`SELECT {cols} FROM {events}
WHERE tenant_id = $1 AND personal IS NOT NULL AND {subjectsOf} @> jsonb_build_array($2::text) AND id > $3
ORDER BY id LIMIT $4`),
		// The requests (user, idempotency key) whose events of tenant $1
		// hold sealed fields of subject $2.
		subjectRequests: r.Replace(`SELECT DISTINCT coalesce(metadata->>'userId', ''), metadata->>'idempotencyKey' FROM {events}
WHERE tenant_id = $1 AND personal IS NOT NULL AND {subjectsOf} @> jsonb_build_array($2::text) AND metadata ? 'idempotencyKey'`),
		forgetSubject: r.Replace(`DELETE FROM {keys} WHERE tenant_id = $1 AND subject = $2`),
		keyChecks:     r.Replace(`SELECT kek_id, wrapped FROM {keyChecks} ORDER BY kek_id`),
		// A page of data keys wrapped by another KEK than $1, locked so
		// that a concurrent rotation skips them; the re-wrap of one only if
		// it is still what was read (a forget in between deletes it).
		staleKeys: r.Replace(`SELECT tenant_id, subject, kek_id, wrapped FROM {keys} WHERE kek_id <> $1
ORDER BY tenant_id, subject LIMIT $2 FOR UPDATE SKIP LOCKED`),
		rewrapKey: r.Replace(`UPDATE {keys} SET kek_id = $3, wrapped = $4 WHERE tenant_id = $1 AND subject = $2`),
		// The checks of KEKs no data key is wrapped by any more.
		dropKeyChecks: r.Replace(`DELETE FROM {keyChecks} c WHERE c.kek_id <> $1
	AND NOT EXISTS (SELECT 1 FROM {keys} k WHERE k.kek_id = c.kek_id)`),
		addKeyCheck: r.Replace(`INSERT INTO {keyChecks} (kek_id, wrapped) VALUES ($1, $2) ON CONFLICT (kek_id) DO NOTHING`),

		streamHead: r.Replace(`
SELECT h.tenant_id, h.aggregate_type, h.version,
	EXISTS (SELECT 1 FROM {archived} a WHERE a.aggregate_id = $1)
FROM (SELECT tenant_id, aggregate_type, version FROM {events}
	WHERE aggregate_id = $1 ORDER BY version DESC LIMIT 1) h`),

		load: r.Replace(`
SELECT {cols} FROM {events}
WHERE aggregate_id = $1 AND tenant_id = $2 AND version > $3 AND version <= $4
	AND ($5::timestamptz IS NULL OR created_at <= $5)
	AND ($6 OR NOT EXISTS (SELECT 1 FROM {archived} a WHERE a.aggregate_id = $1))
ORDER BY version`),

		readAll: r.Replace(`
SELECT {cols} FROM {events}
WHERE id > $1
	AND ($2::uuid IS NULL OR tenant_id = $2)
	AND ($3::text[] IS NULL OR aggregate_type = ANY ($3))
	AND ($4::text[] IS NULL OR type = ANY ($4))
ORDER BY id LIMIT $5`),

		loadSnapshot: r.Replace(`
SELECT aggregate_type, version, state, snapshot_version, created_at,
	personal, ` + strings.ReplaceAll(keysOfRow, "{row}", "{snapshots}") + `
FROM {snapshots}
WHERE aggregate_id = $1 AND tenant_id = $2 AND snapshot_version = $3 AND version <= $4
	AND NOT EXISTS (SELECT 1 FROM {archived} a WHERE a.aggregate_id = $1)
ORDER BY version DESC LIMIT 1`),

		// The delta after the newest matching snapshot; sent in the same round
		// trip as loadSnapshot.
		loadAfterSnapshot: r.Replace(`
SELECT {cols} FROM {events}
WHERE aggregate_id = $1 AND tenant_id = $2 AND version <= $4
	AND version > COALESCE((SELECT max(version) FROM {snapshots}
		WHERE aggregate_id = $1 AND tenant_id = $2 AND snapshot_version = $3 AND version <= $4), 0)
	AND NOT EXISTS (SELECT 1 FROM {archived} a WHERE a.aggregate_id = $1)
ORDER BY version`),

		// A snapshot is only stored for an event that exists in the tenant's stream.
		saveSnap: r.Replace(`
INSERT INTO {snapshots} (aggregate_id, tenant_id, aggregate_type, version, state, snapshot_version, personal)
SELECT $1, $2, e.aggregate_type, $3, $4, $5, $6::jsonb FROM {events} e
WHERE e.aggregate_id = $1 AND e.tenant_id = $2 AND e.version = $3
ON CONFLICT (aggregate_id, snapshot_version, version) DO UPDATE
	SET state = EXCLUDED.state, personal = EXCLUDED.personal, created_at = now()
RETURNING aggregate_type`),

		archive: r.Replace(`
WITH s AS (
	SELECT aggregate_type FROM {events} WHERE aggregate_id = $1 AND tenant_id = $2 LIMIT 1
), ins AS (
	INSERT INTO {archived} (aggregate_id, tenant_id, aggregate_type, archived_by, reason)
	SELECT $1, $2, s.aggregate_type, $3, $4 FROM s
	ON CONFLICT (aggregate_id) DO NOTHING
)
SELECT EXISTS (SELECT 1 FROM s)`),

		restore: r.Replace(`
WITH del AS (
	DELETE FROM {archived} WHERE aggregate_id = $1 AND tenant_id = $2
)
SELECT EXISTS (SELECT 1 FROM {events} WHERE aggregate_id = $1 AND tenant_id = $2)`),

		isArchived: r.Replace(`
SELECT EXISTS (SELECT 1 FROM {archived} WHERE aggregate_id = $1 AND tenant_id = $2)`),

		notify: `SELECT pg_notify($1, $2)`,

		// LISTEN takes no parameters.
		listen: "LISTEN " + pgx.Identifier{notifyChannel(schema)}.Sanitize(),

		// The identity column's sequence keeps its default name.
		lastID: r.Replace(`SELECT COALESCE(pg_sequence_last_value('{events}_id_seq'::regclass), 0)`),

		writers: r.Replace(`
SELECT virtualtransaction FROM pg_locks
WHERE locktype = 'relation' AND relation = '{events}'::regclass AND mode = 'RowExclusiveLock'
	AND granted AND pid IS DISTINCT FROM pg_backend_pid()`),

		readRange: r.Replace(`SELECT {cols} FROM {events} WHERE id > $1 AND id <= $2 ORDER BY id LIMIT $3`),

		// The highest visible id, and the id before the last $4 events
		// matching readAll's filters: where a tail starts.
		head: r.Replace(`SELECT COALESCE(max(id), 0) FROM {events}`),
		tailStart: r.Replace(`
SELECT COALESCE(min(id) - 1, 0) FROM (SELECT id FROM {events}
WHERE ($1::uuid IS NULL OR tenant_id = $1) AND ($2::text[] IS NULL OR aggregate_type = ANY ($2))
	AND ($3::text[] IS NULL OR type = ANY ($3))
ORDER BY id DESC LIMIT $4) last`),
		// The highest id, and the count of events after $4 up to $5 (0: no
		// bound), among those matching readAll's filters ($1–$3).
		filteredHead: r.Replace(`
SELECT COALESCE(max(id), 0) FROM {events}
WHERE ($1::uuid IS NULL OR tenant_id = $1) AND ($2::text[] IS NULL OR aggregate_type = ANY ($2))
	AND ($3::text[] IS NULL OR type = ANY ($3))`),
		filteredCount: r.Replace(`
SELECT count(*) FROM {events}
WHERE ($1::uuid IS NULL OR tenant_id = $1) AND ($2::text[] IS NULL OR aggregate_type = ANY ($2))
	AND ($3::text[] IS NULL OR type = ANY ($3)) AND id > $4 AND ($5 = 0 OR id <= $5)`),
		// The creation time of the first event after $4 matching readAll's
		// filters ($1–$3).
		filteredOldest: r.Replace(`
SELECT created_at FROM {events}
WHERE ($1::uuid IS NULL OR tenant_id = $1) AND ($2::text[] IS NULL OR aggregate_type = ANY ($2))
	AND ($3::text[] IS NULL OR type = ANY ($3)) AND id > $4
ORDER BY id LIMIT 1`),
		// Prune: $1 = OlderThan, $2 = aggregate types, $3 = the highest id
		// the guard lets go. pruneNewest finds what the guard is asked
		// about; the count (a dry run) and the delete carry id <= $3, since
		// an event committing after pruneNewest may match the rest.
		pruneNewest: r.Replace(`
SELECT COALESCE(max(id), 0) FROM {events} WHERE created_at < $1 AND aggregate_type = ANY($2)`),
		pruneCount: r.Replace(`
SELECT aggregate_type, count(*), max(id) FROM {events} WHERE ` + pruneWhere + `
GROUP BY aggregate_type`),
		// The delete records, per event type, the highest id it removed
		// (kumiko_pruned_types): readers behind it know events are gone.
		pruneDelete: r.Replace(`
WITH d AS (DELETE FROM {events} WHERE ` + pruneWhere + ` RETURNING id, aggregate_type, type),
w AS (INSERT INTO {pruned} AS p (type, pruned_up_to) SELECT type, max(id) FROM d GROUP BY type
	ON CONFLICT (type) DO UPDATE SET pruned_up_to = GREATEST(p.pruned_up_to, EXCLUDED.pruned_up_to), pruned_at = now())
SELECT aggregate_type, count(*), max(id) FROM d GROUP BY aggregate_type`),
	}
}

const pruneWhere = `created_at < $1 AND aggregate_type = ANY($2) AND id <= $3`

// Statements of the migration runner, the same for every schema.
const (
	// One lock per schema serializes the migrations of every owner.
	sqlMigrateLock = `SELECT pg_advisory_xact_lock(hashtextextended('kumiko.migrate.' || $1, 0))`
	// {{table}} is the quoted, schema-qualified bookkeeping table.
	sqlMigrationsTable = `CREATE TABLE IF NOT EXISTS {{table}} (
	version integer PRIMARY KEY,
	name text NOT NULL,
	applied_at timestamptz NOT NULL DEFAULT now())`
)

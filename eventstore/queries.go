package eventstore

import (
	"strings"

	"github.com/jackc/pgx/v5"
)

// queries holds every SQL statement of the store, qualified with its schema.
type queries struct {
	append, streamHead                         string
	load, readAll                              string
	loadSnapshot, loadAfterSnapshot, saveSnap  string
	archive, restore, isArchived               string
	notify                                     string
}

const eventColumns = `id, aggregate_id, aggregate_type, tenant_id, version, type, event_version, payload, metadata, created_at, created_by`

func newQueries(schema string) queries {
	s := pgx.Identifier{schema}.Sanitize()
	r := strings.NewReplacer(
		"{events}", s+".kumiko_events",
		"{snapshots}", s+".kumiko_snapshots",
		"{archived}", s+".kumiko_archived_streams",
		"{cols}", eventColumns,
	)
	return queries{
		// One statement appends to any number of streams: it checks every
		// stream's owner, archive marker and expected version and inserts all
		// events or none. A concurrent writer that inserted the same version
		// first makes the unique (aggregate_id, version) index refuse ours.
		append: r.Replace(`
WITH s AS (
	SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::int[])
		WITH ORDINALITY AS s(aggregate_id, tenant_id, aggregate_type, expected, idx)
), h AS (
	SELECT s.*, head.tenant_id AS owner, COALESCE(head.version, 0) AS current,
		EXISTS (SELECT 1 FROM {archived} a WHERE a.aggregate_id = s.aggregate_id) AS archived
	FROM s LEFT JOIN LATERAL (
		SELECT e.tenant_id, e.version FROM {events} e
		WHERE e.aggregate_id = s.aggregate_id ORDER BY e.version DESC LIMIT 1
	) head ON true
), refused AS (
	SELECT 1 FROM h
	WHERE h.archived OR (h.owner IS NOT NULL AND h.owner <> h.tenant_id)
		OR (h.expected >= 0 AND h.current <> h.expected)
)
INSERT INTO {events} (aggregate_id, aggregate_type, tenant_id, version, type, event_version, payload, metadata, created_by)
SELECT h.aggregate_id, h.aggregate_type, h.tenant_id,
	(CASE WHEN h.expected >= 0 THEN h.expected ELSE h.current END)
		+ (row_number() OVER (PARTITION BY v.sidx ORDER BY v.ord))::int,
	v.type, v.event_version, v.payload::jsonb, v.metadata::jsonb, v.created_by
FROM unnest($5::int[], $6::text[], $7::int[], $8::text[], $9::text[], $10::text[])
	WITH ORDINALITY AS v(sidx, type, event_version, payload, metadata, created_by, ord)
JOIN h ON h.idx = v.sidx
WHERE NOT EXISTS (SELECT 1 FROM refused)
ORDER BY v.ord
RETURNING id, aggregate_id, version, created_at`),

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
SELECT aggregate_type, version, state, snapshot_version, created_at FROM {snapshots}
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
INSERT INTO {snapshots} (aggregate_id, tenant_id, aggregate_type, version, state, snapshot_version)
SELECT $1, $2, e.aggregate_type, $3, $4, $5 FROM {events} e
WHERE e.aggregate_id = $1 AND e.tenant_id = $2 AND e.version = $3
ON CONFLICT (aggregate_id, snapshot_version, version) DO UPDATE
	SET state = EXCLUDED.state, created_at = now()
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
	}
}

package projection

import (
	"strings"

	"github.com/jackc/pgx/v5"
)

// queries holds the statements on the read side's own tables, qualified
// with the store's schema: the projections' rebuild state and quarantine
// (see pipeline's migrations). The features' read tables are built per
// entity (Entity) and per rebuild.
type queries struct {
	// Projection rebuild state.
	markRebuilding, clearQuarantine, quarantine, progress, markReady, markFailed, projectionState string
	// Projection tables created after their events.
	markIncomplete, incompleteUntil string
}

func newQueries(schema string) queries {
	r := strings.NewReplacer(
		"{projections}", pgx.Identifier{schema, "kumiko_projections"}.Sanitize(),
		"{quarantine}", pgx.Identifier{schema, "kumiko_projection_quarantine"}.Sanitize(),
	)
	return queries{
		markRebuilding: r.Replace(`INSERT INTO {projections} AS p (name, status, last_error, updated_at)
VALUES ($1, 'rebuilding', '', now())
ON CONFLICT (name) DO UPDATE SET status = 'rebuilding', last_processed_event_id = 0, last_error = '', updated_at = now()`),
		clearQuarantine: r.Replace(`DELETE FROM {quarantine} WHERE projection = $1`),
		quarantine: r.Replace(`INSERT INTO {quarantine} (projection, event_id, error)
VALUES ($1, $2, $3) ON CONFLICT (projection, event_id) DO UPDATE SET error = EXCLUDED.error, created_at = now()`),
		progress: r.Replace(`UPDATE {projections}
SET last_processed_event_id = $2, updated_at = now() WHERE name = $1`),
		markReady: r.Replace(`UPDATE {projections}
SET status = 'ready', last_processed_event_id = $2, last_rebuild_at = now(), last_error = '',
	incomplete_until = NULL, updated_at = now()
WHERE name = $1`),
		markFailed: r.Replace(`INSERT INTO {projections} AS p (name, status, last_error, updated_at)
VALUES ($1, 'failed', $2, now())
ON CONFLICT (name) DO UPDATE SET status = 'failed', last_error = EXCLUDED.last_error, updated_at = now()`),
		markIncomplete: r.Replace(`INSERT INTO {projections} (name, incomplete_until) VALUES ($1, $2)
ON CONFLICT (name) DO UPDATE SET incomplete_until = EXCLUDED.incomplete_until, updated_at = now()`),
		incompleteUntil: r.Replace(`SELECT incomplete_until FROM {projections} WHERE name = $1`),
		projectionState: r.Replace(`SELECT status, last_processed_event_id, last_rebuild_at, last_error FROM {projections} WHERE name = $1`),
	}
}

// sqlAsyncCommit lets the transaction commit without waiting for its WAL
// flush (a rebuild chunk: see rebuild.replayChunk).
const sqlAsyncCommit = `SET LOCAL synchronous_commit TO OFF`

package pipeline_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/consumer"
	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/integration"
	"github.com/kumiko-go/kumiko/kumikotest"
	"github.com/kumiko-go/kumiko/pipeline"
)

// setUpV4 builds schema as a binary from before the consumer and executor
// tables left the event store's migrations left it: the event store's
// migrations 1 to 4 as they were (testdata/eventstore-v4) and the
// idempotency-key table that EnsureSchema created then.
func setUpV4(t *testing.T, db *kumikotest.DB, schema string) {
	t.Helper()
	q := pgx.Identifier{schema}.Sanitize()
	db.Exec(t, "CREATE SCHEMA "+q)
	db.Exec(t, "CREATE TABLE "+q+".kumiko_schema_migrations (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())")
	files, err := filepath.Glob("testdata/eventstore-v4/*.sql")
	require.NoError(t, err)
	require.Len(t, files, 5)
	for _, f := range files {
		body, err := os.ReadFile(f)
		require.NoError(t, err)
		db.Exec(t, strings.ReplaceAll(string(body), "{{schema}}", q))
		base := strings.TrimSuffix(filepath.Base(f), ".sql")
		if num, name, _ := strings.Cut(base, "_"); num != "ensure" {
			db.Exec(t, "INSERT INTO "+q+".kumiko_schema_migrations (version, name) VALUES ($1::int, $2)", num, name)
		}
	}
}

func migrateAll(t *testing.T, s *eventstore.Store) (store, cons, exec []int) {
	t.Helper()
	store, err := s.Migrate(ctx)
	require.NoError(t, err)
	cons, err = consumer.Migrate(ctx, s)
	require.NoError(t, err)
	exec, err = pipeline.Migrate(ctx, s)
	require.NoError(t, err)
	return store, cons, exec
}

// shape describes schema's kumiko tables: every column with its type,
// default and nullability in order, every index and constraint, with the
// schema's name left out.
func shape(t *testing.T, db *kumikotest.DB, schema string) string {
	t.Helper()
	var s string
	err := db.Pool.QueryRow(context.Background(), `
SELECT string_agg(line, E'\n' ORDER BY line) FROM (
	SELECT format('%s.%s %s %s %s %s', table_name, ordinal_position, column_name, data_type, is_nullable, column_default) AS line
	FROM information_schema.columns WHERE table_schema = $1
	UNION ALL
	SELECT replace(indexdef, $1 || '.', '') FROM pg_indexes WHERE schemaname = $1
	UNION ALL
	SELECT (SELECT relname FROM pg_class WHERE oid = conrelid) || ' ' || pg_get_constraintdef(oid) FROM pg_constraint WHERE connamespace = $1::regnamespace
) l WHERE line NOT LIKE '%kumiko_%_migrations%' AND line NOT LIKE '%river_%'`, schema).Scan(&s)
	require.NoError(t, err)
	return strings.ReplaceAll(s, schema+".", "")
}

// A database migrated by a binary from before the tables moved to their
// owners upgrades in place: the event store applies only what came after
// its version 4 (the log functions), the consumer and executor migrations
// record their versions and keep the tables and rows as they were, and the
// schema ends up exactly as a fresh one.
func TestMigrateUpgradesASchemaFromBeforeTheTablesMoved(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	old := db.Schema + "_v4"
	t.Cleanup(func() { db.Exec(t, "DROP SCHEMA IF EXISTS "+pgx.Identifier{old}.Sanitize()+" CASCADE") })
	setUpV4(t, db, old)
	q := pgx.Identifier{old}.Sanitize()
	db.Exec(t, "INSERT INTO "+q+".kumiko_event_consumers (name, instance_id, last_processed_event_id, status) VALUES ('c', '__shared__', 7, 'dead')")
	db.Exec(t, "INSERT INTO "+q+".kumiko_projections (name, status) VALUES ('p', 'failed')")

	s, err := eventstore.New(db.Pool, eventstore.Config{Schema: old})
	require.NoError(t, err)
	store, cons, exec := migrateAll(t, s)
	require.Equal(t, []int{5, 6, 7, 8, 9}, store, "the event store applies only what came after version 4")
	require.Equal(t, []int{1, 2, 3, 4}, cons)
	require.Equal(t, []int{1, 2, 3}, exec)
	integ, err := integration.Migrate(ctx, s) // an owner that came later: a fresh one's tables
	require.NoError(t, err)
	require.Equal(t, []int{1, 2, 3}, integ)
	require.Equal(t, 1, db.Count(t, "SELECT count(*) FROM "+q+".kumiko_event_consumers WHERE name = 'c' AND last_processed_event_id = 7 AND status = 'dead'"))
	require.Equal(t, 1, db.Count(t, "SELECT count(*) FROM "+q+".kumiko_projections WHERE name = 'p' AND status = 'failed'"))
	require.Equal(t, shape(t, db, db.Schema), shape(t, db, old), "the upgraded schema is the fresh one")

	store, cons, exec = migrateAll(t, s)
	require.Empty(t, append(append(store, cons...), exec...), "nothing is left to apply")
}

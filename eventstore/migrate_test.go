package eventstore_test

import (
	"context"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/kumikotest"
)

// N processes booting at once against a fresh schema: one applies each
// migration, the rest find nothing to do, and none fails.
func TestConcurrentMigrate(t *testing.T) {
	t.Parallel()
	const boots = 8
	db := kumikotest.NewDB(t, kumikotest.MaxConns(boots+2))
	ctx := context.Background()
	schema := db.Schema + "_m"
	t.Cleanup(func() { db.Exec(t, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE") })

	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		applied []int
		start   = make(chan struct{})
	)
	for range boots {
		wg.Go(func() {
			s, err := eventstore.New(db.Pool, eventstore.Config{Schema: schema})
			require.NoError(t, err)
			<-start
			got, err := s.Migrate(ctx)
			require.NoError(t, err)
			mu.Lock()
			applied = append(applied, got...)
			mu.Unlock()
		})
	}
	close(start)
	wg.Wait()

	want := make([]int, 0)
	for _, m := range eventstore.Migrations() {
		want = append(want, m.Version)
	}
	require.ElementsMatch(t, want, applied, "each migration applied exactly once")
	require.Equal(t, len(want), db.Count(t, "SELECT count(*) FROM "+pgx.Identifier{schema}.Sanitize()+".kumiko_schema_migrations"))
	for _, table := range []string{"kumiko_events", "kumiko_snapshots", "kumiko_archived_streams"} {
		require.Equal(t, 1, db.Count(t, "SELECT count(*) FROM pg_tables WHERE schemaname = $1 AND tablename = $2", schema, table), table)
	}
}

func TestMigrateRefusesNewerSchema(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	applied, err := db.Store.Migrate(context.Background())
	require.NoError(t, err)
	require.Empty(t, applied, "a migrated schema has nothing left to apply")

	db.Exec(t, "INSERT INTO kumiko_schema_migrations (version, name) VALUES (9999, 'from_the_future')")
	_, err = db.Store.Migrate(context.Background())
	require.ErrorContains(t, err, "newer than this binary")
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	_, err := eventstore.New(nil, eventstore.Config{})
	require.ErrorContains(t, err, "pool")
	db := kumikotest.NewDB(t)
	_, err = eventstore.New(db.Pool, eventstore.Config{Schema: "a_schema_name_that_is_far_too_long_to_be_used"})
	require.ErrorContains(t, err, "Config.Schema")
	s, err := eventstore.New(db.Pool, eventstore.Config{})
	require.NoError(t, err)
	require.Equal(t, "public", s.Schema())
	require.Equal(t, "kumiko_events_public", s.NotifyChannel())
}

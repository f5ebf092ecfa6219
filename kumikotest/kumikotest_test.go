package kumikotest_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/kumikotest"
)

// Each test gets its own migrated schema with search_path set to it, and the
// schema is gone once the test ends.
func TestNewDBIsolatesAndCleansUp(t *testing.T) {
	var first, second string
	t.Run("first", func(t *testing.T) {
		db := kumikotest.NewDB(t)
		first = db.Schema
		var searchPath string
		require.NoError(t, db.Pool.QueryRow(context.Background(), "SHOW search_path").Scan(&searchPath))
		require.Equal(t, db.Schema, searchPath)
		require.Equal(t, 0, db.Count(t, "SELECT count(*) FROM kumiko_events"), "unqualified names resolve to the test schema")
		db.Exec(t, "CREATE TABLE mine (id int)")
	})
	t.Run("second", func(t *testing.T) {
		db := kumikotest.NewDB(t)
		second = db.Schema
		require.Equal(t, 0, db.Count(t, "SELECT count(*) FROM pg_tables WHERE schemaname = $1 AND tablename = 'mine'", db.Schema))
	})
	require.NotEqual(t, first, second)

	probe := kumikotest.NewDB(t)
	require.Equal(t, 0, probe.Count(t, "SELECT count(*) FROM pg_namespace WHERE nspname IN ($1, $2)", first, second),
		"schemas of finished tests are dropped")
}

// fatalRecorder captures the failure NewDB reports instead of failing the
// surrounding test.
type fatalRecorder struct {
	testing.TB
	msg     string
	skipped bool
}

func (r *fatalRecorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func (r *fatalRecorder) Skip(...any)          { r.skipped = true; runtime.Goexit() }
func (r *fatalRecorder) Skipf(string, ...any) { r.skipped = true; runtime.Goexit() }
func (r *fatalRecorder) SkipNow()             { r.skipped = true; runtime.Goexit() }

// Without a reachable server the test fails with the reason and the way out;
// it never skips.
func TestNewDBFailsLoudlyWithoutPostgres(t *testing.T) {
	t.Setenv("DATABASE_URL", "postgres://postgres@127.0.0.1:1/postgres?sslmode=disable&connect_timeout=2")
	rec := &fatalRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		kumikotest.NewDB(rec)
	}()
	<-done
	require.False(t, rec.skipped)
	require.Contains(t, rec.msg, "PostgreSQL at postgres://postgres@127.0.0.1:1/postgres")
	require.Contains(t, rec.msg, "make services")
}

package pipeline

import (
	"context"
	"embed"
	"io/fs"

	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/internal/projection"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migrate creates or brings up to date the executor's tables in store's
// schema — the read side's projection rebuild state and quarantine, and
// the recorded idempotency keys — and returns the versions it applied; its
// versions are kept in kumiko_pipeline_migrations. It runs like
// eventstore.Store.Migrate — one transaction under the migration lock, any
// number of processes at once — and must run after it, before an Executor
// serves. The read tables of the features are EnsureSchema's.
func Migrate(ctx context.Context, store *eventstore.Store) ([]int, error) {
	return store.MigrateOwned(ctx, "pipeline", migrationSets{migrationFiles, projection.Migrations}, "migrations")
}

// migrationSets is one migrations directory made of several packages' own:
// each table's DDL lives with the package whose SQL uses it, and the
// versions stay one sequence.
type migrationSets []fs.FS

// Open opens name in the first set that has it.
func (m migrationSets) Open(name string) (fs.File, error) {
	for _, set := range m {
		if f, err := set.Open(name); err == nil {
			return f, nil
		}
	}
	return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
}

// Glob matches pattern in every set (eventstore's migration reader lists
// the directory with fs.Glob).
func (m migrationSets) Glob(pattern string) ([]string, error) {
	var all []string
	for _, set := range m {
		names, err := fs.Glob(set, pattern)
		if err != nil {
			return nil, err
		}
		all = append(all, names...)
	}
	return all, nil
}

var _ fs.GlobFS = migrationSets{}

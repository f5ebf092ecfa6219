package pipeline

import (
	"context"
	"embed"

	"github.com/kumiko-go/kumiko/eventstore"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migrate creates or brings up to date the executor's own tables in store's
// schema — projection rebuild state and quarantine, recorded idempotency
// keys — and returns the versions it applied; its versions are kept in
// kumiko_pipeline_migrations. It runs like eventstore.Store.Migrate — one
// transaction under the migration lock, any number of processes at once —
// and must run after it, before an Executor serves. The read tables of the
// features are EnsureSchema's.
func Migrate(ctx context.Context, store *eventstore.Store) ([]int, error) {
	return store.MigrateOwned(ctx, "pipeline", migrationFiles, "migrations")
}

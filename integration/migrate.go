package integration

import (
	"context"
	"embed"

	"github.com/kumiko-go/kumiko/eventstore"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migrate creates or brings up to date the inbox (kumiko_inbox) and the
// in-process dead messages (kumiko_integration_dead) in store's schema and
// returns the versions it applied; they are kept in
// kumiko_integration_migrations. It runs like eventstore.Store.Migrate, after
// it.
func Migrate(ctx context.Context, store *eventstore.Store) ([]int, error) {
	return store.MigrateOwned(ctx, "integration", migrationFiles, "migrations")
}

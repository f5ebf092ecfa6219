package consumer

import (
	"context"
	"embed"

	"github.com/kumiko-go/kumiko/eventstore"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migrate creates or brings up to date the consumer state table
// (kumiko_event_consumers) in store's schema, and returns the versions it
// applied; its versions are kept in kumiko_consumer_migrations. It runs like
// eventstore.Store.Migrate — one transaction under the migration lock, any
// number of processes at once — and must run after it, before a Dispatcher
// or Ops is used.
func Migrate(ctx context.Context, store *eventstore.Store) ([]int, error) {
	return store.MigrateOwned(ctx, "consumer", migrationFiles, "migrations")
}

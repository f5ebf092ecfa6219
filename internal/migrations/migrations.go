// Package migrations runs the schema migrations of every package that owns
// tables in the store's schema, in the order their tables depend on each
// other, for the app's start and the migrate command alike.
package migrations

import (
	"context"

	"github.com/kumiko-go/kumiko/consumer"
	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/integration"
	"github.com/kumiko-go/kumiko/jobs"
	"github.com/kumiko-go/kumiko/pipeline"
)

// Applied names the versions of one owner's migrations that All applied.
type Applied struct {
	// Owner is the package that owns the tables: "eventstore", "consumer",
	// "pipeline", "integration" or "jobs" (River's tables, by River's migrator).
	Owner string
	// Versions are the versions applied, in order.
	Versions []int
}

// All applies the migrations of the event store and of the packages that own
// tables next to it, in order — eventstore, consumer, pipeline, integration,
// jobs — each under a migration lock, so any number of processes may call it at
// once. It returns the owners that had something to apply, also when a
// later owner fails.
func All(ctx context.Context, store *eventstore.Store) ([]Applied, error) {
	var out []Applied
	for _, m := range []struct {
		owner string
		run   func(context.Context, *eventstore.Store) ([]int, error)
	}{
		{"eventstore", func(ctx context.Context, s *eventstore.Store) ([]int, error) { return s.Migrate(ctx) }},
		{"consumer", consumer.Migrate},
		{"pipeline", pipeline.Migrate},
		{"integration", integration.Migrate},
		{"jobs", jobs.Migrate},
	} {
		versions, err := m.run(ctx, store)
		if err != nil {
			return out, err
		}
		if len(versions) > 0 {
			out = append(out, Applied{Owner: m.owner, Versions: versions})
		}
	}
	return out, nil
}

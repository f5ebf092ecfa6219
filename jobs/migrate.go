package jobs

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/lock"
)

// Migrate creates or brings up to date River's tables in store's schema
// with River's own migrator, and returns the versions it applied. River
// applies each version in a transaction of its own (some of them cannot
// share one); a lock (package lock) around the whole run lets any number of
// processes call Migrate at once.
func Migrate(ctx context.Context, store *eventstore.Store) ([]int, error) {
	m, err := rivermigrate.New(riverpgxv5.New(store.Pool()), &rivermigrate.Config{Schema: store.Schema()})
	if err != nil {
		return nil, fmt.Errorf("jobs: migrate: %w", err)
	}
	locker, err := lock.NewPostgres(store.Pool(), lock.PostgresConfig{})
	if err != nil {
		return nil, err
	}
	held, err := locker.Acquire(ctx, "river-migrate:"+store.Schema(), migrateWait)
	if err != nil {
		return nil, fmt.Errorf("jobs: migrate: %w", err)
	}
	if held == nil {
		return nil, fmt.Errorf("jobs: migrate: another process held the migration lock for %s", migrateWait)
	}
	defer func() { _ = held.Release(ctx) }()
	res, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil)
	if err != nil {
		return nil, fmt.Errorf("jobs: migrate: %w", err)
	}
	var applied []int
	for _, v := range res.Versions {
		applied = append(applied, v.Version)
	}
	return applied, nil
}

// migrateWait bounds how long Migrate waits for another process's run.
const migrateWait = 5 * time.Minute

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

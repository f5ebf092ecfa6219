package eventstore_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"os/signal"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kumiko-go/kumiko/eventstore"
)

// A stream written and read back: append with the expected version (0 for
// a new stream), then append again at the version the first append
// returned; a writer that lost the race gets a version conflict.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:5432/app")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	store, err := eventstore.New(pool, eventstore.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	if _, err := store.Migrate(ctx); err != nil {
		log.Fatal(err)
	}

	tenant := uuid.MustParse("0190a000-0000-7000-8000-00000000000a")
	created, err := store.Append(ctx, eventstore.Stream{TenantID: tenant, AggregateType: "task"}, 0,
		eventstore.NewEvent{Type: "task.created", Payload: map[string]any{"title": "Write the docs"}})
	if err != nil {
		log.Fatal(err)
	}
	stream := eventstore.Stream{TenantID: tenant, AggregateType: "task", AggregateID: created.AggregateID}
	if _, err := store.Append(ctx, stream, created.Version,
		eventstore.NewEvent{Type: "task.completed", Payload: map[string]any{"by": "alice"}}); err != nil {
		log.Fatal(err) // eventstore.Code(err) == "version_conflict" when another writer came first
	}

	events, err := store.Load(ctx, tenant, created.AggregateID, eventstore.LoadOptions{})
	if err != nil {
		log.Fatal(err)
	}
	for _, e := range events {
		fmt.Println(e.Version, e.Type, string(e.Payload))
	}
}

// Following the log, as `events tail --follow` does: Listen wakes the
// reader when events commit, Tail prints the settled ones and returns where
// to go on from, so an event that commits late is never skipped.
func ExampleStore_Tail() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	pool, err := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:5432/app")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	store, err := eventstore.New(pool, eventstore.Config{})
	if err != nil {
		log.Fatal(err)
	}
	filter := eventstore.ReadFilter{Types: []string{"task.completed"}}
	pos, err := store.TailStart(ctx, filter, 10) // the last ten first
	if err != nil {
		log.Fatal(err)
	}

	wake := make(chan struct{}, 1)
	go store.Listen(ctx, func() {
		select {
		case wake <- struct{}{}:
		default: // a read is due already
		}
	})
	for {
		pos, err = store.Tail(ctx, pos, filter, func(e eventstore.Event) error {
			_, err := fmt.Println(e.ID, e.Type, string(e.Payload))
			return err
		})
		if err != nil {
			break
		}
		select {
		case <-ctx.Done():
			return
		case <-wake:
		case <-time.After(time.Second): // a lost notification costs a second at most
		}
	}
	if ctx.Err() == nil {
		log.Fatal(err)
	}
}

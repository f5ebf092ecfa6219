package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"os/signal"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kumiko-go/kumiko/consumer"
	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/feature"
)

// A worker that mirrors completed tasks into a table of its own: the row and
// the consumer's cursor commit in the same transaction, so each event is
// applied once in effect, in id order, by one process of however many run.
func Example() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	pool, err := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:5432/app")
	if err != nil {
		log.Fatal(err)
	}
	store, err := eventstore.New(pool, eventstore.Config{})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := store.Migrate(ctx); err != nil { // the event store's tables first
		log.Fatal(err)
	}
	if _, err := consumer.Migrate(ctx, store); err != nil { // then the consumers' state
		log.Fatal(err)
	}
	d, err := consumer.New(store, consumer.Config{InstanceID: "worker-1"}, consumer.Consumer{
		Name:     "done-tasks",
		Delivery: feature.Shared,
		Types:    []string{"task.completed"},
		Handle: func(ctx context.Context, tx pgx.Tx, ev eventstore.Event) error {
			_, err := tx.Exec(ctx, `INSERT INTO done_tasks (id, at) VALUES ($1, $2) ON CONFLICT DO NOTHING`,
				ev.AggregateID, ev.CreatedAt)
			return err
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := d.Start(ctx); err != nil {
		log.Fatal(err)
	}
	<-ctx.Done()
	if err := d.Stop(context.WithoutCancel(ctx)); err != nil { // lets running passes commit
		log.Fatal(err)
	}
}

// An operator moves a consumer past the event its handler keeps failing on,
// from any process, with or without a running dispatcher.
func ExampleOps_Skip() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:5432/app")
	if err != nil {
		log.Fatal(err)
	}
	store, err := eventstore.New(pool, eventstore.Config{})
	if err != nil {
		log.Fatal(err)
	}
	ops := consumer.NewOps(store)
	st, err := ops.Skip(ctx, "done-tasks", "") // "": the shared shard
	var ce *consumer.Error
	switch {
	case errors.As(err, &ce) && ce.Reason() == consumer.ReasonGapUnsettled:
		fmt.Println("an earlier event may still commit; retry shortly")
	case err != nil:
		log.Fatal(err)
	default:
		fmt.Println("now at", st.Cursor, st.Status)
	}
}

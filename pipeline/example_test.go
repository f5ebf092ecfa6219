package pipeline_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/pipeline"
	"github.com/kumiko-go/kumiko/registry"
	"github.com/kumiko-go/kumiko/samples/tasks"
)

// The executor by hand: migrate, create the features' read tables, and run
// a write as a caller. Every error carries the contract's code and reason.
func ExampleNew() {
	ctx := context.Background()
	reg, err := registry.Build(tasks.Feature)
	if err != nil {
		log.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:5432/app")
	if err != nil {
		log.Fatal(err)
	}
	store, err := eventstore.New(pool, eventstore.Config{Upcaster: reg})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := store.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	if _, err := pipeline.Migrate(ctx, store); err != nil { // the executor's own tables
		log.Fatal(err)
	}
	x, err := pipeline.New(reg, store, pipeline.Config{})
	if err != nil {
		log.Fatal(err)
	}
	if err := x.EnsureSchema(ctx); err != nil { // the features' read tables
		log.Fatal(err)
	}
	alice := pipeline.Caller{User: feature.User{ID: "alice", TenantID: uuid.MustParse("0190a000-0000-7000-8000-00000000000a"),
		Roles: []string{"User"}, Authenticated: true}}
	out, err := x.Write(ctx, alice, pipeline.Request{Type: "task.create", Payload: json.RawMessage(`{"title":"Ship it"}`)})
	var pe *pipeline.Error
	switch {
	case errors.As(err, &pe):
		fmt.Println(pe.Code(), pe.Reason(), pe.Detail())
	case err != nil:
		log.Fatal(err)
	default:
		fmt.Printf("%+v\n", out)
	}
}

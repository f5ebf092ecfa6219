package http_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kumiko-go/kumiko/eventstore"
	khttp "github.com/kumiko-go/kumiko/http"
	"github.com/kumiko-go/kumiko/pipeline"
	"github.com/kumiko-go/kumiko/registry"
	"github.com/kumiko-go/kumiko/samples/tasks"
)

// Wiring the adapter by hand, without the facade.
func ExampleNewServer() {
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
	d, err := pipeline.New(reg, store, pipeline.Config{})
	if err != nil {
		log.Fatal(err)
	}
	srv, err := khttp.NewServer(khttp.Config{
		JWTSecret: []byte("a secret of at least thirty-two bytes"),
		Ready:     pool.Ping, // /readyz fails while the database is unreachable
	}, d, store)
	if err != nil {
		log.Fatal(err)
	}
	hs := &http.Server{Addr: ":8080", Handler: srv.Handler(), ReadHeaderTimeout: 5 * time.Second}
	log.Fatal(hs.ListenAndServe())
}

// A development token for curl.
func ExampleIssueToken() {
	tok, err := khttp.IssueToken([]byte("a secret of at least thirty-two bytes"),
		"alice", "0190a000-0000-7000-8000-00000000000a", []string{"User"}, time.Hour)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("curl -H 'Authorization: Bearer " + tok + "' …")
}

package pgsearch_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kumiko-go/kumiko/search"
	"github.com/kumiko-go/kumiko/search/pgsearch"
)

// An index of tickets, searched as the user types.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	engine, err := pgsearch.New(pool, "search")
	if err != nil {
		log.Fatal(err)
	}
	fresh, err := engine.Ensure(ctx, search.Index{Name: "tickets",
		Fields: map[string]byte{"title": 'A', "notes": 'B'}, Filters: []string{"status"}, Config: "english"})
	if err != nil {
		log.Fatal(err)
	}
	if fresh {
		log.Print("the index of tickets is new or changed: put every ticket again")
	}
	tenant := uuid.New()
	err = engine.Put(ctx, "tickets", search.Document{Tenant: tenant, ID: "t-1",
		Text:   map[string]string{"title": "Invoice overdue", "notes": "Customer called twice"},
		Values: map[string]string{"status": "open"}})
	if err != nil {
		log.Fatal(err)
	}
	page, err := engine.Search(ctx, "tickets", search.Query{Tenant: tenant, Text: "invocie",
		Fields: []string{"title", "notes"}, Filter: map[string]string{"status": "open"}, Limit: 20})
	if err != nil {
		log.Fatal(err)
	}
	for _, hit := range page.Hits {
		fmt.Println(hit.ID, hit.Highlights["title"])
	}
}

// Command kumiko is the generic operations CLI: the commands that need no
// application features. It grows with the framework; today it migrates the
// event store's schema.
//
// Connection settings come from flags, else DATABASE_URL, else the local
// development server.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/kumiko-go/kumiko/eventstore"
)

const defaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := newRoot().ExecuteContext(ctx)
	stop()
	if err != nil {
		os.Exit(1)
	}
}

type globals struct {
	databaseURL string
	schema      string
}

func newRoot() *cobra.Command {
	g := &globals{}
	root := &cobra.Command{
		Use:           "kumiko",
		Short:         "Operate a kumiko event store",
		SilenceUsage:  true,
		SilenceErrors: false,
	}
	dbURL := os.Getenv("DATABASE_URL")
	if dbURL == "" {
		dbURL = defaultDatabaseURL
	}
	root.PersistentFlags().StringVar(&g.databaseURL, "database-url", dbURL, "PostgreSQL connection URL (env DATABASE_URL)")
	root.PersistentFlags().StringVar(&g.schema, "schema", "public", "schema holding the kumiko tables")
	root.AddCommand(newMigrate(g))
	return root
}

func newMigrate(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "migrate",
		Short: "Apply the embedded schema migrations (safe to run from many processes at once)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			pool, err := pgxpool.New(ctx, g.databaseURL)
			if err != nil {
				return fmt.Errorf("database: %w", err)
			}
			defer pool.Close()
			store, err := eventstore.New(pool, eventstore.Config{Schema: g.schema})
			if err != nil {
				return err
			}
			applied, err := store.Migrate(ctx)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if len(applied) == 0 {
				fmt.Fprintf(out, "schema %s is up to date\n", g.schema)
				return nil
			}
			for _, v := range applied {
				fmt.Fprintf(out, "applied migration %d\n", v)
			}
			return nil
		},
	}
}

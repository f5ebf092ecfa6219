package kumiko_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"os/signal"

	"github.com/spf13/cobra"
	"go.uber.org/fx"

	"github.com/kumiko-go/kumiko/kumiko"
	"github.com/kumiko-go/kumiko/pipeline"
	"github.com/kumiko-go/kumiko/samples/tasks"
)

// A server in plain Go: New checks the configuration and the features
// without touching the database, Start migrates it, creates the read
// tables, starts delivering events and listens, Stop drains and closes.
func ExampleNew() {
	ctx := context.Background()
	app, err := kumiko.New(ctx, kumiko.Config{
		DatabaseURL: "postgres://postgres@127.0.0.1:5432/app",
		JWTSecret:   os.Getenv("KUMIKO_JWT_SECRET"), // at least 32 bytes
		InstanceID:  "api-1",
	}, tasks.Feature)
	if err != nil {
		log.Fatal(err) // an invalid Config or feature; nothing was created
	}
	if err := app.Start(ctx); err != nil {
		log.Fatal(err) // Start has stopped what it started
	}
	log.Printf("serving on %s", app.Addr())

	wait, stop := signal.NotifyContext(ctx, os.Interrupt)
	<-wait.Done()
	stop()
	if err := app.Stop(ctx); err != nil {
		log.Print(err)
	}
}

// The same server inside an application's own fx graph.
func ExampleModule() {
	ctx := context.Background()
	fx.New(
		kumiko.Module(ctx, kumiko.Config{
			DatabaseURL: "postgres://postgres@127.0.0.1:5432/app",
			JWTSecret:   os.Getenv("KUMIKO_JWT_SECRET"),
			InstanceID:  "api-1",
		}, tasks.Feature),
		fx.Invoke(func(d *pipeline.Executor) {
			// the app's own components use the wired parts
		}),
	).Run()
}

// The whole main of an app binary: `tasks serve`, `tasks worker`,
// `tasks migrate`, `tasks events tail --follow`, …
func ExampleMain() {
	kumiko.Main(kumiko.Config{Name: "tasks"}, tasks.Feature)
}

// An app binary with a command of its own next to Main's.
func ExampleNewCommand() {
	root := kumiko.NewCommand(kumiko.Config{Name: "tasks"}, tasks.Feature)
	root.AddCommand(&cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Run:   func(cmd *cobra.Command, _ []string) { fmt.Fprintln(cmd.OutOrStdout(), "tasks 1.0") },
	})
	root.SetArgs([]string{"version"})
	if err := root.Execute(); err != nil {
		panic(err)
	}
	// Output: tasks 1.0
}

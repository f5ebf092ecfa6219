// Command kumiko is the generic operations CLI: the commands that need no
// application features. migrate, consumer list|status|restart|skip|disable|
// enable, inspect (payloads as stored: without the app's features nothing
// is upcast), events tail and token. The commands that need the app's
// registry (events asof of an entity's state, for one) live on the app's own
// binary (kumiko.Main), which offers these as well.
//
// Connection settings come from --database-url and --schema, else
// DATABASE_URL and KUMIKO_SCHEMA, else the local development server.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/kumiko-go/kumiko/kumiko"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRoot().ExecuteContext(ctx)
	stop()
	if err != nil {
		os.Exit(1)
	}
}

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:          "kumiko",
		Short:        "Operate a kumiko event store",
		SilenceUsage: true,
	}
	// nil features: the generic commands.
	root.AddCommand(kumiko.OpsCommands(kumiko.Config{Name: "kumiko"})...)
	return root
}

package cli_test

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/kumiko-go/kumiko/cli"
	"github.com/kumiko-go/kumiko/kumiko"
	"github.com/kumiko-go/kumiko/samples/tasks"
)

// The whole main of an app binary: `tasks serve`, `tasks worker`,
// `tasks migrate`, `tasks events tail --follow`, …
func ExampleMain() {
	cli.Main(kumiko.Config{Name: "tasks"}, tasks.Feature)
}

// An app binary with a command of its own next to Main's.
func ExampleNewCommand() {
	root := cli.NewCommand(kumiko.Config{Name: "tasks"}, tasks.Feature)
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

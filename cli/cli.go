// Package cli is the command line of a kumiko app binary:
//
//	func main() { cli.Main(kumiko.Config{Name: "tasks"}, tasks.Feature) }
//
// It is a package of its own so that the kumiko facade, which servers embed,
// does not depend on the command-line library.
package cli

import (
	"github.com/spf13/cobra"

	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/internal/ops"
	"github.com/kumiko-go/kumiko/kumiko"
)

// Main runs the app binary's command line and exits non-zero when the
// command fails, with its error printed once on stderr. The commands:
// serve (the HTTP API and event delivery), worker (event delivery only),
// and the operations commands: migrate, consumer, inspect, events (tail,
// asof, prune), snapshot, project and token.
//
// Fields of cfg left zero are read from the environment (see
// kumiko.Config.FromEnv). For a development machine it fills in the rest:
// without DATABASE_URL it uses the local PostgreSQL and creates a database
// named after the app; without KUMIKO_JWT_SECRET it uses a development
// secret and serve prints a token to try the API with. Invalid features or
// configuration fail before anything is created in the database.
func Main(cfg kumiko.Config, features ...*feature.Feature) { ops.Main(cfg, features...) }

// NewCommand returns Main's command tree, for binaries that add commands of
// their own.
func NewCommand(cfg kumiko.Config, features ...*feature.Feature) *cobra.Command {
	return ops.NewCommand(cfg, features...)
}

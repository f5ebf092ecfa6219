// Command kumiko is the generic operations CLI: the commands that need no
// application features. migrate, consumer list|status|restart|skip|disable|
// enable|gc, inspect (payloads as stored: without the app's features nothing
// is upcast), events tail|prune, token and subject rotate-key (with
// KUMIKO_DATA_KEY). The commands that need the app's
// registry (events asof of an entity's state, for one) live on the app's own
// binary (kumiko.Main), which offers these as well.
//
// Connection settings come from --database-url and --schema, else
// DATABASE_URL and KUMIKO_SCHEMA, else the development database an app's
// own binary uses on the local server: kumiko_<app> for --app (or
// KUMIKO_APP), database kumiko without one. A database that does not exist
// or a schema without the kumiko tables is explained, not shown as SQL.
package main

import "github.com/kumiko-go/kumiko/internal/ops"

func main() { ops.Execute(ops.Generic()) }

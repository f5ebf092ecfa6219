// Command schema-evolution serves the customer register: `schema-evolution
// serve` starts the HTTP API, `schema-evolution inspect customer <id>
// --tenant <t>` shows each move as stored and as read.
package main

import (
	"github.com/kumiko-go/kumiko/kumiko"
	schemaevolution "github.com/kumiko-go/kumiko/samples/schema-evolution"
)

func main() {
	kumiko.Main(kumiko.Config{Name: "schema-evolution"}, schemaevolution.Feature)
}

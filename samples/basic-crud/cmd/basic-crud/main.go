// Command basic-crud serves the address book: `basic-crud serve` starts the
// HTTP API, `basic-crud inspect contact <id> --tenant <tenant>` prints a
// contact's history. Without configuration it runs against the local
// PostgreSQL and prints a token to try it with.
package main

import (
	"github.com/kumiko-go/kumiko/kumiko"
	basiccrud "github.com/kumiko-go/kumiko/samples/basic-crud"
)

func main() {
	kumiko.Main(kumiko.Config{Name: "basic-crud"}, basiccrud.Feature)
}

// Command custom-handlers serves the ticket desk: `custom-handlers serve`
// starts the HTTP API. Without configuration it runs against the local
// PostgreSQL and prints a token to try it with.
package main

import (
	"github.com/kumiko-go/kumiko/kumiko"
	customhandlers "github.com/kumiko-go/kumiko/samples/custom-handlers"
)

func main() {
	kumiko.Main(kumiko.Config{Name: "custom-handlers"}, customhandlers.Feature)
}

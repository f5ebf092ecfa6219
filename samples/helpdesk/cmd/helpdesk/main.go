// Command helpdesk serves the helpdesk: `helpdesk serve` starts the HTTP
// API with the query ticket.search.
package main

import (
	"github.com/kumiko-go/kumiko/kumiko"
	"github.com/kumiko-go/kumiko/samples/helpdesk"
)

func main() {
	kumiko.Main(kumiko.Config{Name: "helpdesk"}, helpdesk.Feature)
}

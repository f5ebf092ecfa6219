// Command projections serves the sales report: `projections serve` starts
// the HTTP API, `projections project rebuild sales_by_region` rebuilds the
// report from the recorded sales.
package main

import (
	"github.com/kumiko-go/kumiko/kumiko"
	"github.com/kumiko-go/kumiko/samples/projections"
)

func main() {
	kumiko.Main(kumiko.Config{Name: "projections"}, projections.Feature)
}

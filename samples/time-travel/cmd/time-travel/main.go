// Command time-travel serves the price list: `time-travel serve` starts the
// HTTP API, `time-travel events asof product <id> <time> --tenant <t>` prints
// a product as it was.
package main

import (
	"github.com/kumiko-go/kumiko/kumiko"
	timetravel "github.com/kumiko-go/kumiko/samples/time-travel"
)

func main() {
	kumiko.Main(kumiko.Config{Name: "time-travel"}, timetravel.Feature)
}

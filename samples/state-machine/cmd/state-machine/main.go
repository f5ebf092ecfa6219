// Command state-machine serves order handling: `state-machine serve` starts
// the HTTP API.
package main

import (
	"github.com/kumiko-go/kumiko/kumiko"
	statemachine "github.com/kumiko-go/kumiko/samples/state-machine"
)

func main() {
	kumiko.Main(kumiko.Config{Name: "state-machine"}, statemachine.Feature)
}

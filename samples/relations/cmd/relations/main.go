// Command relations serves project planning: `relations serve` starts the
// HTTP API and runs the project_tasks projection; `relations worker` runs
// only the projection.
package main

import (
	"github.com/kumiko-go/kumiko/kumiko"
	"github.com/kumiko-go/kumiko/samples/relations"
)

func main() {
	kumiko.Main(kumiko.Config{Name: "relations"}, relations.Feature)
}

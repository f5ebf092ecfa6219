// Command event-timeline serves the document store: `event-timeline serve`
// starts the HTTP API, `event-timeline inspect document <id> --tenant <t>`
// prints a document's audit trail.
package main

import (
	"github.com/kumiko-go/kumiko/kumiko"
	eventtimeline "github.com/kumiko-go/kumiko/samples/event-timeline"
)

func main() {
	kumiko.Main(kumiko.Config{Name: "event-timeline"}, eventtimeline.Feature)
}

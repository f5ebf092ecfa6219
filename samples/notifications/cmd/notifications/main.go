// Command notifications serves the delivery sample: `notifications serve`
// starts the HTTP API and works the delivery jobs.
package main

import (
	"github.com/kumiko-go/kumiko/kumiko"
	"github.com/kumiko-go/kumiko/samples/notifications"
)

func main() {
	kumiko.Main(kumiko.Config{Name: "notifications"}, notifications.New(notifications.Config{}))
}

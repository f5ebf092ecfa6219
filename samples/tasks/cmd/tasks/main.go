// Command tasks serves the task-list sample: `tasks serve` starts the HTTP
// API. Configure it with DATABASE_URL, REDIS_URL, KUMIKO_JWT_SECRET,
// KUMIKO_ADDR and KUMIKO_INSTANCE_ID; without them it runs against the local
// PostgreSQL with development defaults and prints a token to try it with.
package main

import (
	"github.com/kumiko-go/kumiko/kumiko"
	"github.com/kumiko-go/kumiko/samples/tasks"
)

func main() {
	kumiko.Main(kumiko.Config{Name: "tasks"}, tasks.Feature, tasks.Reminders)
}

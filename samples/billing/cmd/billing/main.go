// Command billing serves the billing app of the two-app sample: with
// RABBITMQ_URL it receives the orders app's order.shipped messages on its
// queue "billing" and writes an invoice for each.
package main

import (
	"github.com/kumiko-go/kumiko/kumiko"
	"github.com/kumiko-go/kumiko/samples/billing"
)

func main() {
	kumiko.Main(kumiko.Config{Name: "billing"}, billing.Feature)
}

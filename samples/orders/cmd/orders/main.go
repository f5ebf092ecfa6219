// Command orders serves the orders app of the two-app sample. With
// RABBITMQ_URL its order.shipped messages reach the billing app (see
// samples/billing); configure it like the tasks sample otherwise.
package main

import (
	"github.com/kumiko-go/kumiko/kumiko"
	"github.com/kumiko-go/kumiko/samples/orders"
)

func main() {
	kumiko.Main(kumiko.Config{Name: "orders"}, orders.Feature)
}

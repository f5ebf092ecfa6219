// Command shop runs orders and billing as one app, for a machine without
// RabbitMQ: order.shipped is then delivered in process, to the billing
// feature of the same app.
package main

import (
	"github.com/kumiko-go/kumiko/kumiko"
	"github.com/kumiko-go/kumiko/samples/billing"
	"github.com/kumiko-go/kumiko/samples/orders"
)

func main() {
	kumiko.Main(kumiko.Config{Name: "shop"}, orders.Feature, billing.Feature)
}

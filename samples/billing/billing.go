// Package billing is the receiving side of the two-app sample: it handles
// the orders app's "order.shipped" by creating an invoice, once per message
// (the inbox), as the user and in the tenant that shipped the order.
package billing

import (
	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/samples/orders/contract"
)

// Feature is the billing app.
var Feature = feature.Define("billing", func(r *feature.Registrar) {
	contract.Declare(r)
	r.Entity("invoice", feature.Fields{
		"orderId":  feature.UUID().Required().Unique(),
		"customer": feature.Text().Required().MaxLen(200),
		"amount":   feature.Number().Required(),
	})
	// Invoices are written by the handler only; users read them.
	r.Crud("invoice", feature.Access{Write: feature.Deny(), Read: feature.AnyUser()})
	r.OnIntegrationEvent("order.shipped", "create-invoice", createInvoice)
})

// createInvoice writes the invoice of a shipped order in the handler's own
// transaction, which also records that it handled the message.
func createInvoice(ctx feature.CommandContext, m feature.Message) error {
	var shipped contract.OrderShipped
	if err := m.Decode(&shipped); err != nil {
		return err
	}
	_, err := ctx.AppendEvent(feature.AppendSpec{
		AggregateType: "invoice", Type: "invoice.created",
		Payload: map[string]any{"orderId": shipped.OrderID, "customer": shipped.Customer, "amount": shipped.Total},
	})
	return err
}

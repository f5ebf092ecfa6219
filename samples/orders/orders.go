// Package orders is the publishing side of the two-app sample: orders are a
// CRUD entity, and shipping one (a command) marks it shipped and publishes
// the integration event "order.shipped" in the same transaction — it leaves
// the app only if the order's change commits. samples/billing receives it.
package orders

import (
	"github.com/google/uuid"

	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/samples/orders/contract"
)

// ShipOrder is the input of "order.ship": the order and the version the
// client last saw.
type ShipOrder struct {
	ID      uuid.UUID `json:"id" validate:"required"`
	Version int       `json:"version" validate:"required,min=1"`
}

// Feature is the orders app.
var Feature = feature.Define("orders", func(r *feature.Registrar) {
	contract.Declare(r)
	r.Entity("order", feature.Fields{
		"customer": feature.Text().Required().MaxLen(200),
		"total":    feature.Number().Required(),
		"shipped":  feature.Bool().Default(false),
	}, feature.StateStruct[orderState]())
	r.Crud("order", feature.Access{Write: feature.Roles("Admin", "User"), Read: feature.AnyUser()})
	feature.HandleCommand(r, "order.ship", feature.Roles("Admin", "User"), ship)
})

// orderState is what ship reads of an order's state.
type orderState struct {
	Customer string  `json:"customer"`
	Total    float64 `json:"total"`
	Shipped  *bool   `json:"shipped"` // empty (nil) until set
}

// ship marks the order shipped and publishes order.shipped, refusing a stale
// version and an order shipped before.
func ship(ctx feature.CommandContext, in ShipOrder) (any, error) {
	order, err := ctx.FetchForWriting(in.ID, "order", in.Version)
	if err != nil {
		return nil, err
	}
	state, err := feature.StateAs[orderState](order)
	if err != nil {
		return nil, err
	}
	if state.Shipped != nil && *state.Shipped {
		return nil, feature.Refuse("already_shipped", "the order has shipped already")
	}
	if err := order.Append("order.updated", map[string]any{"shipped": true}); err != nil {
		return nil, err
	}
	if err := ctx.Publish("order.shipped", contract.OrderShipped{OrderID: in.ID, Customer: state.Customer, Total: state.Total}); err != nil {
		return nil, err
	}
	return map[string]any{"id": in.ID, "version": order.Version()}, nil
}

// Package contract holds the integration events the orders app publishes.
// Sender and receivers import it, so both declare the same contract.
package contract

import (
	"github.com/google/uuid"

	"github.com/kumiko-go/kumiko/feature"
)

// OrderShipped is "order.shipped": an order left the warehouse.
type OrderShipped struct {
	OrderID  uuid.UUID `json:"orderId" validate:"required"`
	Customer string    `json:"customer" validate:"required"`
	Total    float64   `json:"total" validate:"gte=0"`
}

// Declare declares the contracts in a feature of the app that publishes or
// handles them.
func Declare(r *feature.Registrar) {
	r.IntegrationEvent("order.shipped", OrderShipped{})
}

// Package timetravel shows reading the past: any list or detail of a CRUD
// entity accepts "asOf" and answers the state at that moment, folded from
// the recorded changes. No history table, no versioning code.
package timetravel

import (
	"time"

	"github.com/kumiko-go/kumiko/feature"
)

// Feature is a price list: products whose price changes over time.
var Feature = feature.Define("pricing", func(r *feature.Registrar) {
	r.Entity("product", feature.Fields{
		"name":  feature.Text().Required().MaxLen(200).Sortable(),
		"price": feature.Number().Required(),
	})
	r.Crud("product", feature.Access{Write: feature.Roles("Manager"), Read: feature.AnyUser()})
})

// Product is a product as the API answers it.
type Product struct {
	ID        string    `json:"id"`
	Version   int       `json:"version"`
	Name      string    `json:"name"`
	Price     float64   `json:"price"`
	UpdatedAt time.Time `json:"updatedAt"`
}

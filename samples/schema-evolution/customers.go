// Package schemaevolution shows level 4: an event whose payload changed
// shape twice, and the declared migrations that read every stored version
// as the current one. Stored events are never rewritten; the code only ever
// sees the newest shape.
package schemaevolution

import (
	"errors"
	"strings"

	"github.com/google/uuid"

	"github.com/kumiko-go/kumiko/feature"
)

// CustomerMoved is the payload of "customer.moved", version 3.
//
//   - version 1 had one line, {"address": "Main St 1, Berlin"};
//   - version 2 split it into street and city;
//   - version 3 added the country, "DE" for every older move.
type CustomerMoved struct {
	Street  string `json:"street" validate:"required,max=200"`
	City    string `json:"city" validate:"required,max=100"`
	Country string `json:"country" validate:"required,len=2"`
}

// MoveCustomer is the input of "customer.move".
type MoveCustomer struct {
	ID      uuid.UUID `json:"id" validate:"required"`
	Street  string    `json:"street" validate:"required,max=200"`
	City    string    `json:"city" validate:"required,max=100"`
	Country string    `json:"country" validate:"required,len=2"`
}

// MovesQuery is the input of "customer.moves".
type MovesQuery struct {
	ID uuid.UUID `json:"id" validate:"required"`
}

// Move is one entry of the "customer.moves" answer.
type Move struct {
	Version int           `json:"version"`
	Address CustomerMoved `json:"address"`
}

// Feature is the customer register.
var Feature = feature.Define("customers", func(r *feature.Registrar) {
	r.Entity("customer", feature.Fields{"name": feature.Text().Required().MaxLen(200)})
	r.Crud("customer", feature.Access{Write: feature.Roles("Clerk"), Read: feature.AnyUser()})

	r.DefineEvent("customer.moved", CustomerMoved{}, feature.EventVersion(3))
	r.EventMigration("customer.moved", 1, 2, feature.MapAs(splitAddress))
	r.EventMigration("customer.moved", 2, 3, feature.DefaultValue("country", "DE"))

	feature.HandleCommand(r, "customer.move", feature.Roles("Clerk"), move)
	feature.HandleQuery(r, "customer.moves", feature.AnyUser(), moves)
})

// movedV1 is customer.moved's payload at version 1: one line.
type movedV1 struct {
	Address string `json:"address"`
}

// movedV2 is customer.moved's payload at version 2: street and city.
type movedV2 struct {
	Street string `json:"street"`
	City   string `json:"city"`
}

// splitAddress turns version 1's "Main St 1, Berlin" into street and city.
func splitAddress(v1 movedV1) (movedV2, error) {
	street, city, ok := strings.Cut(v1.Address, ",")
	if !ok {
		return movedV2{}, errors.New("address without a city")
	}
	return movedV2{Street: strings.TrimSpace(street), City: strings.TrimSpace(city)}, nil
}

// move records a new address (always version 3).
func move(ctx feature.CommandContext, in MoveCustomer) (any, error) {
	c, err := ctx.FetchForWriting(in.ID, "customer", feature.AnyVersion)
	if err != nil {
		return nil, err
	}
	if c.Version() == 0 {
		return nil, feature.Refuse("no_customer", "no such customer")
	}
	return nil, c.Append("customer.moved", CustomerMoved{Street: in.Street, City: in.City, Country: in.Country})
}

// moves answers every address a customer had, oldest first, whatever
// version each was stored as.
func moves(ctx feature.CommandContext, in MovesQuery) (any, error) {
	c, err := ctx.LoadAggregate(in.ID, "customer", feature.LoadOptions{})
	if err != nil {
		return nil, err
	}
	out := []Move{}
	for _, e := range c.Events() {
		if e.Type != "customer.moved" {
			continue
		}
		m, err := feature.Decode[CustomerMoved](e)
		if err != nil {
			return nil, err
		}
		out = append(out, Move{Version: e.Version, Address: m})
	}
	return out, nil
}

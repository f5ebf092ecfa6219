// Package statemachine shows events as state transitions (level 2): an
// order moves placed → paid → shipped, or to cancelled before it ships.
// Each transition is a command that appends its own event; a transition the
// order's state does not allow is refused with 422 and changes nothing.
package statemachine

import (
	"fmt"
	"slices"

	"github.com/google/uuid"

	"github.com/kumiko-go/kumiko/feature"
)

// The states of an order.
const (
	Placed    = "placed"
	Paid      = "paid"
	Shipped   = "shipped"
	Cancelled = "cancelled"
)

// transition is one edge of the state machine: the command, the event it
// appends, the states it may start from and the state it leads to.
type transition struct {
	command, event string
	from           []string
	to             string
}

// transitions is the whole state machine.
var transitions = []transition{
	{command: "order.pay", event: "order.paid", from: []string{Placed}, to: Paid},
	{command: "order.ship", event: "order.shipped", from: []string{Paid}, to: Shipped},
	{command: "order.cancel", event: "order.cancelled", from: []string{Placed, Paid}, to: Cancelled},
}

// Transition is the input of every transition command: the order and the
// version the client last saw.
type Transition struct {
	ID      uuid.UUID `json:"id" validate:"required"`
	Version int       `json:"version" validate:"required,min=1"`
	Note    string    `json:"note" validate:"max=500"`
}

// Transitioned is the payload of every transition event.
type Transitioned struct {
	From string `json:"from" validate:"required"`
	Note string `json:"note"`
}

// Changed is what a transition answers.
type Changed struct {
	ID      uuid.UUID `json:"id"`
	Version int       `json:"version"`
	Status  string    `json:"status"`
}

// statusChange is the order's field change that follows a transition event;
// a transition reads the order's state into it, too.
type statusChange struct {
	Status string `json:"status"`
}

// transitionCommands are the commands of the transitions: the only ones
// that set an order's status.
func transitionCommands() []string {
	var out []string
	for _, tr := range transitions {
		out = append(out, tr.command)
	}
	return out
}

// Feature is order handling. The status is set by transitions only: no
// role may send it in a CRUD write or another command.
var Feature = feature.Define("orders", func(r *feature.Registrar) {
	r.Entity("order", feature.Fields{
		"item": feature.Text().Required().MaxLen(200),
		"status": feature.Enum(Placed, Paid, Shipped, Cancelled).Default(Placed).
			WriteRoles("nobody").WrittenBy(transitionCommands()...),
	}, feature.StateStruct[statusChange]())
	r.Crud("order", feature.Access{Write: feature.Roles("Clerk"), Read: feature.AnyUser()})
	for _, tr := range transitions {
		r.DefineEvent(tr.event, Transitioned{})
		feature.HandleCommand(r, tr.command, feature.Roles("Clerk"), tr.run)
	}
})

// run applies the transition when the order's state allows it.
func (tr transition) run(ctx feature.CommandContext, in Transition) (any, error) {
	o, err := ctx.FetchForWriting(in.ID, "order", in.Version)
	if err != nil {
		return nil, err
	}
	state, err := feature.StateAs[statusChange](o)
	if err != nil {
		return nil, err
	}
	from := state.Status
	if !slices.Contains(tr.from, from) {
		return nil, feature.Refuse("invalid_transition", fmt.Sprintf("%s is not allowed for an order that is %s", tr.command, from))
	}
	if err := o.Append(tr.event, Transitioned{From: from, Note: in.Note}); err != nil {
		return nil, err
	}
	if err := o.Append("order.updated", statusChange{Status: tr.to}); err != nil {
		return nil, err
	}
	return Changed{ID: in.ID, Version: o.Version(), Status: tr.to}, nil
}

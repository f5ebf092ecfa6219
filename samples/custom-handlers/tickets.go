// Package customhandlers adds domain events and commands (level 2) to a CRUD
// entity: a support ticket is created with CRUD, but it is assigned and
// escalated through commands that record what happened as events of their
// own — ticket.assigned, ticket.escalated — with validated payloads.
package customhandlers

import (
	"github.com/google/uuid"

	"github.com/kumiko-go/kumiko/feature"
)

// TicketAssigned is the payload of "ticket.assigned".
type TicketAssigned struct {
	Assignee   string `json:"assignee" validate:"required"`
	AssignedBy string `json:"assignedBy" validate:"required"`
}

// TicketEscalated is the payload of "ticket.escalated".
type TicketEscalated struct {
	Reason string `json:"reason" validate:"required,max=500"`
}

// AssignTicket is the input of "ticket.assign".
type AssignTicket struct {
	ID       uuid.UUID `json:"id" validate:"required"`
	Version  int       `json:"version" validate:"required,min=1"`
	Assignee string    `json:"assignee" validate:"required,max=100"`
}

// EscalateTicket is the input of "ticket.escalate".
type EscalateTicket struct {
	ID      uuid.UUID `json:"id" validate:"required"`
	Version int       `json:"version" validate:"required,min=1"`
	Reason  string    `json:"reason" validate:"required,max=500"`
}

// Changed is what both commands answer: the ticket and its version after
// the command, for the client's next write.
type Changed struct {
	ID      uuid.UUID `json:"id"`
	Version int       `json:"version"`
}

// ticketFields is the change a command makes to the ticket's own fields,
// appended as ticket.updated next to the domain event.
type ticketFields struct {
	Assignee string `json:"assignee,omitempty"`
	Priority string `json:"priority,omitempty"`
}

// Feature is the ticket desk.
var Feature = feature.Define("tickets", func(r *feature.Registrar) {
	r.Entity("ticket", feature.Fields{
		"title":    feature.Text().Required().MaxLen(200),
		"assignee": feature.Text().MaxLen(100),
		"priority": feature.Enum("normal", "urgent").Default("normal"),
	})
	r.Crud("ticket", feature.Access{Write: feature.Roles("Agent"), Read: feature.AnyUser()})

	r.DefineEvent("ticket.assigned", TicketAssigned{})
	r.DefineEvent("ticket.escalated", TicketEscalated{})
	feature.HandleCommand(r, "ticket.assign", feature.Roles("Lead"), assign)
	feature.HandleCommand(r, "ticket.escalate", feature.Roles("Agent", "Lead"), escalate)
})

// assign records who now works on the ticket and who decided it.
func assign(ctx feature.CommandContext, in AssignTicket) (any, error) {
	t, err := ctx.FetchForWriting(in.ID, "ticket", in.Version) // version_conflict before any write
	if err != nil {
		return nil, err
	}
	if err := t.Append("ticket.assigned", TicketAssigned{Assignee: in.Assignee, AssignedBy: ctx.User().ID}); err != nil {
		return nil, err
	}
	if err := t.Append("ticket.updated", ticketFields{Assignee: in.Assignee}); err != nil {
		return nil, err
	}
	return Changed{ID: in.ID, Version: t.Version()}, nil
}

// escalate makes the ticket urgent, once: a second escalation is refused.
func escalate(ctx feature.CommandContext, in EscalateTicket) (any, error) {
	t, err := ctx.FetchForWriting(in.ID, "ticket", in.Version)
	if err != nil {
		return nil, err
	}
	// Only the priority is read: the assignee may be empty (NULL), which a
	// string field could not hold.
	state, err := feature.StateAs[struct {
		Priority string `json:"priority"`
	}](t)
	if err != nil {
		return nil, err
	}
	if state.Priority == "urgent" {
		return nil, feature.Refuse("already_urgent", "the ticket is already urgent") // 422
	}
	if err := t.Append("ticket.escalated", TicketEscalated{Reason: in.Reason}); err != nil {
		return nil, err
	}
	if err := t.Append("ticket.updated", ticketFields{Priority: "urgent"}); err != nil {
		return nil, err
	}
	return Changed{ID: in.ID, Version: t.Version()}, nil
}

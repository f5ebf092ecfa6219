package customhandlers_test

import (
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/kumikotest"
	"github.com/kumiko-go/kumiko/pipeline"
	customhandlers "github.com/kumiko-go/kumiko/samples/custom-handlers"
)

type ticket struct {
	ID       uuid.UUID `json:"id"`
	Version  int       `json:"version"`
	Assignee string    `json:"assignee"`
	Priority string    `json:"priority"`
}

// Commands over HTTP: typed answers, the domain events in the timeline, a
// refused command as 422, an invalid payload as 400 naming the field.
func TestTickets(t *testing.T) {
	t.Parallel()
	srv := kumikotest.NewServer(t, []*feature.Feature{customhandlers.Feature})
	tenant := uuid.New()
	agent, lead := srv.As(t, tenant, "ann", "Agent"), srv.As(t, tenant, "lee", "Lead")

	tk := kumikotest.Data[ticket](agent.Write("ticket.create", map[string]any{"title": "Printer on fire"}))
	got := kumikotest.Data[customhandlers.Changed](lead.Command("ticket.assign",
		customhandlers.AssignTicket{ID: tk.ID, Version: tk.Version, Assignee: "ann"}))
	require.Equal(t, customhandlers.Changed{ID: tk.ID, Version: 3}, got)

	require.Equal(t, "access_denied", agent.Command("ticket.assign",
		customhandlers.AssignTicket{ID: tk.ID, Version: 3, Assignee: "ann"}).Problem().Code, "only a lead assigns")

	got = kumikotest.Data[customhandlers.Changed](agent.Command("ticket.escalate",
		customhandlers.EscalateTicket{ID: tk.ID, Version: got.Version, Reason: "smoke"}))
	p := agent.Command("ticket.escalate", customhandlers.EscalateTicket{ID: tk.ID, Version: got.Version, Reason: "more smoke"}).Problem()
	require.Equal(t, 422, p.Status)
	require.Equal(t, "already_urgent", p.Reason)

	p = agent.Command("ticket.escalate", map[string]any{"id": tk.ID, "version": got.Version}).Problem()
	require.Equal(t, "validation_error", p.Code)
	require.Equal(t, "reason", p.Fields[0].Path)

	tk = kumikotest.Data[ticket](agent.Query("ticket.detail", map[string]any{"id": tk.ID}))
	require.Equal(t, ticket{ID: tk.ID, Version: 5, Assignee: "ann", Priority: "urgent"}, tk)

	// A ticket nobody is assigned to escalates as well.
	open := kumikotest.Data[ticket](agent.Write("ticket.create", map[string]any{"title": "Paper jam"}))
	got = kumikotest.Data[customhandlers.Changed](agent.Command("ticket.escalate",
		customhandlers.EscalateTicket{ID: open.ID, Version: open.Version, Reason: "urgent"}))
	require.Equal(t, 3, got.Version)

	timeline := kumikotest.Data[pipeline.Timeline](srv.As(t, tenant, "root", "Admin").Get("/api/inspect/ticket/" + tk.ID.String()))
	types := []string{}
	for _, e := range timeline.Events {
		types = append(types, e.Type)
	}
	require.Equal(t, []string{"ticket.created", "ticket.assigned", "ticket.updated", "ticket.escalated", "ticket.updated"}, types)
	require.JSONEq(t, `{"assignee":"ann","assignedBy":"lee"}`, string(timeline.Events[1].Payload))
}

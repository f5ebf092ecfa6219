package statemachine_test

import (
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/kumikotest"
	statemachine "github.com/kumiko-go/kumiko/samples/state-machine"
)

type order struct {
	ID      uuid.UUID `json:"id"`
	Version int       `json:"version"`
	Status  string    `json:"status"`
}

// An order is paid and shipped; cancelling it then, or shipping it again,
// answers 422 invalid_transition and leaves it as it was; its status
// cannot be written through CRUD.
func TestOrderLifecycle(t *testing.T) {
	t.Parallel()
	srv := kumikotest.NewServer(t, []*feature.Feature{statemachine.Feature})
	clerk := srv.As(t, uuid.New(), "cy", "Clerk")

	o := kumikotest.Data[order](clerk.Write("order.create", map[string]any{"item": "Teapot"}))
	require.Equal(t, statemachine.Placed, o.Status)

	p := clerk.Command("order.ship", statemachine.Transition{ID: o.ID, Version: o.Version}).Problem()
	require.Equal(t, 422, p.Status)
	require.Equal(t, "invalid_transition", p.Reason)
	require.Equal(t, "order.ship is not allowed for an order that is placed", p.Detail)

	c := kumikotest.Data[statemachine.Changed](clerk.Command("order.pay", statemachine.Transition{ID: o.ID, Version: o.Version}))
	c = kumikotest.Data[statemachine.Changed](clerk.Command("order.ship", statemachine.Transition{ID: o.ID, Version: c.Version, Note: "DHL"}))
	require.Equal(t, statemachine.Changed{ID: o.ID, Version: 5, Status: statemachine.Shipped}, c)

	for _, cmd := range []string{"order.cancel", "order.ship", "order.pay"} {
		p := clerk.Command(cmd, statemachine.Transition{ID: o.ID, Version: c.Version}).Problem()
		require.Equal(t, "invalid_transition", p.Reason, cmd)
	}
	p = clerk.Write("order.update", map[string]any{"id": o.ID, "version": c.Version, "changes": map[string]any{"status": "placed"}}).Problem()
	require.Equal(t, "access_denied", p.Code, "the status moves by transitions only")

	o = kumikotest.Data[order](clerk.Query("order.detail", map[string]any{"id": o.ID}))
	require.Equal(t, order{ID: o.ID, Version: 5, Status: statemachine.Shipped}, o)
}

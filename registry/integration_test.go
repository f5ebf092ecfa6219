package registry_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/registry"
)

type shipped struct {
	OrderID string `json:"orderId" validate:"required"`
}

func noopMessage(feature.CommandContext, feature.Message) error { return nil }

func TestIntegrationEventsCompile(t *testing.T) {
	orders := feature.Define("orders", func(r *feature.Registrar) {
		r.IntegrationEvent("order.shipped", shipped{}, feature.EventVersion(2))
	})
	billing := feature.Define("billing", func(r *feature.Registrar) {
		r.IntegrationEvent("order.shipped", shipped{}, feature.EventVersion(2)) // the shared contract again
		r.OnIntegrationEvent("order.shipped", "create-invoice", noopMessage)
	})
	reg, err := registry.Build(orders, billing)
	require.NoError(t, err)
	c, ok := reg.Contract("order.shipped")
	require.True(t, ok)
	require.Equal(t, registry.Contract{Name: "order.shipped", Feature: "orders", Version: 2, GoType: c.GoType}, c)
	hs := reg.IntegrationHandlers()
	require.Len(t, hs, 1)
	require.Equal(t, "create-invoice", hs[0].Name)
	require.Equal(t, "billing", hs[0].Feature)
	_, err = reg.DecodePayload("order.shipped", []byte(`{}`))
	require.Error(t, err, "the contract's payload is validated")
}

func TestIntegrationBootErrors(t *testing.T) {
	f := feature.Define("shop", func(r *feature.Registrar) {
		r.DefineEvent("order.placed", shipped{})
		r.IntegrationEvent("order.shipped", shipped{})
		r.IntegrationEvent("order.placed", shipped{})
		r.IntegrationEvent("order.noted", "a string")
		r.IntegrationEvent("Bad", shipped{})
		r.IntegrationEvent("order.shipped", struct{ Other string }{})
		r.OnIntegrationEvent("order.unknown", "lost", noopMessage)
		r.OnIntegrationEvent("order.shipped", "twice", noopMessage)
		r.OnIntegrationEvent("order.shipped", "twice", noopMessage)
		r.OnIntegrationEvent("order.shipped", "nil-handler", nil)
		r.OnIntegrationEvent("order.shipped", "Not A Name", noopMessage)
	})
	_, err := registry.Build(f)
	requireBootErrors(t, err,
		want{"shop", `integration event "order.placed"`, registry.RuleUnique, "also an event"},
		want{"shop", `integration event "order.noted"`, registry.RulePayload, ""},
		want{"shop", `integration event "Bad"`, registry.RuleName, "dotted"},
		want{"shop", `integration event "order.shipped"`, registry.RuleUnique, "another payload type or version"},
		want{"shop", `integration handler "lost"`, registry.RuleIntegration, `"order.unknown", which is not an integration event`},
		want{"shop", `integration handler "twice"`, registry.RuleUnique, "already used"},
		want{"shop", `integration handler "nil-handler"`, registry.RuleIntegration, "nil"},
		want{"shop", `integration handler "Not A Name"`, registry.RuleName, ""},
	)
}

package registry_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/registry"
)

type shipped struct {
	OrderID string `json:"orderId" validate:"required"`
}

func noopMessage(feature.CommandContext, feature.Message) error { return nil }

func TestIntegrationEventsCompile(t *testing.T) {
	// A contracts package both features call: the contract and its
	// migration, declared twice in one app.
	declare := func(r *feature.Registrar) {
		r.IntegrationEvent("order.shipped", shipped{}, feature.EventVersion(2))
		r.EventMigration("order.shipped", 1, 2, feature.Rename("order", "orderId"))
	}
	orders := feature.Define("orders", declare)
	billing := feature.Define("billing", func(r *feature.Registrar) {
		declare(r) // the shared contract again
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
		r.IntegrationEvent("order.keyed", shipped{}, feature.MessageKey("order_id"))
		r.IntegrationEvent("order.rekeyed", shipped{}, feature.MessageKey("orderId"))
		r.IntegrationEvent("order.rekeyed", shipped{})
	})
	_, err := registry.Build(f)
	requireBootErrors(t, err,
		want{"shop", `integration event "order.placed"`, registry.RuleUnique, "also an event"},
		want{"shop", `integration event "order.noted"`, registry.RulePayload, ""},
		want{"shop", `integration event "Bad"`, registry.RuleName, "dotted"},
		want{"shop", `integration event "order.shipped"`, registry.RuleUnique, "another payload type, version or message key"},
		want{"shop", `integration handler "lost"`, registry.RuleIntegration, `"order.unknown", which is not an integration event`},
		want{"shop", `integration handler "twice"`, registry.RuleUnique, "already used"},
		want{"shop", `integration handler "nil-handler"`, registry.RuleIntegration, "nil"},
		want{"shop", `integration handler "Not A Name"`, registry.RuleName, ""},
		want{"shop", `integration event "order.keyed"`, registry.RuleIntegration, `MessageKey("order_id") names no top-level field`},
		want{"shop", `integration event "order.rekeyed"`, registry.RuleUnique, "message key"},
	)
}

// A contract's key field orders its messages: KeyOf reads it from a
// payload (a string as is, anything else as its JSON), and an ordered
// handler says so.
func TestMessageKeys(t *testing.T) {
	type moved struct {
		Box   int    `json:"box"`
		Shelf string `json:"shelf"`
	}
	f := feature.Define("store", func(r *feature.Registrar) {
		r.IntegrationEvent("box.moved", moved{}, feature.MessageKey("box"))
		r.IntegrationEvent("shelf.moved", moved{}, feature.MessageKey("shelf"))
		r.IntegrationEvent("box.noted", moved{})
		r.OnIntegrationEvent("box.moved", "in-order", noopMessage, feature.Ordered())
		r.OnIntegrationEvent("box.moved", "any-order", noopMessage)
	})
	reg, err := registry.Build(f)
	require.NoError(t, err)
	box, _ := reg.Contract("box.moved")
	shelf, _ := reg.Contract("shelf.moved")
	noted, _ := reg.Contract("box.noted")
	require.Equal(t, "box", box.Key)
	require.Equal(t, "12", box.KeyOf([]byte(`{"box":12,"shelf":"a"}`)))
	require.Equal(t, "a", shelf.KeyOf([]byte(`{"box":12,"shelf":"a"}`)))
	require.Empty(t, shelf.KeyOf([]byte(`{"box":12,"shelf":null}`)))
	require.Empty(t, shelf.KeyOf([]byte(`not json`)))
	require.Empty(t, noted.KeyOf([]byte(`{"box":12}`)))
	hs := reg.IntegrationHandlers()
	require.True(t, hs[0].Ordered)
	require.False(t, hs[1].Ordered)
}

// A message of an older contract version is upcast through the contract's
// migrations; one newer than the app knows is refused, never guessed at.
func TestUpcastMessage(t *testing.T) {
	f := feature.Define("billing", func(r *feature.Registrar) {
		r.IntegrationEvent("order.shipped", shipped{}, feature.EventVersion(3))
		r.EventMigration("order.shipped", 1, 2, feature.Rename("order", "orderId"))
		r.EventMigration("order.shipped", 2, 3, feature.DefaultValue("currency", "EUR"))
	})
	reg, err := registry.Build(f)
	require.NoError(t, err)

	v, p, err := reg.UpcastMessage("order.shipped", 1, []byte(`{"order":"o-1","total":12.50}`))
	require.NoError(t, err)
	require.Equal(t, 3, v)
	require.JSONEq(t, `{"orderId":"o-1","total":12.50,"currency":"EUR"}`, string(p))

	in := []byte(`{"orderId":"o-1"}`)
	v, p, err = reg.UpcastMessage("order.shipped", 3, in)
	require.NoError(t, err)
	require.Equal(t, 3, v)
	require.Equal(t, string(in), string(p))

	for _, version := range []int{4, 0} {
		_, _, err = reg.UpcastMessage("order.shipped", version, in)
		var unknown *eventstore.UnknownEventVersionError
		require.ErrorAs(t, err, &unknown, "version %d", version)
		require.Equal(t, "event_schema_unknown_version", unknown.Code())
		require.Equal(t, 3, unknown.Current)
	}
	_, _, err = reg.UpcastMessage("order.unknown", 1, in)
	require.ErrorIs(t, err, eventstore.ErrUnknownEventVersion)

	// Domain event upcasting does not touch messages: the relay publishes
	// them as stored.
	v, p, err = reg.Upcast("order.shipped", 1, []byte(`{"order":"o-1"}`))
	require.NoError(t, err)
	require.Equal(t, 1, v)
	require.JSONEq(t, `{"order":"o-1"}`, string(p))
}

func TestContractMigrationBootErrors(t *testing.T) {
	shop := feature.Define("shop", func(r *feature.Registrar) {
		r.IntegrationEvent("order.shipped", shipped{}, feature.EventVersion(4))
		r.EventMigration("order.shipped", 1, 2, feature.Rename("order", "orderId"))
		r.EventMigration("order.shipped", 3, 4, feature.Drop("note"))
		r.EventMigration("order.shipped", 4, 5, feature.Drop("note"))
		r.EventMigration("order.shipped", 1, 2, feature.Drop("other"))
		r.EventMigration("order.unknown", 1, 2, feature.Drop("note"))
	})
	other := feature.Define("other", func(r *feature.Registrar) {
		r.EventMigration("order.shipped", 2, 3)
	})
	_, err := registry.Build(shop, other)
	requireBootErrors(t, err,
		want{"shop", `integration event "order.shipped"`, registry.RuleMigration, "incomplete: no migration 2→3"},
		want{"shop", `migration "order.shipped" 4→5`, registry.RuleMigration, "beyond the current version 4"},
		want{"shop", `migration "order.shipped" 1→2`, registry.RuleMigration, "duplicate"},
		want{"shop", `migration "order.unknown" 1→2`, registry.RuleMigration, "not defined by any feature"},
		want{"other", `migration "order.shipped" 2→3`, registry.RuleMigration, "not declared by this feature"},
	)
}

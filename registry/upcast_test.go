package registry_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/registry"
)

// InvoiceSent v3: v1 had "to" and "amountCents"; v2 renamed "to" to
// "recipient" and added "currency"; v3 dropped "legacy" and turned cents into
// a decimal string.
type InvoiceSent struct {
	Recipient string `json:"recipient" validate:"required"`
	Currency  string `json:"currency" validate:"required,len=3"`
	Amount    string `json:"amount" validate:"required"`
}

func invoiceFeature() *feature.Feature {
	return feature.Define("billing", func(r *feature.Registrar) {
		r.Entity("invoice", feature.Fields{"title": feature.Text()})
		r.DefineEvent("invoice.sent", InvoiceSent{}, feature.EventVersion(3))
		r.EventMigration("invoice.sent", 1, 2,
			feature.Rename("to", "recipient"),
			feature.DefaultValue("currency", "EUR"),
		)
		r.EventMigration("invoice.sent", 2, 3,
			feature.Drop("legacy"),
			feature.MapFunc(func(m map[string]any) (map[string]any, error) {
				cents, ok := m["amountCents"].(json.Number)
				if !ok {
					return nil, errors.New("amountCents missing")
				}
				n, err := cents.Int64()
				if err != nil {
					return nil, err
				}
				delete(m, "amountCents")
				m["amount"] = fmt.Sprintf("%d.%02d", n/100, n%100)
				return m, nil
			}),
		)
		// A CRUD event migrated by its entity's feature: its version follows.
		r.EventMigration("invoice.created", 1, 2, feature.Rename("name", "title"))
	})
}

func invoiceRegistry(t testing.TB) *registry.Registry {
	t.Helper()
	reg, err := registry.Build(invoiceFeature())
	require.NoError(t, err)
	return reg
}

func TestUpcastChain(t *testing.T) {
	t.Parallel()
	reg := invoiceRegistry(t)
	var up eventstore.Upcaster = reg // the event store plugs the registry in

	stored := json.RawMessage(`{"to":"ann","amountCents":12345,"legacy":true,"big":12345678901234567890}`)
	keep := string(stored)
	v, out, err := up.Upcast("invoice.sent", 1, stored)
	require.NoError(t, err)
	require.Equal(t, 3, v)
	require.JSONEq(t, `{"recipient":"ann","currency":"EUR","amount":"123.45","big":12345678901234567890}`, string(out))
	require.Contains(t, string(out), "12345678901234567890", "numbers keep their exact text")
	require.Equal(t, keep, string(stored), "the stored payload is never modified")

	// The result is a valid current payload.
	_, err = reg.DecodePayload("invoice.sent", json.RawMessage(strings.Replace(string(out), `,"big":12345678901234567890`, "", 1)))
	require.NoError(t, err)

	v, out, err = up.Upcast("invoice.sent", 2, json.RawMessage(`{"recipient":"bob","currency":"USD","amountCents":5}`))
	require.NoError(t, err)
	require.Equal(t, 3, v)
	require.JSONEq(t, `{"recipient":"bob","currency":"USD","amount":"0.05"}`, string(out), "only the steps after the stored version run")

	current := json.RawMessage(`{"recipient":"c","currency":"EUR","amount":"1.00"}`)
	v, out, err = up.Upcast("invoice.sent", 3, current)
	require.NoError(t, err)
	require.Equal(t, 3, v)
	require.Equal(t, &current[0], &out[0], "a current payload passes through as is")

	v, out, err = up.Upcast("invoice.created", 1, json.RawMessage(`{"name":"Q1"}`))
	require.NoError(t, err)
	require.Equal(t, 2, v)
	require.JSONEq(t, `{"title":"Q1"}`, string(out))
	ev, _ := reg.Event("invoice.created")
	require.Equal(t, 2, ev.Version, "a migrated CRUD event is at the end of its chain")
	upd, _ := reg.Event("invoice.updated")
	require.Equal(t, 1, upd.Version)
}

func TestUpcastPassesUnknownTypesThrough(t *testing.T) {
	t.Parallel()
	reg := invoiceRegistry(t)
	in := json.RawMessage(`not even json`)
	v, out, err := reg.Upcast("other.thing", 7, in)
	require.NoError(t, err)
	require.Equal(t, 7, v)
	require.Equal(t, string(in), string(out))
}

func TestUpcastRefusesVersionsItCannotReach(t *testing.T) {
	t.Parallel()
	reg := invoiceRegistry(t)
	for _, version := range []int{4, 0, -1} {
		_, _, err := reg.Upcast("invoice.sent", version, json.RawMessage(`{}`))
		var uv *eventstore.UnknownEventVersionError
		require.True(t, errors.As(err, &uv), "version %d: %v", version, err)
		require.Equal(t, &eventstore.UnknownEventVersionError{Type: "invoice.sent", Version: version, Current: 3}, uv)
		require.ErrorIs(t, err, eventstore.ErrUnknownEventVersion)
		require.Equal(t, "event_schema_unknown_version", eventstore.Code(err))
	}
}

func TestUpcastFailures(t *testing.T) {
	t.Parallel()
	reg := invoiceRegistry(t)
	for _, payload := range []string{`null`, `[1]`, `"x"`, `{"a":1} trailing`, `{`, ``} {
		_, _, err := reg.Upcast("invoice.sent", 1, json.RawMessage(payload))
		require.ErrorContains(t, err, "upcast invoice.sent from v1", payload)
	}
	stored := json.RawMessage(`{"to":"ann"}`)
	_, _, err := reg.Upcast("invoice.sent", 1, stored)
	require.ErrorContains(t, err, "upcast invoice.sent v2→v3 (map func): migration map func: amountCents missing")
	require.Equal(t, `{"to":"ann"}`, string(stored))
}

func TestBrokenChainFailsBuild(t *testing.T) {
	t.Parallel()
	_, err := registry.Build(feature.Define("billing", func(r *feature.Registrar) {
		r.DefineEvent("invoice.sent", InvoiceSent{}, feature.EventVersion(3))
		r.EventMigration("invoice.sent", 2, 3, feature.Drop("legacy"))
	}))
	requireBootErrors(t, err, want{"billing", `event "invoice.sent"`, registry.RuleMigration, "no migration 1→2"})
}

func FuzzUpcast(f *testing.F) {
	reg := invoiceRegistry(f)
	f.Add("invoice.sent", 1, []byte(`{"to":"ann","amountCents":12345,"legacy":true}`))
	f.Add("invoice.sent", 2, []byte(`{"amountCents":1e400}`))
	f.Add("invoice.sent", 2, []byte(`{"amountCents":"x"}`))
	f.Add("invoice.sent", 3, []byte(`{}`))
	f.Add("invoice.sent", 9, []byte(`{}`))
	f.Add("invoice.created", 1, []byte(`{"name":{"deep":[1,2,{"x":null}]}}`))
	f.Add("invoice.created", 1, []byte(`[[[[[[[]]]]]]]`))
	f.Add("unknown.type", 1, []byte(`garbage`))
	f.Fuzz(func(t *testing.T, eventType string, version int, payload []byte) {
		keep := string(payload)
		v, out, err := reg.Upcast(eventType, version, payload)
		require.Equal(t, keep, string(payload), "the input is never modified")
		if err != nil {
			return
		}
		if ev, known := reg.Event(eventType); known {
			require.Equal(t, ev.Version, v)
			if version != ev.Version {
				require.True(t, json.Valid(out), "an upcast payload is valid JSON: %q", out)
			}
		} else {
			require.Equal(t, version, v)
		}
	})
}

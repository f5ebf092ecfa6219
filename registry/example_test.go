package registry_test

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/registry"
)

func ExampleBuild() {
	type NoteAdded struct {
		Text string `json:"text" validate:"required,max=140"`
	}
	notes := feature.Define("notes", func(r *feature.Registrar) {
		r.Entity("note", feature.Fields{"title": feature.Text().Required()})
		r.Crud("note", feature.Access{Write: feature.Roles("Editor"), Read: feature.AnyUser()})
		r.DefineEvent("note.added", NoteAdded{})
	})
	reg, err := registry.Build(notes)
	if err != nil {
		fmt.Println(err)
		return
	}
	h, _ := reg.Handler("note.create")
	fmt.Println(h.Kind, h.Access)

	_, err = reg.DecodePayload("note.added", json.RawMessage(`{"text":"","tags":[]}`))
	var ve *registry.ValidationError
	if errors.As(err, &ve) {
		for _, f := range ve.Fields {
			fmt.Println(f.Path, f.Code)
		}
	}
	// Output:
	// write roles(Editor)
	// tags unknown_field
	// text required
}

func ExampleBuild_bootErrors() {
	broken := feature.Define("billing", func(r *feature.Registrar) {
		r.DefineEvent("invoice.sent", struct{}{}, feature.EventVersion(2))
		r.Command("invoice.send", struct{}{}, feature.Rule{}, func(feature.CommandContext, struct{}) (any, error) { return nil, nil })
	})
	_, err := registry.Build(broken)
	for _, be := range registry.AllBootErrors(err) {
		fmt.Println(be)
	}
	// Output:
	// boot: feature "billing": event "invoice.sent": upcaster chain to version 2 is incomplete: no migration 1→2 [migration]
	// boot: feature "billing": handler "invoice.send": unreachable handler: no access rule (pass feature.Roles, feature.AnyUser or feature.Anonymous) [access]
}

func ExampleRegistry_Upcast() {
	billing := feature.Define("billing", func(r *feature.Registrar) {
		r.DefineEvent("invoice.sent", struct {
			Recipient string `json:"recipient"`
			Currency  string `json:"currency"`
		}{}, feature.EventVersion(2))
		r.EventMigration("invoice.sent", 1, 2, feature.Rename("to", "recipient"), feature.DefaultValue("currency", "EUR"))
	})
	reg, _ := registry.Build(billing)
	v, payload, _ := reg.Upcast("invoice.sent", 1, json.RawMessage(`{"to":"ann"}`))
	fmt.Println(v, string(payload))
	// Output: 2 {"currency":"EUR","recipient":"ann"}
}

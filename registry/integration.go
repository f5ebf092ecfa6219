package registry

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"

	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/internal/spec"
)

// RuleIntegration is the rule of boot errors about integration events and
// their handlers: an unknown contract, a duplicate handler name, a nil
// handler.
const RuleIntegration = "integration"

// Contract is a compiled integration event.
type Contract struct {
	Name string
	// Feature declares it.
	Feature string
	// Version is stamped on every message published.
	Version int
	// GoType is the payload's Go type.
	GoType reflect.Type
	// Key is the JSON name of the payload field whose value orders the
	// messages (feature.MessageKey); "" when none is named.
	Key string
	// Personal maps each personal payload field (top-level JSON name,
	// feature.Personal) to the payload field holding its data subject's id
	// (feature.SubjectField, which a contract with personal fields must
	// name). Nil when the contract carries no personal data.
	Personal map[string]string
}

func (c Contract) clone() Contract {
	c.Personal = maps.Clone(c.Personal)
	return c
}

// IntegrationHandler is a compiled handler of an integration event.
type IntegrationHandler struct {
	// Name is unique in the app; the inbox records it per message.
	Name    string
	Event   string
	Feature string
	Handle  func(ctx feature.CommandContext, m feature.Message) error
	// Ordered handlers get the messages of one key in publish order
	// (feature.Ordered).
	Ordered bool
}

// KeyOf is the ordering key of a message of c with payload: the value of
// its Key field, a JSON string as is and any other value as its JSON text;
// "" when c names no key or the field is missing or null.
func (c Contract) KeyOf(payload json.RawMessage) string {
	if c.Key == "" {
		return ""
	}
	var fields map[string]json.RawMessage
	if json.Unmarshal(payload, &fields) != nil {
		return ""
	}
	v := bytes.TrimSpace(fields[c.Key])
	var s string
	switch {
	case len(v) == 0 || string(v) == "null":
		return ""
	case json.Unmarshal(v, &s) == nil:
		return s
	}
	return string(v)
}

// Contract returns the integration event called name.
func (r *Registry) Contract(name string) (Contract, bool) {
	c, ok := r.contracts[name]
	return c.clone(), ok
}

// Contracts lists the app's integration events, sorted by name.
func (r *Registry) Contracts() []Contract {
	out := make([]Contract, 0, len(r.contracts))
	for _, k := range slices.Sorted(maps.Keys(r.contracts)) {
		out = append(out, r.contracts[k].clone())
	}
	return out
}

// IntegrationHandlers lists the app's integration handlers in declaration
// order.
func (r *Registry) IntegrationHandlers() []IntegrationHandler {
	return slices.Clone(r.integrationHandlers)
}

// contract compiles an integration event. Its name shares the namespace of
// domain events and handlers: it is stored as an event type.
func (b *builder) contract(feat string, def spec.Event) {
	item := fmt.Sprintf("integration event %q", def.Name)
	if !dottedNameRe.MatchString(def.Name) {
		b.fail(feat, item, RuleName, "integration event names are lowercase and dotted, like order.shipped")
		return
	}
	if owner, dup := b.eventOwner[def.Name]; dup {
		b.fail(feat, item, RuleUnique, "the name is also an event of feature %q", owner)
		return
	}
	if c, dup := b.reg.contracts[def.Name]; dup {
		// Features of one app may each declare a contract they share (from
		// one contracts package): the same payload type, version, message
		// key and personal fields.
		if c.GoType != def.Payload || c.Version != def.Version || c.Key != def.Key || !maps.Equal(c.Personal, personalOf(def)) {
			b.fail(feat, item, RuleUnique, "integration event is declared by feature %q with another payload type, version or message key, or other personal fields", c.Feature)
		}
		return
	}
	if def.Version < 1 {
		b.fail(feat, item, RuleIntegration, "EventVersion(%d) must be at least 1", def.Version)
		return
	}
	p, ok := b.payload(feat, item, def.Payload, "payload")
	personal := b.eventPersonal(feat, item, RuleIntegration, def, p)
	if len(def.Personal) > 0 && def.Subject == "" {
		b.fail(feat, item, RuleIntegration, "Personal without SubjectField: a message is a stream of its own, "+
			"so its personal fields need the payload field holding their subject's id")
	}
	if !ok {
		return
	}
	if def.Key != "" && !hasProperty(p.Schema, def.Key) {
		b.fail(feat, item, RuleIntegration, "MessageKey(%q) names no top-level field of the payload (by its JSON name)", def.Key)
		return
	}
	b.reg.contracts[def.Name] = Contract{Name: def.Name, Feature: feat, Version: def.Version, GoType: def.Payload, Key: def.Key, Personal: personal}
	b.reg.payloads[def.Name] = p
}

// integrationHandler compiles a handler of an integration event; run after
// every contract is known.
func (b *builder) integrationHandler(feat string, def spec.IntegrationHandler, seen map[string]string) {
	item := fmt.Sprintf("integration handler %q", def.Name)
	fn, _ := def.Handle.(func(feature.CommandContext, feature.Message) error)
	switch {
	case !projNameRe.MatchString(def.Name):
		b.fail(feat, item, RuleName, "integration handler names are lowercase letters, digits and '-', '_' or '.', like create-invoice")
	case seen[def.Name] != "":
		b.fail(feat, item, RuleUnique, "integration handler name is already used by feature %q", seen[def.Name])
	case b.reg.contracts[def.Event].Name == "":
		b.fail(feat, item, RuleIntegration, "handles %q, which is not an integration event of the app; declare it with r.IntegrationEvent", def.Event)
	case fn == nil:
		b.fail(feat, item, RuleIntegration, "handler function is nil")
	default:
		seen[def.Name] = feat
		b.reg.integrationHandlers = append(b.reg.integrationHandlers,
			IntegrationHandler{Name: def.Name, Event: def.Event, Feature: feat, Handle: fn, Ordered: def.Ordered})
		return
	}
	if seen[def.Name] == "" {
		seen[def.Name] = feat
	}
}

// integration compiles the contracts, then the handlers, of every feature.
func (b *builder) integration() {
	for _, d := range b.defs {
		for _, c := range d.Contracts {
			b.contract(d.Name, c)
		}
	}
	seen := map[string]string{}
	for _, d := range b.defs {
		for _, h := range d.IntegrationHandlers {
			b.integrationHandler(d.Name, h, seen)
		}
	}
}

// hasProperty reports whether the JSON Schema of a payload has a
// top-level property called name.
func hasProperty(schema json.RawMessage, name string) bool {
	var s struct {
		Properties map[string]json.RawMessage `json:"properties"`
	}
	_ = json.Unmarshal(schema, &s)
	_, ok := s.Properties[name]
	return ok
}

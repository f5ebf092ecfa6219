package http

import (
	"encoding/json"
	"slices"
	"strings"

	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/registry"
)

// readGuard hides from event frames the entity fields a caller may not read
// (feature.Field.ReadRoles): a CRUD event's payload carries the fields, so
// the event stream applies the same rule as detail and list. Inspect is the
// admin override and shows payloads whole.
type readGuard map[string][]restrictedField // CRUD event type → its restricted fields

type restrictedField struct {
	name  string
	roles []string
}

func newReadGuard(reg *registry.Registry) readGuard {
	g := readGuard{}
	for _, ev := range reg.Events() {
		if ev.Entity == "" {
			continue
		}
		e, ok := reg.Entity(ev.Entity)
		if !ok {
			continue
		}
		for _, name := range e.FieldNames() {
			if f, _ := e.Field(name); len(f.ReadRoles) > 0 {
				g[ev.Name] = append(g[ev.Name], restrictedField{name: name, roles: f.ReadRoles})
			}
		}
	}
	return g
}

// hidden lists the fields of an event of type typ that u may not read; nil
// when u sees the whole payload.
func (g readGuard) hidden(typ string, u feature.User) []string {
	var out []string
	for _, f := range g[typ] {
		if !slices.ContainsFunc(f.roles, u.HasRole) {
			out = append(out, f.name)
		}
	}
	return out
}

// redacted is ev with the hidden fields taken out of its payload.
func redacted(ev eventstore.Event, hidden []string) (eventstore.Event, error) {
	if len(hidden) == 0 {
		return ev, nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(ev.Payload, &obj); err != nil {
		return ev, err
	}
	for _, f := range hidden {
		delete(obj, f)
	}
	p, err := json.Marshal(obj)
	if err != nil {
		return ev, err
	}
	ev.Payload = p
	return ev, nil
}

// renderFor renders ev for a caller who may not read hidden.
func renderFor(ev eventstore.Event, hidden []string) ([]byte, error) {
	ev, err := redacted(ev, hidden)
	if err != nil {
		return nil, err
	}
	return renderEvent(ev)
}

// hiddenKey names a set of hidden fields, to render each set once.
func hiddenKey(hidden []string) string { return strings.Join(hidden, ",") }

package feature

import (
	"fmt"
	"maps"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"sync"

	"github.com/kumiko-go/kumiko/internal/spec"
)

// Feature is one feature's recorded declarations. It is created by [Define]
// and read by the registry; applications only pass it along.
//
// A Feature never changes after Define returns: a [Registrar] kept and used
// later only records a problem, which makes the registry refuse the feature.
type Feature struct {
	mu     sync.Mutex
	sealed bool
	defs   spec.Definitions
}

// Define records the feature called name by running fn at once with a
// [Registrar]. Mistakes (a nil field, a bad option value, even a panic inside
// fn) are recorded, not panicked, and reported by the registry at boot. The
// name must be lowercase (letters, digits, '-' and '_') and unique in the app.
func Define(name string, fn func(r *Registrar)) *Feature {
	f := &Feature{defs: spec.Definitions{Name: name}}
	if fn == nil {
		f.defs.Problems = append(f.defs.Problems, spec.Problem{Item: item("feature", name), Message: "Define called with a nil function"})
		f.sealed = true
		return f
	}
	r := &Registrar{f: f}
	func() {
		defer func() {
			if p := recover(); p != nil {
				f.defs.Problems = append(f.defs.Problems, spec.Problem{
					Item:    item("feature", name),
					Message: fmt.Sprintf("panic while defining the feature: %v (at %s)", p, panicSite()),
				})
			}
		}()
		fn(r)
	}()
	f.mu.Lock()
	f.sealed = true
	f.mu.Unlock()
	return f
}

// item names a declaration in problems the way the registry names it in boot
// errors: `entity "task"`.
func item(kind, name string) string { return fmt.Sprintf("%s %q", kind, name) }

// panicSite names the first frame outside the runtime and this package, which
// is where the author's code panicked.
func panicSite() string {
	pcs := make([]uintptr, 32)
	n := runtime.Callers(3, pcs)
	frames := runtime.CallersFrames(pcs[:n])
	for {
		fr, more := frames.Next()
		if !strings.HasPrefix(fr.Function, "runtime.") && !strings.Contains(fr.Function, "kumiko/feature.") {
			return fmt.Sprintf("%s:%d", fr.File, fr.Line)
		}
		if !more {
			return "unknown location"
		}
	}
}

// Name is the feature's name as given to Define.
func (f *Feature) Name() string { return f.defs.Name }

// Spec returns a copy of everything the feature declared, in declaration
// order, for the registry to compile. Applications only pass features along
// and do not need it.
func (f *Feature) Spec() spec.Definitions {
	f.mu.Lock()
	defer f.mu.Unlock()
	d := spec.Definitions{Name: f.defs.Name}
	for _, e := range f.defs.Entities {
		d.Entities = append(d.Entities, e.Clone())
	}
	for _, c := range f.defs.Cruds {
		c.Access = c.Access.(Access).clone()
		d.Cruds = append(d.Cruds, c)
	}
	for _, e := range f.defs.Events {
		d.Events = append(d.Events, e.Clone())
	}
	for _, m := range f.defs.Migrations {
		m.Steps = slices.Clone(m.Steps)
		d.Migrations = append(d.Migrations, m)
	}
	d.Handlers = slices.Clone(f.defs.Handlers)
	for _, p := range f.defs.Projections {
		p.Inline = p.Inline.(InlineProjection).clone()
		d.Projections = append(d.Projections, p)
	}
	for _, m := range f.defs.MSPs {
		d.MSPs = append(d.MSPs, m.(MultiStreamProjection).clone())
	}
	for _, c := range f.defs.Contracts {
		d.Contracts = append(d.Contracts, c.Clone())
	}
	d.IntegrationHandlers = slices.Clone(f.defs.IntegrationHandlers)
	for _, j := range f.defs.Jobs {
		j.On = slices.Clone(j.On)
		d.Jobs = append(d.Jobs, j)
	}
	for _, s := range f.defs.Searches {
		s.Fields = maps.Clone(s.Fields)
		if r, ok := s.Access.(Rule); ok {
			r.roles = slices.Clone(r.roles)
			s.Access = r
		}
		d.Searches = append(d.Searches, s)
	}
	d.Problems = slices.Clone(f.defs.Problems)
	return d
}

// Registrar records a feature's declarations. It is only valid inside the
// function passed to [Define].
type Registrar struct {
	f *Feature
}

// record runs fn on the feature's definitions unless Define has returned, in
// which case the late call is recorded as a problem.
func (r *Registrar) record(item string, fn func(d *spec.Definitions)) {
	r.f.mu.Lock()
	defer r.f.mu.Unlock()
	if r.f.sealed {
		r.f.defs.Problems = append(r.f.defs.Problems, spec.Problem{Item: item, Message: "declared after Define returned; declare everything inside the Define function"})
		return
	}
	fn(&r.f.defs)
}

func (r *Registrar) problem(item, format string, args ...any) {
	r.record(item, func(d *spec.Definitions) {
		d.Problems = append(d.Problems, spec.Problem{Item: item, Message: fmt.Sprintf(format, args...)})
	})
}

// Entity declares a level-1 entity: an aggregate type whose streams hold the
// CRUD events <name>.created/updated/deleted(/restored), folded by a default
// reducer into a read table (default read_<name>). The name is lowercase
// (letters, digits, '_'); fields are keyed by camelCase JSON name.
func (r *Registrar) Entity(name string, fields Fields, opts ...EntityOption) {
	entityItem := item("entity", name)
	def := spec.Entity{
		Name:            name,
		Fields:          make(map[string]spec.Field, len(fields)),
		SnapshotEvery:   DefaultSnapshotEvery,
		SnapshotVersion: 1,
		Table:           "read_" + name,
	}
	for _, k := range slices.Sorted(maps.Keys(fields)) {
		if fields[k] == nil {
			r.problem(entityItem+fmt.Sprintf(" field %q", k), "field is nil; use a builder such as feature.Text()")
			continue
		}
		def.Fields[k] = fields[k].spec.Clone()
	}
	for _, o := range opts {
		if o.apply == nil {
			r.problem(entityItem, "zero EntityOption; use the feature option constructors")
			continue
		}
		o.apply(&def)
	}
	r.record(entityItem, func(d *spec.Definitions) { d.Entities = append(d.Entities, def) })
}

// Crud exposes an entity through the generated handlers <entity>.create,
// .update, .delete, .restore (soft-delete entities only), .list and .detail.
// Access is deny-by-default: every generated handler needs a rule.
func (r *Registrar) Crud(entity string, access Access) {
	r.record(item("crud", entity), func(d *spec.Definitions) {
		d.Cruds = append(d.Cruds, spec.Crud{Entity: entity, Access: access.clone()})
	})
}

// DefineEvent declares a domain event this feature may append. The payload is
// a value of a Go struct type (or a pointer to one); its `json` tags give the
// wire names and its `validate` tags (validator/v10) the rules every payload
// must pass before it is stored. The name is lowercase and dotted
// (`task.completed`); the current version defaults to 1.
func (r *Registrar) DefineEvent(name string, payload any, opts ...EventOption) {
	def := spec.Event{Name: name, Payload: reflect.TypeOf(payload), Version: 1}
	for _, o := range opts {
		if o.apply == nil {
			r.problem(item("event", name), "zero EventOption; use the feature option constructors")
			continue
		}
		if o.problem != "" {
			r.problem(item("event", name), "%s", o.problem)
		}
		o.apply(&def)
	}
	if def.Key != "" {
		r.problem(item("event", name), "MessageKey is an option of integration events (r.IntegrationEvent) only")
	}
	r.record(item("event", name), func(d *spec.Definitions) { d.Events = append(d.Events, def) })
}

// EventMigration declares the upcaster step of event from version `from` to
// `to` = from+1, applied to stored payloads on every read. The steps run in
// order on the payload's JSON object. An event at version N needs exactly one
// migration for each of 1→2 … N-1→N; a step without operations is allowed
// (a version bump that changes meaning but not shape). event may also be an
// integration event (a contract) the feature declares: its migrations then
// bring received messages of older versions to the app's version; declare
// them with the contract, in the shared contracts package.
func (r *Registrar) EventMigration(event string, from, to int, steps ...MigrationStep) {
	def := spec.Migration{Event: event, From: from, To: to, Steps: make([]spec.Step, len(steps))}
	for i, s := range steps {
		def.Steps[i] = s.step
	}
	r.record(fmt.Sprintf("migration %q %d→%d", event, from, to), func(d *spec.Definitions) {
		d.Migrations = append(d.Migrations, def)
	})
}

// Command declares a command handler. input is a value of the input struct
// type T; handler must be a func(feature.CommandContext, T) (R, error) for
// any R (checked at boot). Commands run in a write transaction. Prefer
// [HandleCommand], which the compiler checks.
func (r *Registrar) Command(name string, input any, access Rule, handler any) {
	r.handler(false, name, input, access, handler)
}

// Query declares a query handler like [Registrar.Command]; queries read only.
// Prefer [HandleQuery], which the compiler checks.
func (r *Registrar) Query(name string, input any, access Rule, handler any) {
	r.handler(true, name, input, access, handler)
}

func (r *Registrar) handler(query bool, name string, input any, access Rule, handler any) {
	def := spec.Handler{Name: name, Query: query, Input: reflect.TypeOf(input), Access: access, Handler: handler}
	if v := reflect.ValueOf(handler); v.Kind() == reflect.Func && v.IsNil() {
		def.Handler = nil
	}
	r.record(item("handler", name), func(d *spec.Definitions) { d.Handlers = append(d.Handlers, def) })
}

// Projection declares an inline projection: its apply functions run in the
// write transaction of every event appended to a stream of p.Source (an
// entity of this feature), so the table never lags behind the events.
func (r *Registrar) Projection(name string, p InlineProjection) {
	def := spec.Projection{Name: name, Inline: p.clone()}
	r.record(item("projection", name), func(d *spec.Definitions) { d.Projections = append(d.Projections, def) })
}

// MultiStreamProjection declares an asynchronous consumer of committed events
// of any stream and any feature: a read model in m.Table, or, without a table,
// a side-effect consumer (mail, webhooks). Zero settings take their defaults.
func (r *Registrar) MultiStreamProjection(m MultiStreamProjection) {
	def := m.clone()
	r.record(item("msp", m.Name), func(d *spec.Definitions) { d.MSPs = append(d.MSPs, def) })
}

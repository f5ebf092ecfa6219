package registry

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"regexp"
	"slices"
	"strings"

	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/internal/spec"
	"github.com/kumiko-go/kumiko/internal/structmap"
	"github.com/kumiko-go/kumiko/registry/internal/codec"
)

var (
	featureNameRe = regexp.MustCompile(`^[a-z][a-z0-9_-]*$`)
	entityNameRe  = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
	dottedNameRe  = regexp.MustCompile(`^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$`)
	fieldNameRe   = regexp.MustCompile(`^[a-z][A-Za-z0-9]*$`)
	projNameRe    = regexp.MustCompile(`^[a-z][a-z0-9]*([._-][a-z0-9]+)*$`)
	sqlIdentRe    = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)
	columnTypeRe  = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_ ]*(\([0-9, ]+\))?( ?\[\])*$`)
)

// maxIdent is PostgreSQL's identifier length.
const maxIdent = 63

// reservedFields are the framework's keys in entity state and payloads.
var reservedFields = []string{"id", "tenantId", "version", "createdAt", "updatedAt", "deletedAt"}

var (
	commandContextType = reflect.TypeFor[feature.CommandContext]()
	errorType          = reflect.TypeFor[error]()
)

// Build compiles features into a Registry. It checks every boot rule and
// returns all violations at once, joined, each a *BootError naming the
// feature and the item; it never panics. The features are not changed.
func Build(features ...*feature.Feature) (reg *Registry, err error) {
	defer func() {
		if p := recover(); p != nil {
			reg, err = nil, &BootError{Rule: RuleInternal, Message: fmt.Sprintf("registry build panicked: %v", p)}
		}
	}()
	b := newBuilder()
	b.build(features)
	if len(b.errs) > 0 {
		return nil, errors.Join(b.errs...)
	}
	return b.reg, nil
}

type builder struct {
	reg          *Registry
	errs         []error
	defs         []spec.Definitions
	info         map[string]*FeatureInfo
	entityOwner  map[string]string
	eventOwner   map[string]string
	handlerOwner map[string]string
	projOwner    map[string]string // inline and multi-stream projections share names
	tableOwner   map[string]string // table → "feature/item"
}

func newBuilder() *builder {
	b := &builder{
		reg: &Registry{
			entities:      map[string]*Entity{},
			handlers:      map[string]Handler{},
			events:        map[string]*eventInfo{},
			projections:   map[string]*Projection{},
			msps:          map[string]*MSP{},
			jobs:          map[string]*Job{},
			bySource:      map[string][]*Projection{},
			emits:         map[string]map[string]bool{},
			payloads:      map[string]*codec.Payload{},
			results:       map[string]json.RawMessage{},
			codec:         codec.New(),
			contracts:     map[string]Contract{},
			contractSteps: map[string][]*migration{},
		},
		info:         map[string]*FeatureInfo{},
		entityOwner:  map[string]string{},
		eventOwner:   map[string]string{},
		handlerOwner: map[string]string{},
		projOwner:    map[string]string{},
		tableOwner:   map[string]string{},
	}
	// The framework's own event: what a forget of a data subject appends.
	forgotten := reflect.TypeFor[feature.SubjectForgotten]()
	b.reg.events[feature.SubjectForgottenEvent] = &eventInfo{EventType: EventType{
		Name: feature.SubjectForgottenEvent, Version: 1, GoType: forgotten}}
	b.reg.payloads[feature.SubjectForgottenEvent], _ = b.reg.codec.StructPayload(forgotten, "payload")
	b.eventOwner[feature.SubjectForgottenEvent] = "kumiko"
	return b
}

func (b *builder) fail(feat, item, rule, format string, args ...any) {
	b.errs = append(b.errs, &BootError{Feature: feat, Item: item, Rule: rule, Message: fmt.Sprintf(format, args...)})
}

func (b *builder) build(features []*feature.Feature) {
	for i, f := range features {
		if f == nil {
			b.fail("", fmt.Sprintf("feature #%d", i+1), RuleDefinition, "feature is nil")
			continue
		}
		d := f.Spec()
		switch {
		case !featureNameRe.MatchString(d.Name):
			b.fail(d.Name, "", RuleName, "feature name %q must be lowercase letters, digits, '-' or '_', starting with a letter", d.Name)
		case b.info[d.Name] != nil:
			b.fail(d.Name, "", RuleUnique, "feature %q is given twice (or two features share the name)", d.Name)
			continue
		}
		for _, p := range d.Problems {
			b.fail(d.Name, p.Item, RuleDefinition, "%s", p.Message)
		}
		b.defs = append(b.defs, d)
		b.info[d.Name] = &FeatureInfo{Name: d.Name}
		b.reg.emits[d.Name] = map[string]bool{}
	}
	// Names other features may refer to come first.
	for _, d := range b.defs {
		for _, e := range d.Entities {
			b.entity(d.Name, e)
		}
	}
	for _, d := range b.defs {
		for _, e := range d.Events {
			b.event(d.Name, e)
		}
	}
	for _, d := range b.defs {
		for _, e := range d.Entities {
			b.references(d.Name, e)
		}
	}
	b.integration()
	b.migrations()
	for _, d := range b.defs {
		for _, c := range d.Cruds {
			b.crud(d.Name, c.Entity, c.Access.(feature.Access))
		}
		for _, h := range d.Handlers {
			b.handler(d.Name, h)
		}
	}
	for _, d := range b.defs {
		for _, e := range d.Entities {
			b.writtenBy(d.Name, e)
		}
	}
	for _, d := range b.defs {
		for _, p := range d.Projections {
			b.projection(d.Name, p.Name, p.Inline.(feature.InlineProjection))
		}
		for _, m := range d.MSPs {
			b.msp(d.Name, m.(feature.MultiStreamProjection))
		}
	}
	// Searches come after the lists, whose access rules an entity's takes,
	// and after the projections, whose tables a projection's searches.
	for _, d := range b.defs {
		for _, s := range d.Searches {
			b.search(d.Name, s)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(b.reg.handlers)) {
		if owner, ok := b.eventOwner[name]; ok {
			h := b.reg.handlers[name]
			b.fail(h.Feature, fmt.Sprintf("handler %q", name), RuleUnique,
				"the name is also an event of feature %q; event and handler names share one namespace", owner)
		}
		if c, ok := b.reg.contracts[name]; ok {
			h := b.reg.handlers[name]
			b.fail(h.Feature, fmt.Sprintf("handler %q", name), RuleUnique,
				"the name is also an integration event of feature %q; they share one namespace", c.Feature)
		}
	}
	for _, d := range b.defs {
		for _, j := range d.Jobs {
			b.job(d.Name, j)
		}
	}
	for _, d := range b.defs {
		b.reg.features = append(b.reg.features, *b.info[d.Name])
	}
}

// entity compiles an entity, its read table and its CRUD events.
func (b *builder) entity(feat string, def spec.Entity) {
	item := fmt.Sprintf("entity %q", def.Name)
	if !entityNameRe.MatchString(def.Name) {
		b.fail(feat, item, RuleName, "entity names are lowercase letters, digits and '_', starting with a letter")
		return
	}
	if owner, dup := b.entityOwner[def.Name]; dup {
		b.fail(feat, item, RuleUnique, "entity is already declared by feature %q", owner)
		return
	}
	b.entityOwner[def.Name] = feat
	b.info[feat].Entities = append(b.info[feat].Entities, def.Name)

	names := slices.Sorted(maps.Keys(def.Fields))
	b.entityFields(feat, def, names)
	if def.SnapshotEvery < 1 {
		b.fail(feat, item, RuleEntity, "SnapshotEvery(%d) must be at least 1", def.SnapshotEvery)
	}
	if def.SnapshotVersion < 1 {
		b.fail(feat, item, RuleEntity, "SnapshotVersion(%d) must be at least 1", def.SnapshotVersion)
	}
	b.table(feat, item, def.Table, RuleEntity)
	b.checkState(feat, item, def)

	e := &Entity{name: def.Name, feature: feat, def: def, names: names, personal: b.entityPersonal(feat, def, names)}
	e.codec = &codec.Entity{Name: def.Name, Fields: def.Fields, Names: names, SoftDelete: def.SoftDelete}
	e.table = entityTable(def, names)
	b.reg.entities[def.Name] = e

	b.crudEvents(feat, item, e)
}

// entityFields checks an entity's fields (names, columns, types) and
// normalises their defaults in def.Fields.
func (b *builder) entityFields(feat string, def spec.Entity, names []string) {
	columns := map[string]string{"id": "", "tenant_id": "", "version": "", "created_at": "", "updated_at": "", "deleted_at": ""}
	for _, name := range names {
		fs := def.Fields[name]
		fitem := fmt.Sprintf("entity %q field %q", def.Name, name)
		for _, p := range fs.Problems {
			b.fail(feat, fitem, RuleField, "%s", p)
		}
		switch col := spec.ColumnName(name); {
		case slices.Contains(reservedFields, name):
			b.fail(feat, fitem, RuleField, "%q is reserved for the framework (%s)", name, strings.Join(reservedFields, ", "))
		case !fieldNameRe.MatchString(name):
			b.fail(feat, fitem, RuleField, "field names are camelCase identifiers: a lowercase letter, then letters and digits")
		case len(col) > maxIdent:
			b.fail(feat, fitem, RuleField, "column name %q is longer than %d bytes", col, maxIdent)
		default:
			if other, clash := columns[col]; clash {
				if other == "" {
					b.fail(feat, fitem, RuleField, "column %q clashes with a framework column", col)
				} else {
					b.fail(feat, fitem, RuleField, "column %q clashes with field %q", col, other)
				}
			}
			columns[col] = name
		}
		if fs.Type.ColumnType() == "" {
			b.fail(feat, fitem, RuleField, "field has no valid type; build it with feature.Text(), feature.Number(), …")
			continue
		}
		if fs.HasDefault && fs.Default != nil {
			nv, code, msg := codec.NormalizeValue(fs, fs.Default)
			switch {
			case code != "":
				b.fail(feat, fitem, RuleField, "default %#v %s", fs.Default, msg)
			case fs.Required && nv == "":
				b.fail(feat, fitem, RuleField, "the default of a required text field cannot be empty")
			default:
				fs.Default = nv
				def.Fields[name] = fs
			}
		}
	}
}

// crudEvents defines the CRUD events of entity e: created, updated, deleted
// and, with soft delete, restored.
func (b *builder) crudEvents(feat, item string, e *Entity) {
	def := e.def
	verbs := []CrudVerb{VerbCreate, VerbUpdate, VerbDelete}
	if def.SoftDelete {
		verbs = append(verbs, VerbRestore)
	}
	for _, v := range verbs {
		name := v.EventType(def.Name)
		kind := map[CrudVerb]codec.Kind{
			VerbCreate: codec.Created, VerbUpdate: codec.Updated,
			VerbDelete: codec.Empty, VerbRestore: codec.Empty,
		}[v]
		if owner, dup := b.eventOwner[name]; dup {
			b.fail(feat, item, RuleUnique, "its CRUD event %q is already defined by feature %q", name, owner)
			continue
		}
		b.eventOwner[name] = feat
		et := EventType{Name: name, Feature: feat, Version: 1, Entity: def.Name, Verb: v}
		if kind != codec.Empty { // deleted and restored carry no fields
			et.Personal = maps.Clone(e.personal)
		}
		b.reg.events[name] = &eventInfo{EventType: et}
		b.reg.emits[feat][name] = true
		b.crudCodec(feat, item, name, e, kind)
	}
}

// crudCodec registers the payload of a CRUD handler or event.
func (b *builder) crudCodec(feat, item, name string, e *Entity, kind codec.Kind) *codec.Payload {
	p, err := codec.CrudPayload(e.codec, kind)
	if err != nil {
		b.fail(feat, item, RuleInternal, "schema of %q: %v", name, err)
	}
	b.reg.payloads[name] = p
	return p
}

// table checks a table name and claims it for item.
func (b *builder) table(feat, item, name, rule string) {
	switch {
	case !sqlIdentRe.MatchString(name) || len(name) > maxIdent:
		b.fail(feat, item, rule, "table name %q must be a lowercase SQL identifier of at most %d bytes", name, maxIdent)
	case strings.HasPrefix(name, "kumiko_"):
		b.fail(feat, item, rule, "table name %q uses the framework's prefix kumiko_", name)
	default:
		if owner, dup := b.tableOwner[name]; dup {
			b.fail(feat, item, RuleUnique, "table %q is already used by %s", name, owner)
			return
		}
		b.tableOwner[name] = fmt.Sprintf("feature %q %s", feat, item)
	}
}

// references checks that reference fields point at entities of the app.
func (b *builder) references(feat string, def spec.Entity) {
	if b.reg.entities[def.Name] == nil || b.reg.entities[def.Name].feature != feat {
		return
	}
	for _, name := range slices.Sorted(maps.Keys(def.Fields)) {
		fs := def.Fields[name]
		if fs.Type == spec.TypeReference && fs.Ref != "" {
			if _, ok := b.entityOwner[fs.Ref]; !ok {
				b.fail(feat, fmt.Sprintf("entity %q field %q", def.Name, name), RuleField,
					"references entity %q, which no feature declares", fs.Ref)
			}
		}
	}
}

// writtenBy checks that the commands a field names in WrittenBy are command
// handlers of the entity's feature, the only ones that can append its
// events, and that the field has WriteRoles for them to override.
func (b *builder) writtenBy(feat string, def spec.Entity) {
	if b.reg.entities[def.Name] == nil || b.reg.entities[def.Name].feature != feat {
		return
	}
	for _, name := range slices.Sorted(maps.Keys(def.Fields)) {
		fs, item := def.Fields[name], fmt.Sprintf("entity %q field %q", def.Name, name)
		if len(fs.WrittenBy) > 0 && len(fs.WriteRoles) == 0 {
			b.fail(feat, item, RuleField, "WrittenBy without WriteRoles changes nothing: every writer may set the field")
		}
		for _, cmd := range fs.WrittenBy {
			if h, ok := b.reg.handlers[cmd]; cmd != "" && (!ok || h.Kind != KindCommand || h.Feature != feat) {
				b.fail(feat, item, RuleField, "WrittenBy names %q, which is not a command of feature %q", cmd, feat)
			}
		}
	}
}

// payload checks a payload or input type and returns its Payload; false
// after reporting why it is unusable.
func (b *builder) payload(feat, item string, t reflect.Type, what string) (*codec.Payload, bool) {
	p, problems := b.reg.codec.StructPayload(t, what)
	for _, msg := range problems {
		b.fail(feat, item, RulePayload, "%s", msg)
	}
	return p, p != nil
}

// event compiles a domain event.
func (b *builder) event(feat string, def spec.Event) {
	item := fmt.Sprintf("event %q", def.Name)
	if !dottedNameRe.MatchString(def.Name) {
		b.fail(feat, item, RuleName, "event names are lowercase and dotted, like task.completed")
		return
	}
	if owner, dup := b.eventOwner[def.Name]; dup {
		if ev := b.reg.events[def.Name]; ev != nil && ev.Entity != "" {
			b.fail(feat, item, RuleUnique, "%q is the CRUD event of entity %q (feature %q)", def.Name, ev.Entity, owner)
		} else {
			b.fail(feat, item, RuleUnique, "event is already defined by feature %q", owner)
		}
		return
	}
	b.eventOwner[def.Name] = feat
	b.info[feat].Events = append(b.info[feat].Events, def.Name)
	b.reg.emits[feat][def.Name] = true
	if def.Version < 1 {
		b.fail(feat, item, RuleMigration, "EventVersion(%d) must be at least 1", def.Version)
		def.Version = 1
	}
	ev := &eventInfo{EventType: EventType{Name: def.Name, Feature: feat, Version: def.Version, GoType: def.Payload}}
	b.reg.events[def.Name] = ev
	p, ok := b.payload(feat, item, def.Payload, "payload")
	if ok {
		b.reg.payloads[def.Name] = p
	}
	ev.Personal = b.eventPersonal(feat, item, RulePayload, def, p)
}

// migrations checks every event's and every contract's upcaster chain: for
// current version N, exactly one migration k→k+1 for each k in 1..N-1, and
// nothing else.
func (b *builder) migrations() {
	type key struct {
		event string
		from  int
	}
	seen := map[key]spec.Migration{}
	seenBy := map[key]string{}
	chains := map[string]map[int]*migration{}
	for _, d := range b.defs {
		for _, m := range d.Migrations {
			item := fmt.Sprintf("migration %q %d→%d", m.Event, m.From, m.To)
			owner, defined := b.eventOwner[m.Event]
			c, contract := b.reg.contracts[m.Event]
			k := key{m.Event, m.From}
			switch {
			case !defined && !contract:
				b.fail(d.Name, item, RuleMigration, "event %q is not defined by any feature (neither a domain nor an integration event)", m.Event)
				continue
			case defined && owner != d.Name:
				b.fail(d.Name, item, RuleMigration, "event %q is defined by feature %q; its migrations belong there", m.Event, owner)
				continue
			case contract && !declares(d, m.Event):
				b.fail(d.Name, item, RuleMigration, "integration event %q is not declared by this feature; declare its migrations with the contract", m.Event)
				continue
			case m.From < 1 || m.To != m.From+1:
				b.fail(d.Name, item, RuleMigration, "a migration goes up exactly one version, from N ≥ 1 to N+1")
				continue
			case contract && seenBy[k] != "" && seenBy[k] != d.Name && sameSteps(seen[k], m):
				continue // a shared contract's migration, declared again by another feature from the contracts package
			case seenBy[k] != "":
				b.fail(d.Name, item, RuleMigration, "duplicate migration: step %d→%d is declared twice", m.From, m.To)
				continue
			}
			seen[k], seenBy[k] = m, d.Name
			bad := false
			for i, s := range m.Steps {
				if err := s.Err(); err != nil {
					b.fail(d.Name, item, RuleMigration, "step %d: %v", i+1, err)
					bad = true
				}
			}
			if bad {
				continue
			}
			current := c.Version
			if defined {
				current = b.reg.events[m.Event].Version
			}
			if (contract || b.reg.events[m.Event].Entity == "") && m.To > current {
				b.fail(d.Name, item, RuleMigration, "goes beyond the current version %d of the event; raise feature.EventVersion", current)
				continue
			}
			if chains[m.Event] == nil {
				chains[m.Event] = map[int]*migration{}
			}
			chains[m.Event][m.From] = &migration{steps: m.Steps}
		}
	}
	// CRUD events take their version from their chain.
	for name, chain := range chains {
		if ev := b.reg.events[name]; ev != nil && ev.Entity != "" {
			ev.Version = slices.Max(slices.Collect(maps.Keys(chain))) + 1
		}
	}
	for _, d := range b.defs {
		for _, name := range slices.Sorted(maps.Keys(b.reg.events)) {
			ev := b.reg.events[name]
			if ev.Feature != d.Name || ev.Version == 1 {
				continue
			}
			ev.steps = b.chain(d.Name, fmt.Sprintf("event %q", name), ev.Version, chains[name])
		}
	}
	for _, name := range slices.Sorted(maps.Keys(b.reg.contracts)) {
		if c := b.reg.contracts[name]; c.Version > 1 {
			b.reg.contractSteps[name] = b.chain(c.Feature, fmt.Sprintf("integration event %q", name), c.Version, chains[name])
		}
	}
}

// chain orders the migrations of an event or contract at version current,
// failing on the missing steps.
func (b *builder) chain(feat, item string, current int, chain map[int]*migration) []*migration {
	steps := make([]*migration, current-1)
	var missing []string
	for k := 1; k < current; k++ {
		steps[k-1] = chain[k]
		if steps[k-1] == nil {
			missing = append(missing, fmt.Sprintf("%d→%d", k, k+1))
		}
	}
	if len(missing) > 0 {
		b.fail(feat, item, RuleMigration,
			"upcaster chain to version %d is incomplete: no migration %s", current, strings.Join(missing, ", "))
	}
	return steps
}

// declares reports whether the feature declares the contract.
func declares(d spec.Definitions, contract string) bool {
	return slices.ContainsFunc(d.Contracts, func(c spec.Event) bool { return c.Name == contract })
}

// sameSteps reports whether two migrations of a shared contract have the
// same steps (a MapFunc compares by position only).
func sameSteps(a, b spec.Migration) bool {
	return slices.EqualFunc(a.Steps, b.Steps, func(x, y spec.Step) bool { return x.String() == y.String() })
}

// checkRule validates a handler's access rule; false when the handler must
// not be registered.
func (b *builder) checkRule(feat, item string, rule feature.Rule, hint string) bool {
	if rule.IsZero() {
		b.fail(feat, item, RuleAccess, "unreachable handler: no access rule (%s)", hint)
		return false
	}
	if p := rule.Problem(); p != "" {
		b.fail(feat, item, RuleAccess, "%s", p)
		return false
	}
	return true
}

func (b *builder) claimHandler(feat, item, name string) bool {
	if owner, dup := b.handlerOwner[name]; dup {
		b.fail(feat, item, RuleUnique, "handler is already declared by feature %q", owner)
		return false
	}
	b.handlerOwner[name] = feat
	b.info[feat].Handlers = append(b.info[feat].Handlers, name)
	return true
}

// crud generates an entity's CRUD handlers.
func (b *builder) crud(feat, entity string, access feature.Access) {
	item := fmt.Sprintf("crud %q", entity)
	owner, ok := b.entityOwner[entity]
	switch {
	case !ok:
		b.fail(feat, item, RuleCrud, "Crud for entity %q, which is not declared", entity)
		return
	case owner != feat:
		b.fail(feat, item, RuleCrud, "entity %q belongs to feature %q; only its feature can declare Crud", entity, owner)
		return
	}
	e := b.reg.entities[entity]
	if len(e.verbs) > 0 {
		b.fail(feat, item, RuleCrud, "Crud is declared twice for the entity")
		return
	}
	codecs := map[CrudVerb]codec.Kind{
		VerbCreate: codec.Create, VerbUpdate: codec.Update, VerbDelete: codec.ID,
		VerbRestore: codec.ID, VerbList: codec.List, VerbDetail: codec.Detail,
	}
	for _, v := range CrudVerbs() {
		name := v.HandlerName(entity)
		hitem := fmt.Sprintf("handler %q", name)
		if v == VerbRestore && !e.def.SoftDelete {
			if !access.Restore.IsZero() {
				b.fail(feat, hitem, RuleCrud, "Access.Restore is set but entity %q has no SoftDelete, so there is nothing to restore", entity)
			}
			continue
		}
		rule := v.Rule(access)
		hint := "set Access.Write or Access." + strings.ToUpper(string(v[:1])) + string(v[1:])
		if !v.IsWrite() {
			hint = "set Access.Read or Access." + strings.ToUpper(string(v[:1])) + string(v[1:])
		}
		if !b.checkRule(feat, hitem, rule, hint) || rule.IsDeny() {
			continue
		}
		if !b.claimHandler(feat, hitem, name) {
			continue
		}
		kind := KindQuery
		if v.IsWrite() {
			kind = KindWrite
		}
		p := b.crudCodec(feat, hitem, name, e, codecs[v])
		b.reg.handlers[name] = Handler{Name: name, Kind: kind, Feature: feat, Access: rule, Input: p.Type, Verb: v, Entity: entity}
		e.verbs = append(e.verbs, v)
	}
}

// handler compiles a command or query.
func (b *builder) handler(feat string, def spec.Handler) {
	item := fmt.Sprintf("handler %q", def.Name)
	if !dottedNameRe.MatchString(def.Name) {
		b.fail(feat, item, RuleName, "handler names are lowercase and dotted, like task.complete")
		return
	}
	kind := KindCommand
	if def.Query {
		kind = KindQuery
	}
	access := def.Access.(feature.Rule)
	ruleOK := b.checkRule(feat, item, access, "pass feature.Roles, feature.AnyUser or feature.Anonymous")
	if ruleOK && access.IsDeny() {
		b.fail(feat, item, RuleAccess, "unreachable handler: Deny() allows nobody; remove the handler instead")
		ruleOK = false
	}
	payload, inputOK := b.payload(feat, item, def.Input, "input")
	invoke, _ := def.Invoke.(func(feature.CommandContext, any) (any, error))
	if invoke == nil {
		invoke = b.wrapHandler(feat, item, def)
	}
	if !b.claimHandler(feat, item, def.Name) || !ruleOK || !inputOK || invoke == nil {
		return
	}
	if def.Result != nil {
		schema, err := b.reg.codec.TypeSchema(def.Result)
		if err != nil {
			b.fail(feat, item, RulePayload, "result type %s: %v", def.Result, err)
			return
		}
		b.reg.results[def.Name] = schema
	}
	b.reg.handlers[def.Name] = Handler{Name: def.Name, Kind: kind, Feature: feat, Access: access, Input: def.Input, Result: def.Result, Invoke: invoke}
	b.reg.payloads[def.Name] = payload
}

// wrapHandler checks a reflectively given handler against its input type and
// wraps it as an Invoke function.
func (b *builder) wrapHandler(feat, item string, def spec.Handler) func(feature.CommandContext, any) (any, error) {
	if def.Handler == nil {
		b.fail(feat, item, RuleHandler, "handler function is nil")
		return nil
	}
	fv := reflect.ValueOf(def.Handler)
	ft := fv.Type()
	in := "T"
	if def.Input != nil {
		in = def.Input.String()
	}
	if ft.Kind() != reflect.Func || ft.IsVariadic() || ft.NumIn() != 2 || ft.In(0) != commandContextType ||
		(def.Input != nil && ft.In(1) != def.Input) || ft.NumOut() != 2 || ft.Out(1) != errorType {
		b.fail(feat, item, RuleHandler, "handler must be func(feature.CommandContext, %s) (any, error), got %s", in, ft)
		return nil
	}
	input := def.Input
	nilable := map[reflect.Kind]bool{reflect.Pointer: true, reflect.Map: true, reflect.Slice: true, reflect.Interface: true, reflect.Func: true, reflect.Chan: true}[ft.Out(0).Kind()]
	return func(ctx feature.CommandContext, arg any) (any, error) {
		av := reflect.ValueOf(arg)
		if !av.IsValid() || av.Type() != input {
			return nil, fmt.Errorf("handler %s: input is %T, want %s", def.Name, arg, input)
		}
		out := fv.Call([]reflect.Value{reflect.ValueOf(&ctx).Elem(), av})
		var err error
		if e := out[1].Interface(); e != nil {
			err = e.(error)
		}
		if nilable && out[0].IsNil() {
			return nil, err
		}
		return out[0].Interface(), err
	}
}

// checkTable validates a projection's table definition.
func (b *builder) checkTable(feat, item string, t feature.TableDef, needTenant bool) {
	b.table(feat, item, t.Name, RuleProjection)
	if len(t.Columns) == 0 {
		b.fail(feat, item, RuleProjection, "table %q has no columns", t.Name)
	}
	cols := map[string]bool{}
	for _, c := range t.Columns {
		switch {
		case !sqlIdentRe.MatchString(c.Name) || len(c.Name) > maxIdent:
			b.fail(feat, item, RuleProjection, "column name %q must be a lowercase SQL identifier", c.Name)
		case cols[c.Name]:
			b.fail(feat, item, RuleProjection, "column %q is declared twice", c.Name)
		}
		if !columnTypeRe.MatchString(c.Type) {
			b.fail(feat, item, RuleProjection, "column %q has type %q, which is not a plain PostgreSQL type", c.Name, c.Type)
		}
		switch {
		case len(c.ReadRoles) == 0:
		case slices.Contains(c.ReadRoles, ""):
			b.fail(feat, item, RuleProjection, "column %q has an empty ReadRoles role name", c.Name)
		case c.Name == "tenant_id" || slices.Contains(t.PrimaryKey, c.Name):
			b.fail(feat, item, RuleProjection, "column %q is part of every row's key and cannot have ReadRoles", c.Name)
		}
		cols[c.Name] = true
	}
	known := func(what string, names []string) {
		if len(names) == 0 && what != "primary key" {
			b.fail(feat, item, RuleProjection, "%s has no columns", what)
		}
		for _, n := range names {
			if !cols[n] {
				b.fail(feat, item, RuleProjection, "%s names column %q, which the table does not have", what, n)
			}
		}
	}
	known("primary key", t.PrimaryKey)
	for i, x := range t.Indexes {
		known(fmt.Sprintf("index %d", i+1), x.Columns)
	}
	if c, ok := t.Column("tenant_id"); needTenant && (!ok || !strings.EqualFold(c.Type, "uuid")) {
		b.fail(feat, item, RuleProjection, "table %q needs a tenant_id uuid column: rows belong to the event's tenant and reads are filtered by it", t.Name)
	}
	if t.Row != nil {
		b.checkRow(feat, item, t)
	}
}

func (b *builder) claimProjection(feat, item, name string) bool {
	if !projNameRe.MatchString(name) {
		b.fail(feat, item, RuleName, "projection names are lowercase words of letters and digits joined by '-', '_' or '.'")
		return false
	}
	if owner, dup := b.projOwner[name]; dup {
		b.fail(feat, item, RuleUnique, "a projection of that name is already declared by feature %q", owner)
		return false
	}
	b.projOwner[name] = feat
	return true
}

// projection compiles an inline projection.
func (b *builder) projection(feat, name string, def feature.InlineProjection) {
	item := fmt.Sprintf("projection %q", name)
	if !b.claimProjection(feat, item, name) {
		return
	}
	b.info[feat].Projections = append(b.info[feat].Projections, name)
	ok := true
	switch owner, known := b.entityOwner[def.Source]; {
	case def.Source == "":
		b.fail(feat, item, RuleProjection, "Source is empty; an inline projection is fed by an entity of its feature")
		ok = false
	case !known:
		b.fail(feat, item, RuleProjection, "Source %q is not a declared entity", def.Source)
		ok = false
	case owner != feat:
		b.fail(feat, item, RuleProjection, "Source %q is an entity of feature %q; an inline projection runs in its own feature's write transactions (use a MultiStreamProjection)", def.Source, owner)
		ok = false
	}
	b.checkTable(feat, item, def.Table, true)
	if p := def.Read.Problem(); p != "" {
		b.fail(feat, item, RuleAccess, "Read: %s", p)
		ok = false
	}
	if len(def.Apply) == 0 {
		b.fail(feat, item, RuleApply, "no apply entries: the projection would never change")
		ok = false
	}
	for _, ev := range slices.Sorted(maps.Keys(def.Apply)) {
		switch info := b.reg.events[ev]; {
		case def.Apply[ev] == nil:
			b.fail(feat, item, RuleApply, "apply function for %q is nil", ev)
			ok = false
		case info == nil:
			b.fail(feat, item, RuleApply, "applies %q, which no feature defines", ev)
			ok = false
		case info.Feature != feat && ev != feature.SubjectForgottenEvent:
			b.fail(feat, item, RuleApply, "applies %q of feature %q; an inline projection only sees events of its own feature (use a MultiStreamProjection)", ev, info.Feature)
			ok = false
		case info.Entity != "" && info.Entity != def.Source && def.Source != "":
			b.fail(feat, item, RuleApply, "applies %q, a CRUD event of entity %q, but is fed by %q: it would never fire", ev, info.Entity, def.Source)
			ok = false
		}
	}
	if !ok {
		return
	}
	p := &Projection{name: name, feature: feat, source: def.Source, table: def.Table.Clone(),
		apply: maps.Clone(def.Apply), events: slices.Sorted(maps.Keys(def.Apply)), read: def.Read}
	b.reg.projections[name] = p
	b.reg.projOrder = append(b.reg.projOrder, p)
	b.reg.bySource[def.Source] = append(b.reg.bySource[def.Source], p)
}

// msp compiles a multi-stream projection.
func (b *builder) msp(feat string, m feature.MultiStreamProjection) {
	item := fmt.Sprintf("msp %q", m.Name)
	if !b.claimProjection(feat, item, m.Name) {
		return
	}
	b.info[feat].MSPs = append(b.info[feat].MSPs, m.Name)
	ok := true
	bad := func(format string, args ...any) {
		b.fail(feat, item, RuleProjection, format, args...)
		ok = false
	}
	if m.Delivery != feature.Shared && m.Delivery != feature.PerInstance {
		bad("Delivery %d is neither Shared nor PerInstance", m.Delivery)
	}
	if m.StartFrom != feature.FromBeginning && m.StartFrom != feature.FromNow {
		bad("StartFrom %d is neither FromBeginning nor FromNow", m.StartFrom)
	}
	if m.MaxAttempts < 0 {
		bad("MaxAttempts %d is negative (0 = default %d)", m.MaxAttempts, feature.DefaultMaxAttempts)
	}
	if m.BatchSize < 0 {
		bad("BatchSize %d is negative (0 = default %d)", m.BatchSize, feature.DefaultBatchSize)
	}
	if m.StuckAfter < 0 || m.HandlerTimeout < 0 {
		bad("StuckAfter %s and HandlerTimeout %s must not be negative (0 = default)", m.StuckAfter, m.HandlerTimeout)
	}
	if m.Table != nil {
		b.checkTable(feat, item, *m.Table, false)
	}
	if p := m.Read.Problem(); p != "" {
		bad("Read: %s", p)
	}
	if !m.Read.IsZero() && m.Table == nil {
		bad("a Read rule without a table: a side-effect consumer has no rows to follow")
	}
	if m.Table != nil {
		if m.Delivery == feature.PerInstance {
			bad("PerInstance delivery with a table: every instance would apply every event to the same rows")
		}
	}
	switch {
	case m.Partitions < 0 || m.Partitions > consumerMaxPartitions:
		bad("Partitions %d is outside 0..%d", m.Partitions, consumerMaxPartitions)
	case m.Partitions > 1 && m.Delivery == feature.PerInstance:
		bad("Partitions with PerInstance delivery: every instance handles every event already")
	}
	if m.Park && m.SkipApplyErrors {
		bad("Park and SkipApplyErrors exclude each other: a failing event either parks its stream or is skipped")
	}
	if len(m.Apply) == 0 {
		b.fail(feat, item, RuleApply, "no apply entries: the consumer would never do anything")
		ok = false
	}
	for _, ev := range slices.Sorted(maps.Keys(m.Apply)) {
		switch {
		case m.Apply[ev] == nil:
			b.fail(feat, item, RuleApply, "apply function for %q is nil", ev)
			ok = false
		case b.reg.events[ev] == nil:
			b.fail(feat, item, RuleApply, "applies %q, which no feature defines", ev)
			ok = false
		}
	}
	if m.PartitionBy != "" {
		for _, ev := range slices.Sorted(maps.Keys(m.Apply)) {
			if info := b.reg.events[ev]; info != nil && info.GoType != nil && !hasJSONField(info.GoType, m.PartitionBy) {
				b.fail(feat, item, RuleProjection, "PartitionBy %q: the payload of %q has no such field", m.PartitionBy, ev)
				ok = false
			}
		}
	}
	if !ok {
		return
	}
	if m.MaxAttempts == 0 {
		m.MaxAttempts = feature.DefaultMaxAttempts
	}
	if m.BatchSize == 0 {
		m.BatchSize = feature.DefaultBatchSize
	}
	m.Apply = maps.Clone(m.Apply)
	if m.Table != nil {
		t := m.Table.Clone()
		m.Table = &t
	}
	c := &MSP{feature: feat, m: m, events: slices.Sorted(maps.Keys(m.Apply))}
	b.reg.msps[m.Name] = c
	b.reg.mspOrder = append(b.reg.mspOrder, c)
}

// consumerMaxPartitions is consumer.MaxPartitions (the registry does not
// import the dispatcher).
const consumerMaxPartitions = 256

// hasJSONField reports whether the payload type t has a field that takes
// the JSON name name.
func hasJSONField(t reflect.Type, name string) bool {
	p, err := structmap.For(t)
	if err != nil {
		return false
	}
	for _, f := range p.Fields() {
		if f.Name == name {
			return true
		}
	}
	return false
}

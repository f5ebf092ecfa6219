package registry

import (
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"time"

	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/internal/spec"
	"github.com/kumiko-go/kumiko/registry/internal/codec"
)

// Registry is the compiled application. It is immutable after [Build] and
// safe for concurrent use; everything it hands out is a copy or read-only.
type Registry struct {
	features    []FeatureInfo
	entities    map[string]*Entity
	handlers    map[string]Handler
	events      map[string]*eventInfo
	projections map[string]*Projection
	msps        map[string]*MSP
	jobs        map[string]*Job
	jobOrder    []*Job
	projOrder   []*Projection
	mspOrder    []*MSP
	bySource    map[string][]*Projection
	emits       map[string]map[string]bool // feature → event types it may append
	payloads    map[string]*codec.Payload  // event, contract and handler types → payload
	results     map[string]json.RawMessage // typed handlers' result schemas
	codec       *codec.Codec

	contracts           map[string]Contract
	contractSteps       map[string][]*migration // by contract: [k-1] migrates k to k+1
	integrationHandlers []IntegrationHandler
}

var _ eventstore.Upcaster = (*Registry)(nil)

// FeatureInfo summarises a feature: the names it declares, in declaration
// order.
type FeatureInfo struct {
	Name        string
	Entities    []string
	Events      []string // domain events; CRUD events follow from Entities
	Handlers    []string // including generated CRUD handlers
	Projections []string
	MSPs        []string
}

func (f FeatureInfo) clone() FeatureInfo {
	f.Entities = slices.Clone(f.Entities)
	f.Events = slices.Clone(f.Events)
	f.Handlers = slices.Clone(f.Handlers)
	f.Projections = slices.Clone(f.Projections)
	f.MSPs = slices.Clone(f.MSPs)
	return f
}

// HandlerKind says how a compiled handler is reached and which transaction
// it runs in.
type HandlerKind int

// Handler kinds.
const (
	// KindWrite is a generated CRUD write (create, update, delete, restore),
	// executed by the framework in a write transaction.
	KindWrite HandlerKind = iota + 1
	// KindCommand is a command (feature.Registrar.Command, HandleCommand),
	// run in a write transaction.
	KindCommand
	// KindQuery is a read: a CRUD list or detail or a query
	// (feature.Registrar.Query, HandleQuery), run read-only.
	KindQuery
)

// String is "write", "command" or "query".
func (k HandlerKind) String() string {
	switch k {
	case KindWrite:
		return "write"
	case KindCommand:
		return "command"
	case KindQuery:
		return "query"
	}
	return fmt.Sprintf("HandlerKind(%d)", int(k))
}

// Handler is a compiled command, query or CRUD handler.
type Handler struct {
	Name    string
	Kind    HandlerKind
	Feature string
	// Access is the resolved rule; never zero or Deny.
	Access feature.Rule
	// Input is the Go type DecodePayload returns for this handler: the
	// author's input type, or CreateInput, UpdateInput, IDInput, DetailInput
	// or ListInput for CRUD handlers.
	Input reflect.Type
	// Result is the Go type of the result of a handler declared with
	// feature.Command or feature.Query; nil for any other.
	Result reflect.Type
	// Invoke runs a command or query handler; nil for CRUD handlers, which
	// the pipeline executes itself (see Verb and Entity).
	Invoke func(ctx feature.CommandContext, in any) (any, error)
	// Verb and Entity are set for CRUD handlers only; Verb is VerbSearch
	// for a search query too, which names its entity in Entity or its
	// projection in Projection.
	Verb   CrudVerb
	Entity string
	// Projection is the inline or multi-stream projection whose table a
	// search query searches; "" for every other handler.
	Projection string
}

// EventType is a compiled event type.
type EventType struct {
	Name string
	// Feature defines the event (for CRUD events: owns the entity).
	Feature string
	// Version is the current payload version: new events are stored with it
	// and stored events are upcast to it.
	Version int
	// GoType is the payload's Go type; nil for CRUD events, whose payloads
	// decode to map[string]any.
	GoType reflect.Type
	// Entity and Verb are set for CRUD events only.
	Entity string
	Verb   CrudVerb
	// Personal maps each personal payload field (top-level JSON name) to
	// the payload field holding its data subject's id; "" means the
	// stream's own aggregate id. For an event declared with DefineEvent it
	// comes from feature.Personal and feature.SubjectField; for the created
	// and updated events of an entity it is the entity's personal fields
	// (Entity.Personal), whose subject fields are entity fields: an updated
	// payload holds only the fields it changes, so it may lack the subject
	// field, whose value is then the one in the entity's state. Nil when
	// the event carries no personal data.
	Personal map[string]string
}

func (e EventType) clone() EventType {
	e.Personal = maps.Clone(e.Personal)
	return e
}

type eventInfo struct {
	EventType
	// steps[k-1] migrates version k to k+1; nil = missing (a boot error).
	steps []*migration
}

type migration struct {
	steps []spec.Step
}

// Entity is a compiled entity. Its accessors return copies.
type Entity struct {
	name    string
	feature string
	def     spec.Entity   // Fields hold normalised defaults
	names   []string      // field names, sorted
	codec   *codec.Entity // shares def.Fields and names
	table   feature.TableDef
	verbs   []CrudVerb
	// personal maps personal fields to their subject fields; nil = none.
	personal map[string]string
	// search is the entity's full-text search; nil = none.
	search *Search
}

// Name is the entity name, also the aggregate type of its streams.
func (e *Entity) Name() string { return e.name }

// Feature is the feature that declares the entity.
func (e *Entity) Feature() string { return e.feature }

// FieldNames lists the field names, sorted.
func (e *Entity) FieldNames() []string { return slices.Clone(e.names) }

// Field returns the definition of the field called name; its Default is
// normalised to its JSON-native form.
func (e *Entity) Field(name string) (spec.Field, bool) {
	s, ok := e.def.Fields[name]
	if !ok {
		return spec.Field{}, false
	}
	s = s.Clone()
	if s.HasDefault {
		s.Default = codec.CloneJSONValue(s.Default)
	}
	return s, true
}

// SoftDelete reports whether deletes keep the row (deleted_at) and can be
// restored.
func (e *Entity) SoftDelete() bool { return e.def.SoftDelete }

// SystemStream reports whether the entity's streams live in the system
// tenant.
func (e *Entity) SystemStream() bool { return e.def.SystemStream }

// SnapshotEvery is the automatic snapshot interval in events.
func (e *Entity) SnapshotEvery() int { return e.def.SnapshotEvery }

// SnapshotVersion is the reducer generation of the entity's snapshots.
func (e *Entity) SnapshotVersion() int { return e.def.SnapshotVersion }

// Table is the default read table: id uuid (key), tenant_id, version, one
// column per field (see feature.ColumnName), created_at, updated_at and, with
// soft delete, deleted_at; indexes for sortable and (per tenant) unique
// fields.
func (e *Entity) Table() feature.TableDef { return e.table.Clone() }

// Personal maps each personal field of the entity (feature.Field.Personal,
// PersonalOf) to the field holding its data subject's id; "" means the
// entity's own aggregate id. Nil when the entity has no personal fields.
func (e *Entity) Personal() map[string]string { return maps.Clone(e.personal) }

// Verbs lists the CRUD verbs with a handler: none without Crud, and without
// the verbs whose rule is Deny.
func (e *Entity) Verbs() []CrudVerb { return slices.Clone(e.verbs) }

// Projection is a compiled inline projection.
type Projection struct {
	name    string
	feature string
	source  string
	table   feature.TableDef
	apply   map[string]feature.ProjectionApplyFunc
	events  []string
	read    feature.Rule
	// search is the full-text search of the table; nil = none.
	search *Search
}

// Name is the projection's name.
func (p *Projection) Name() string { return p.name }

// Feature declares the projection.
func (p *Projection) Feature() string { return p.feature }

// Source is the entity whose streams feed the projection.
func (p *Projection) Source() string { return p.source }

// Table is the projection's table definition.
func (p *Projection) Table() feature.TableDef { return p.table.Clone() }

// Events lists the event types the projection applies, sorted.
func (p *Projection) Events() []string { return slices.Clone(p.events) }

// Read is who may follow the projection's row changes (the zero Rule:
// nobody).
func (p *Projection) Read() feature.Rule { return p.read }

// Apply returns the apply function for eventType; false when the projection
// ignores that type.
func (p *Projection) Apply(eventType string) (feature.ProjectionApplyFunc, bool) {
	fn, ok := p.apply[eventType]
	return fn, ok
}

// MSP is a compiled multi-stream projection, with defaults applied.
type MSP struct {
	feature string
	m       feature.MultiStreamProjection
	events  []string
	// search is the full-text search of the table; nil = none.
	search *Search
}

// Name is the consumer's name.
func (m *MSP) Name() string { return m.m.Name }

// Feature declares the projection.
func (m *MSP) Feature() string { return m.feature }

// Delivery is Shared or PerInstance.
func (m *MSP) Delivery() feature.Delivery { return m.m.Delivery }

// Table is the projection's table; false for a side-effect consumer.
func (m *MSP) Table() (feature.TableDef, bool) {
	if m.m.Table == nil {
		return feature.TableDef{}, false
	}
	return m.m.Table.Clone(), true
}

// Events lists the event types the projection applies, sorted.
func (m *MSP) Events() []string { return slices.Clone(m.events) }

// Apply returns the apply function for eventType; false when the projection
// ignores that type.
func (m *MSP) Apply(eventType string) (feature.ApplyFunc, bool) {
	fn, ok := m.m.Apply[eventType]
	return fn, ok
}

// Read is who may follow the rows of the projection's table (the zero
// Rule: nobody).
func (m *MSP) Read() feature.Rule { return m.m.Read }

// MaxAttempts is the number of failed attempts before the consumer is dead.
func (m *MSP) MaxAttempts() int { return m.m.MaxAttempts }

// Partitions is the declared partition count (0: one shard).
func (m *MSP) Partitions() int { return m.m.Partitions }

// PartitionBy is the payload field naming the stream ("": the aggregate id).
func (m *MSP) PartitionBy() string { return m.m.PartitionBy }

// Park reports whether a failing event parks its stream.
func (m *MSP) Park() bool { return m.m.Park }

// SkipApplyErrors reports whether a failing event is skipped.
func (m *MSP) SkipApplyErrors() bool { return m.m.SkipApplyErrors }

// StartFrom is where a new consumer starts.
func (m *MSP) StartFrom() feature.StartFrom { return m.m.StartFrom }

// BatchSize is the number of events per pass.
func (m *MSP) BatchSize() int { return m.m.BatchSize }

// StuckAfter is how long one apply may run before the consumer reports it
// stuck; 0 = the dispatcher's threshold.
func (m *MSP) StuckAfter() time.Duration { return m.m.StuckAfter }

// HandlerTimeout bounds one apply; 0 = no bound.
func (m *MSP) HandlerTimeout() time.Duration { return m.m.HandlerTimeout }

// Features lists the features in the order given to Build.
func (r *Registry) Features() []FeatureInfo {
	out := make([]FeatureInfo, len(r.features))
	for i, f := range r.features {
		out[i] = f.clone()
	}
	return out
}

// Entity returns the entity called name.
func (r *Registry) Entity(name string) (*Entity, bool) {
	e, ok := r.entities[name]
	return e, ok
}

// Entities lists all entities, sorted by name.
func (r *Registry) Entities() []*Entity {
	out := make([]*Entity, 0, len(r.entities))
	for _, k := range slices.Sorted(maps.Keys(r.entities)) {
		out = append(out, r.entities[k])
	}
	return out
}

// Handler returns the handler called name (e.g. "task.create").
func (r *Registry) Handler(name string) (Handler, bool) {
	h, ok := r.handlers[name]
	return h, ok
}

// Handlers lists all handlers, sorted by name.
func (r *Registry) Handlers() []Handler {
	out := make([]Handler, 0, len(r.handlers))
	for _, k := range slices.Sorted(maps.Keys(r.handlers)) {
		out = append(out, r.handlers[k])
	}
	return out
}

// Event returns the event type called name, CRUD events included.
func (r *Registry) Event(name string) (EventType, bool) {
	e, ok := r.events[name]
	if !ok {
		return EventType{}, false
	}
	return e.clone(), true
}

// Events lists all event types, sorted by name.
func (r *Registry) Events() []EventType {
	out := make([]EventType, 0, len(r.events))
	for _, k := range slices.Sorted(maps.Keys(r.events)) {
		out = append(out, r.events[k].clone())
	}
	return out
}

// Schema returns the JSON Schema (draft 2020-12) of the payload of an event
// type or the input of a handler, or nil when name is neither.
func (r *Registry) Schema(name string) json.RawMessage {
	p, ok := r.payloads[name]
	if !ok {
		return nil
	}
	return slices.Clone(p.Schema)
}

// ResultSchema returns the JSON Schema (draft 2020-12) of the data a CRUD
// handler answers (see the codec's state shape: id, version, createdAt,
// updatedAt, the fields, deletedAt with soft delete) or a handler declared
// with feature.Command or feature.Query answers (its result type's), or
// nil for any other name: an untyped handler's result is whatever it
// returns.
func (r *Registry) ResultSchema(name string) json.RawMessage {
	h, ok := r.handlers[name]
	if !ok {
		return nil
	}
	if h.Entity == "" && h.Projection == "" {
		return slices.Clone(r.results[name])
	}
	p := r.payloads[name]
	s, err := codec.ResultSchema(p.Entity, p.Kind)
	if err != nil {
		return nil // built from the same maps as the input schemas, which compiled
	}
	return s
}

// Projection returns the inline projection called name.
func (r *Registry) Projection(name string) (*Projection, bool) {
	p, ok := r.projections[name]
	return p, ok
}

// Projections lists the inline projections in declaration order.
func (r *Registry) Projections() []*Projection { return slices.Clone(r.projOrder) }

// ProjectionsFor lists the inline projections fed by entity, in declaration
// order: the ones to run in a write transaction on that entity's streams.
func (r *Registry) ProjectionsFor(entity string) []*Projection {
	return slices.Clone(r.bySource[entity])
}

// MSP returns the multi-stream projection called name.
func (r *Registry) MSP(name string) (*MSP, bool) {
	m, ok := r.msps[name]
	return m, ok
}

// MSPs lists the multi-stream projections in declaration order.
func (r *Registry) MSPs() []*MSP { return slices.Clone(r.mspOrder) }

// CanEmit reports whether featureName may append events of eventType: the
// events it defines and the CRUD events of its own entities. The pipeline
// checks it at every emit site (handlers and MSP apply functions).
func (r *Registry) CanEmit(featureName, eventType string) bool {
	return r.emits[featureName][eventType]
}

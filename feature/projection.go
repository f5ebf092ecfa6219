package feature

import (
	"maps"
	"slices"
	"time"
)

// InlineProjection is a read model kept in the write transaction of its source
// entity's events: an event and the projection's rows commit or roll back
// together.
type InlineProjection struct {
	// Source is the entity (of the same feature) whose streams feed it.
	Source string
	// Table is the projection's table; it must have a tenant_id uuid column,
	// which QueryProjection filters by.
	Table TableDef
	// Apply maps event types to their apply functions: the source entity's
	// CRUD events or events this feature defines. At least one entry.
	Apply map[string]ProjectionApplyFunc
	// Read decides who may follow the projection's row changes over HTTP
	// (GET /api/projections/{name}/events). The zero Rule allows nobody:
	// the channel of a projection without a Read rule answers 403.
	Read Rule
}

// ProjectionApplyFunc applies one event to an inline projection's table.
type ProjectionApplyFunc func(ctx ProjectionContext, e Event) error

// TableDef describes a read-model table the framework creates and rebuilds.
type TableDef struct {
	// Name is a lowercase SQL identifier, unique in the app, not starting with
	// kumiko_.
	Name    string
	Columns []Column
	// PrimaryKey lists the key's columns; empty = no primary key.
	PrimaryKey []string
	Indexes    []Index
	// Row, when set, is a value of the struct queries read the table's rows
	// into with RowsAs or RowAs (Row: MonthStats{}): registry.Build then
	// checks, at boot, that each of its fields names a column (by the
	// column's JSON name, created_at as createdAt; tenant_id is never
	// handed over) and that its Go type can hold the column's values.
	Row any
}

// Column is a table column.
type Column struct {
	// Name is a lowercase SQL identifier.
	Name string
	// Type is a PostgreSQL type as written in DDL: "text", "bigint",
	// "numeric(12,2)", "timestamptz", "uuid", "jsonb", "text[]", ….
	Type    string
	NotNull bool
	// ReadRoles, when set, restricts the column to callers with one of the
	// roles: in the rows a request's handler reads with QueryProjection the
	// column is left out for others, who can neither filter nor sort by it.
	// Use it for columns copied from fields with ReadRoles. It may not be
	// set on tenant_id or a primary key column (checked at boot).
	ReadRoles []string
}

// Index is a secondary index over columns, in order.
type Index struct {
	Columns []string
	Unique  bool
}

func (p InlineProjection) clone() InlineProjection {
	p.Read.roles = slices.Clone(p.Read.roles)
	p.Table = p.Table.Clone()
	p.Apply = maps.Clone(p.Apply)
	return p
}

// Clone returns a deep copy of t.
func (t TableDef) Clone() TableDef {
	t.Columns = slices.Clone(t.Columns)
	for i := range t.Columns {
		t.Columns[i].ReadRoles = slices.Clone(t.Columns[i].ReadRoles)
	}
	t.PrimaryKey = slices.Clone(t.PrimaryKey)
	idx := make([]Index, len(t.Indexes))
	for i, x := range t.Indexes {
		idx[i] = Index{Columns: slices.Clone(x.Columns), Unique: x.Unique}
	}
	if t.Indexes == nil {
		idx = nil
	}
	t.Indexes = idx
	return t
}

// Column returns the column called name.
func (t TableDef) Column(name string) (Column, bool) {
	i := slices.IndexFunc(t.Columns, func(c Column) bool { return c.Name == name })
	if i < 0 {
		return Column{}, false
	}
	return t.Columns[i], true
}

// Delivery says which processes handle a multi-stream projection's events.
type Delivery int

// Deliveries.
const (
	// Shared (the default): exactly one process of the app handles each event.
	Shared Delivery = iota
	// PerInstance: every process handles every event (caches, local fan-out).
	// Not allowed with a table, which every instance would write alike.
	PerInstance
)

// String is "shared" or "per-instance".
func (d Delivery) String() string {
	if d == PerInstance {
		return "per-instance"
	}
	if d == Shared {
		return "shared"
	}
	return "invalid"
}

// StartFrom says where a new multi-stream projection starts reading.
type StartFrom int

// Start positions. They only matter the first time the consumer is seen; an
// existing cursor is never rewound.
const (
	// FromBeginning (the default) replays the whole event log.
	FromBeginning StartFrom = iota
	// FromNow starts after the newest event at first start.
	FromNow
)

// String is "beginning" or "now".
func (s StartFrom) String() string {
	if s == FromNow {
		return "now"
	}
	if s == FromBeginning {
		return "beginning"
	}
	return "invalid"
}

// MultiStreamProjection is an asynchronous consumer of committed events of
// any stream, tenant and feature, delivered in event-id order; declare it
// with [Registrar.MultiStreamProjection]. With
// a Table its writes share the pass transaction with the consumer's cursor, so
// an event's effects and the cursor move together; without one it is a
// side-effect consumer (mail, webhooks) whose effects are at-least-once.
type MultiStreamProjection struct {
	// Name is lowercase (letters, digits, '-', '_', '.') and unique among the
	// app's projections.
	Name string
	// Delivery defaults to Shared.
	Delivery Delivery
	// Table is nil for a side-effect consumer.
	Table *TableDef
	// Apply maps event types (defined anywhere in the app) to their apply
	// functions. At least one entry.
	Apply map[string]ApplyFunc
	// MaxAttempts before the consumer goes dead (default 10).
	MaxAttempts int
	// SkipApplyErrors moves past an event whose apply fails instead of
	// retrying it.
	SkipApplyErrors bool
	// StartFrom defaults to FromBeginning.
	StartFrom StartFrom
	// BatchSize is the number of events per pass (default 200).
	BatchSize int
	// StuckAfter is how long one Apply call may run before the
	// projection's consumer reports it stuck (GET /api/consumers, the
	// consumer CLI, the console, the kumiko_event_consumer_stuck gauge);
	// 0 = the dispatcher's threshold (default 30s).
	StuckAfter time.Duration
	// HandlerTimeout, when positive, bounds one Apply call: past it the
	// call's context (ApplyContext.Context) is cancelled, and when Apply
	// then fails the pass counts a failed attempt ("handler timeout after
	// …"), retried or dead after MaxAttempts like any failure. An Apply
	// that ignores its context is not interrupted. 0 = no bound.
	HandlerTimeout time.Duration
	// Read decides who may follow the rows of its Table over HTTP (GET
	// /api/projections/{name}/events), as for [InlineProjection.Read]; the
	// zero Rule allows nobody.
	Read Rule
	// Partitions, above 1, splits a Shared projection into that many
	// partitions by stream (PartitionBy): the events of one stream are
	// applied in order, different partitions in parallel, shared among the
	// app's live processes (docs/dispatcher.md, "Partitions"). Stored with
	// the consumer's state when it is first created; change it later with
	// `consumer repartition`. 0 or 1: one shard. At most 256.
	Partitions int
	// PartitionBy names a payload field holding the stream key for
	// partitions and parking (a customer id, an order id); "" (the
	// default): the aggregate id. Every applied event with a payload type
	// must have the field; an event whose value is missing or empty falls
	// back to its aggregate id.
	PartitionBy string
	// Park, instead of stopping the projection when an event has failed
	// MaxAttempts times, parks the event's stream: the stream's later
	// events wait, every other stream goes on, and an operator retries or
	// skips (`consumer parked`, GET /api/consumers/parked, the console).
	// Not with SkipApplyErrors.
	Park bool
}

// ApplyFunc handles one event in a multi-stream projection.
type ApplyFunc func(ctx ApplyContext, e Event) error

func (m MultiStreamProjection) clone() MultiStreamProjection {
	m.Apply = maps.Clone(m.Apply)
	m.Read.roles = slices.Clone(m.Read.roles)
	if m.Table != nil {
		t := m.Table.Clone()
		m.Table = &t
	}
	return m
}

package projection

import (
	"context"
	"fmt"
	"math"
	"slices"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/internal/spec"
	"github.com/kumiko-go/kumiko/kumikotype"
)

// RowFeed reads one projection's rows for a channel of its row changes: the
// rows of a tenant as QueryProjection answers them, which events may change
// them, and when the table reflects an event. Get one with
// [Executor.RowFeed]; it is safe for concurrent use.
//
// An entity's read table is keyed by its streams' ids: an event changes at
// most the row of its own stream, which [RowFeed.RowsByID] re-reads
// (Keyed). Any other table may change anywhere in the tenant's rows: a
// channel reads them whole ([RowFeed.Rows]) and compares.
type RowFeed struct {
	s      *Side
	name   string
	def    feature.TableDef
	table  string  // schema-qualified
	entity *Entity // set for an entity's read table
	source string  // the aggregate type an inline projection follows
	types  map[string]bool
	msp    bool // rows reflect an event once the consumer's cursor passed it
	read   feature.Rule
}

// RowFeed returns the feed of the projection called name: an inline
// projection, a table-backed multi-stream projection or an entity's read
// table (by entity name). An unknown name, a side-effect consumer, a table
// without a tenant_id column and an entity whose streams live in the system
// tenant have no feed: not_found (projection_not_found).
func (s *Side) RowFeed(name string) (*RowFeed, error) {
	f := &RowFeed{s: s, name: name}
	if t, ok := s.entities[name]; ok && !t.e.SystemStream() {
		f.entity, f.def, f.table = t, t.e.Table(), t.table
		f.source = name
		if h, ok := s.reg.Handler(name + ".list"); ok && h.Entity == name {
			f.read = h.Access
		}
		return f, nil
	}
	if p, ok := s.reg.Projection(name); ok {
		f.def, f.source, f.read = p.Table(), p.Source(), p.Read()
		f.types = typeSet(p.Events())
	} else if m, ok := s.reg.MSP(name); ok {
		td, hasTable := m.Table()
		if !hasTable {
			return nil, noFeed(name)
		}
		f.def, f.msp, f.read = td, true, m.Read()
		f.types = typeSet(m.Events())
	} else {
		return nil, noFeed(name)
	}
	if !hasColumn(f.def, "tenant_id") {
		return nil, noFeed(name)
	}
	f.table = s.qualify(f.def.Name)
	return f, nil
}

func noFeed(name string) *kumikotype.Error {
	return kumikotype.NewError(kumikotype.CodeNotFound, kumikotype.ReasonProjectionNotFound, "there is no projection "+name+" whose rows a channel can follow", nil).
		With("projection", name)
}

func typeSet(types []string) map[string]bool {
	m := make(map[string]bool, len(types))
	for _, t := range types {
		m[t] = true
	}
	return m
}

// Name is the projection's name.
func (f *RowFeed) Name() string { return f.name }

// Read is the access rule of following the rows: an entity's list rule, a
// projection's Read rule (the zero Rule, which allows nobody, when it has
// none).
func (f *RowFeed) Read() feature.Rule { return f.read }

// Keyed reports whether the rows are keyed by the id of the stream whose
// events change them (an entity's read table): an event changes at most
// the row of its own stream.
func (f *RowFeed) Keyed() bool { return f.entity != nil }

// Changes reports whether ev may change rows of its tenant: an event of the
// entity's streams, or an event type the projection applies (of its source
// entity's streams, for an inline projection).
func (f *RowFeed) Changes(ev eventstore.Event) bool {
	if f.source != "" && ev.AggregateType != f.source {
		return false
	}
	return f.entity != nil || f.types[ev.Type]
}

// Filter is the store filter of the events that may change the rows of
// tenant: Changes holds for each (a multi-stream projection's filter takes
// its event types of every aggregate type).
func (f *RowFeed) Filter(tenant uuid.UUID) eventstore.ReadFilter {
	rf := eventstore.ReadFilter{TenantID: tenant}
	if f.source != "" {
		rf.AggregateTypes = []string{f.source}
	}
	if f.entity == nil {
		rf.Types = slices.Sorted(func(yield func(string) bool) {
			for t := range f.types {
				if !yield(t) {
					return
				}
			}
		})
	}
	return rf
}

// Settled is the id up to which the table reflects every event: for a
// multi-stream projection the cursor of its consumer (of its shard
// furthest behind); inline projections and entity tables change in the
// event's own transaction, so every committed event is reflected
// (math.MaxInt64).
func (f *RowFeed) Settled(ctx context.Context) (int64, error) {
	if !f.msp {
		return math.MaxInt64, nil
	}
	var cursor int64
	err := pgx.BeginTxFunc(ctx, f.s.pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var err error
		cursor, err = f.s.consumers.LowestCursorTx(ctx, tx, f.name)
		return err
	})
	if err != nil {
		return 0, eventstore.TranslateError(fmt.Errorf("projection %s: cursor: %w", f.name, err))
	}
	return cursor, nil
}

// query is the projection query of tenant's rows, as QueryProjection builds
// it.
func (f *RowFeed) query(ctx context.Context, tenant uuid.UUID) *projectionQuery {
	return &projectionQuery{ctx: ctx, db: f.s.pool, name: f.name, def: f.def, table: f.table, tenant: tenant}
}

// Rows reads every row of tenant in primary-key order, as QueryProjection
// answers them (camelCase keys, no tenant_id), without the fields u may not
// read.
func (f *RowFeed) Rows(ctx context.Context, tenant uuid.UUID, u feature.User) ([]map[string]any, error) {
	rows, err := f.query(ctx, tenant).Rows(feature.ProjectionFilter{})
	if err != nil {
		return nil, eventstore.TranslateError(err)
	}
	return f.visible(rows, u), nil
}

// RowsByID reads the rows of tenant with the given ids (Keyed feeds only),
// like Rows; an id without a row is missing from the answer.
func (f *RowFeed) RowsByID(ctx context.Context, tenant uuid.UUID, u feature.User, ids []uuid.UUID) ([]map[string]any, error) {
	if f.entity == nil {
		return nil, fmt.Errorf("projection %s is not keyed by stream id", f.name)
	}
	keys := make([][16]byte, len(ids))
	for i, id := range ids {
		keys[i] = id
	}
	rows, err := f.query(ctx, tenant).Rows(feature.ProjectionFilter{Where: "id = ANY($1)", Args: []any{keys}})
	if err != nil {
		return nil, eventstore.TranslateError(err)
	}
	return f.visible(rows, u), nil
}

// Key is the row's key: its primary-key columns but tenant_id, by their
// JSON names; a table without a primary key is keyed by the whole row.
func (f *RowFeed) Key(row map[string]any) map[string]any {
	if len(f.def.PrimaryKey) == 0 {
		return row
	}
	key := make(map[string]any, len(f.def.PrimaryKey))
	for _, col := range f.def.PrimaryKey {
		if col != "tenant_id" {
			name := spec.JSONName(col)
			key[name] = row[name]
		}
	}
	return key
}

// KeyOf is the key of the entity row of stream id (Keyed feeds only).
func (f *RowFeed) KeyOf(id uuid.UUID) map[string]any { return map[string]any{"id": id.String()} }

// visible takes out of the rows what u may not read: an entity table's
// fields by their ReadRoles, as detail and list do, and a projection
// table's columns by theirs, as QueryProjection does.
func (f *RowFeed) visible(rows []map[string]any, u feature.User) []map[string]any {
	var hidden []string
	if f.entity != nil {
		for _, name := range f.entity.fields {
			if !f.entity.specs[name].CanRead(u.Authenticated, u.HasRole) {
				hidden = append(hidden, spec.JSONName(spec.ColumnName(name)))
			}
		}
	} else {
		for _, c := range f.def.Columns {
			if !(spec.Field{ReadRoles: c.ReadRoles}).CanRead(u.Authenticated, u.HasRole) {
				hidden = append(hidden, spec.JSONName(c.Name))
			}
		}
	}
	for _, row := range rows {
		for _, h := range hidden {
			delete(row, h)
		}
	}
	return rows
}

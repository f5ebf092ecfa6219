package pipeline

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/registry"
)

// commandContext is the feature.CommandContext of one request.
type commandContext struct {
	ctx     context.Context
	tx      pgx.Tx
	d       *Executor
	c       *Caller
	feature string
	// causation is the id of the event being applied, for events a
	// consumer appends in reaction; "" in requests.
	causation string
	// source is the stream of the event being applied (see StreamKey),
	// the ordering key of what is published in reaction; "" in requests.
	source string
	// handler is the command or query a request runs, whose caller's field
	// rules apply to what it appends and reads; "" for the system's own
	// code (multi-stream projections, jobs, integration handlers).
	handler string
	// refused is the field write the handler tried and was refused: it
	// fails the command even when the handler goes on.
	refused *Error
	// read are the streams loaded whole in this transaction: their events
	// were upcast, so an append to them needs no check of unknown versions.
	read map[uuid.UUID]bool
}

var _ feature.CommandContext = (*commandContext)(nil)

func (d *Executor) newCommandContext(ctx context.Context, tx pgx.Tx, c *Caller, h registry.Handler) *commandContext {
	return &commandContext{ctx: ctx, tx: tx, d: d, c: c, feature: h.Feature, handler: h.Name}
}

func (cc *commandContext) Context() context.Context { return cc.ctx }
func (cc *commandContext) DB() feature.DB           { return cc.tx }
func (cc *commandContext) User() feature.User       { return cc.c.User }
func (cc *commandContext) Tenant() uuid.UUID        { return cc.c.User.TenantID }
func (cc *commandContext) RequestID() string        { return cc.c.RequestID }
func (cc *commandContext) CorrelationID() string    { return cc.c.CorrelationID }

// tenantFor is the tenant of aggregateType's streams: the system tenant for
// system-stream entities, the caller's otherwise.
func (cc *commandContext) tenantFor(aggregateType string) uuid.UUID {
	return cc.d.tenantOf(cc.d.entities[aggregateType], cc.c)
}

func (cc *commandContext) LoadAggregate(id uuid.UUID, aggregateType string, opts feature.LoadOptions) (feature.Aggregate, error) {
	if opts.Version > math.MaxInt32 {
		opts.Version = 0 // past the integer version column: no stream is that long
	}
	ctx, span := cc.d.tracer.Start(cc.ctx, "load", trace.WithAttributes(attribute.String("kumiko.aggregate_type", aggregateType)))
	evs, err := cc.d.store.LoadTx(ctx, cc.tx, cc.tenantFor(aggregateType), id,
		eventstore.LoadOptions{AsOf: opts.AsOf, UpToVersion: opts.Version})
	span.SetAttributes(attribute.Int("kumiko.events", len(evs)))
	endSpan(span, err)
	if err != nil {
		return nil, err
	}
	cc.d.metrics.load(aggregateType, len(evs))
	if opts == (feature.LoadOptions{}) {
		if cc.read == nil {
			cc.read = map[uuid.UUID]bool{}
		}
		cc.read[id] = true
	}
	return cc.newAggregate(id, aggregateType, nil, evs)
}

func (cc *commandContext) FetchForWriting(id uuid.UUID, aggregateType string, expectedVersion int) (feature.Aggregate, error) {
	agg, err := cc.LoadAggregate(id, aggregateType, feature.LoadOptions{})
	if err != nil {
		return nil, err
	}
	switch v := agg.Version(); {
	case expectedVersion == feature.AnyVersion:
	case v == 0 && expectedVersion > 0:
		archived, err := cc.IsStreamArchived(id)
		if err != nil {
			return nil, err
		}
		if archived {
			return nil, fmt.Errorf("%w: %s", eventstore.ErrStreamArchived, id)
		}
		return nil, fmt.Errorf("%w: %s", eventstore.ErrAggregateNotFound, id)
	case v != expectedVersion:
		return nil, &eventstore.VersionConflictError{AggregateID: id, Expected: expectedVersion, Current: v}
	}
	return agg, nil
}

func (cc *commandContext) LoadAggregateWithSnapshot(id uuid.UUID, aggregateType string, snapshotVersion int) (feature.Snapshot, feature.Aggregate, error) {
	ctx, span := cc.d.tracer.Start(cc.ctx, "load", trace.WithAttributes(attribute.String("kumiko.aggregate_type", aggregateType)))
	snap, evs, err := cc.d.store.LoadWithSnapshotTx(ctx, cc.tx, cc.tenantFor(aggregateType), id, snapshotVersion, eventstore.LoadOptions{})
	span.SetAttributes(attribute.Int("kumiko.events", len(evs)))
	endSpan(span, err)
	if err != nil {
		return feature.Snapshot{}, nil, err
	}
	cc.d.metrics.load(aggregateType, len(evs))
	var fs feature.Snapshot
	if snap != nil {
		if snap.AggregateType != aggregateType {
			return feature.Snapshot{}, cc.emptyAggregate(id, aggregateType), nil
		}
		fs = feature.Snapshot{Version: snap.Version, State: snap.State, SnapshotVersion: snap.SnapshotVersion, CreatedAt: snap.CreatedAt}
	}
	agg, err := cc.newAggregate(id, aggregateType, snap, evs)
	return fs, agg, err
}

func (cc *commandContext) SnapshotAggregate(spec feature.SnapshotSpec) error {
	tenant := cc.tenantFor(spec.AggregateType)
	if spec.State == nil {
		t, ok := cc.d.entities[spec.AggregateType]
		if !ok {
			return fmt.Errorf("snapshot %s: State is required for %s, which is not an entity", spec.AggregateID, spec.AggregateType)
		}
		evs, err := cc.d.store.LoadTx(cc.ctx, cc.tx, tenant, spec.AggregateID, eventstore.LoadOptions{UpToVersion: spec.Version})
		if err != nil {
			return err
		}
		if spec.State, err = t.fold(nil, evs); err != nil {
			return err
		}
	}
	raw, err := json.Marshal(spec.State)
	if err != nil {
		return fmt.Errorf("snapshot %s: %w", spec.AggregateID, err)
	}
	return cc.d.saveSnapshot(cc.ctx, cc.tx, eventstore.Snapshot{
		TenantID: tenant, AggregateID: spec.AggregateID, AggregateType: spec.AggregateType,
		Version: spec.Version, State: raw, SnapshotVersion: spec.SnapshotVersion,
	})
}

func (cc *commandContext) AppendEvent(spec feature.AppendSpec) (feature.EventRef, error) {
	ev, err := cc.appendSpec(cc.tx, spec)
	if err != nil {
		return feature.EventRef{}, err
	}
	return eventRef(ev), nil
}

func (cc *commandContext) TryAppendEvent(spec feature.AppendSpec) (feature.EventRef, bool, error) {
	sp, err := cc.tx.Begin(cc.ctx) // a savepoint: losing the race must not abort the request
	if err != nil {
		return feature.EventRef{}, false, err
	}
	ev, err := cc.appendSpec(sp, spec)
	if errors.Is(err, eventstore.ErrVersionConflict) {
		if rbErr := sp.Rollback(cc.ctx); rbErr != nil {
			return feature.EventRef{}, false, rbErr
		}
		return feature.EventRef{}, false, nil
	}
	if err != nil {
		_ = sp.Rollback(cc.ctx)
		return feature.EventRef{}, false, err
	}
	if err := sp.Commit(cc.ctx); err != nil {
		return feature.EventRef{}, false, err
	}
	return eventRef(ev), true, nil
}

func (cc *commandContext) ArchiveStream(id uuid.UUID, reason string) error {
	return cc.d.store.ArchiveTx(cc.ctx, cc.tx, cc.c.User.TenantID, id, cc.c.User.ID, reason)
}

func (cc *commandContext) RestoreStream(id uuid.UUID) error {
	return cc.d.store.RestoreTx(cc.ctx, cc.tx, cc.c.User.TenantID, id)
}

func (cc *commandContext) IsStreamArchived(id uuid.UUID) (bool, error) {
	return cc.d.store.IsArchivedTx(cc.ctx, cc.tx, cc.c.User.TenantID, id)
}

func (cc *commandContext) QueryProjection(name string) feature.ProjectionQuery {
	q := &projectionQuery{ctx: cc.ctx, db: cc.tx, name: name, tenant: cc.c.User.TenantID}
	if t, ok := cc.d.entities[name]; ok {
		q.def, q.table, q.tenant = t.e.Table(), t.table, cc.tenantFor(name)
		if cc.handler != "" {
			// A request's handler reads as its caller: the fields the
			// caller may not read are not columns of the table it sees.
			q.def, q.columns = t.readable(q.def, cc.c.User)
		}
	} else if p, ok := cc.d.reg.Projection(name); ok {
		q.def = p.Table()
		q.table = cc.d.qualify(q.def.Name)
		q.err = cc.checkBuilt(name, false)
	} else if m, ok := cc.d.reg.MSP(name); ok {
		if td, ok := m.Table(); ok && hasColumn(td, "tenant_id") {
			q.def, q.table = td, cc.d.qualify(td.Name)
			q.err = cc.checkBuilt(name, true)
		} else {
			q.err = fmt.Errorf("projection %s has no table with a tenant_id column to filter by", name)
		}
	} else {
		q.err = fmt.Errorf("no projection %q", name)
	}
	if _, entity := cc.d.entities[name]; !entity && q.err == nil && cc.handler != "" {
		// Columns with ReadRoles the caller holds none of are not part of
		// the table it sees.
		q.def, q.columns = readableColumns(q.def, cc.c.User)
	}
	return q
}

// checkBuilt refuses a request's read of a projection table still being
// built; the system's own code (a projection's apply during its own
// catch-up) reads it as it is.
func (cc *commandContext) checkBuilt(name string, msp bool) error {
	if cc.handler == "" {
		return nil
	}
	return cc.d.checkBuilt(cc.ctx, cc.tx, name, msp)
}

func hasColumn(t feature.TableDef, name string) bool {
	_, ok := t.Column(name)
	return ok
}

func eventRef(ev eventstore.Event) feature.EventRef {
	return feature.EventRef{ID: ev.ID, AggregateID: ev.AggregateID, Version: ev.Version, Type: ev.Type, EventVersion: ev.EventVersion}
}

// aggregate is a loaded stream.
type aggregate struct {
	cc      *commandContext
	id      uuid.UUID
	typ     string
	version int
	events  []feature.Event
	state   map[string]any
	entity  *entityTable
}

func (cc *commandContext) emptyAggregate(id uuid.UUID, typ string) *aggregate {
	return &aggregate{cc: cc, id: id, typ: typ, entity: cc.d.entities[typ]}
}

// newAggregate builds an aggregate from an optional snapshot and the events
// after it. Events of another aggregate type mean the id is not a stream of
// this type: the aggregate is empty.
func (cc *commandContext) newAggregate(id uuid.UUID, typ string, snap *eventstore.Snapshot, evs []eventstore.Event) (*aggregate, error) {
	a := cc.emptyAggregate(id, typ)
	if len(evs) > 0 && evs[0].AggregateType != typ {
		return a, nil
	}
	if snap != nil {
		a.version = snap.Version
		if a.entity != nil {
			if err := json.Unmarshal(snap.State, &a.state); err != nil {
				return nil, fmt.Errorf("snapshot of %s: %w", id, err)
			}
		}
	}
	for _, e := range evs {
		a.events = append(a.events, e)
		a.version = e.Version
	}
	if a.entity != nil {
		var err error
		if a.state, err = a.entity.fold(a.state, evs); err != nil {
			return nil, err
		}
	}
	return a, nil
}

func (a *aggregate) ID() uuid.UUID           { return a.id }
func (a *aggregate) Type() string            { return a.typ }
func (a *aggregate) Version() int            { return a.version }
func (a *aggregate) Events() []feature.Event { return slices.Clone(a.events) }

func (a *aggregate) State() map[string]any {
	if a.state == nil {
		return nil
	}
	out := make(map[string]any, len(a.state))
	for k, v := range a.state {
		out[k] = v
	}
	return out
}

func (a *aggregate) Append(eventType string, payload any) error {
	ev, err := a.cc.appendSpec(a.cc.tx, feature.AppendSpec{
		AggregateID: a.id, AggregateType: a.typ, Type: eventType, Payload: payload, ExpectedVersion: a.version,
	})
	if err != nil {
		return err
	}
	// Keep the aggregate current, so a second Append expects the new version.
	if a.entity != nil {
		if a.state, err = a.entity.fold(a.state, []eventstore.Event{ev}); err != nil {
			return err
		}
	}
	a.events = append(a.events, ev)
	a.version = ev.Version
	return nil
}

// projectionContext is the feature.ProjectionContext of one inline apply.
type projectionContext struct {
	ctx    context.Context
	db     feature.DB
	tenant uuid.UUID
	table  string
}

func (p *projectionContext) Context() context.Context { return p.ctx }
func (p *projectionContext) DB() feature.DB           { return p.db }
func (p *projectionContext) Tenant() uuid.UUID        { return p.tenant }
func (p *projectionContext) Table() string            { return p.table }

// projectionQuery reads a projection table of one tenant.
type projectionQuery struct {
	ctx   context.Context
	db    feature.DB
	name  string           // the projection, for errors
	def   feature.TableDef // its declared columns
	table string           // schema-qualified
	// columns is the select list of the table's rows; "" is every column.
	columns string
	tenant  uuid.UUID
	err     error
}

// sql builds the statement. The tenant filter is applied to the table in an
// inner query, so the author's Where only ever sees the tenant's rows (and
// only the columns the caller may read), whatever it says; it uses $1…$n for Args, and the tenant takes the next
// placeholder. Where must still be one condition (see checkWhere), OrderBy
// a list of the table's declared columns.
func (q *projectionQuery) sql(selectList string, f feature.ProjectionFilter, ordered bool) (string, []any, error) {
	if err := checkWhere(f.Where); err != nil {
		return "", nil, fmt.Errorf("projection %s: Where: %w", q.name, err)
	}
	order := ""
	if ordered {
		var err error
		if order, err = orderBy(q.def, f.OrderBy); err != nil {
			return "", nil, fmt.Errorf("projection %s: OrderBy: %w", q.name, err)
		}
	}
	args := append(slices.Clone(f.Args), [16]byte(q.tenant))
	var b strings.Builder
	fmt.Fprintf(&b, "SELECT %s FROM (SELECT %s FROM %s WHERE tenant_id = $%d) AS %s",
		selectList, cmp.Or(q.columns, "*"), q.table, len(args), pgx.Identifier{q.def.Name}.Sanitize())
	if f.Where != "" {
		fmt.Fprintf(&b, " WHERE (%s)", f.Where)
	}
	if order != "" {
		fmt.Fprintf(&b, " ORDER BY %s", order)
	}
	if f.Limit > 0 {
		fmt.Fprintf(&b, " LIMIT %d", f.Limit)
	}
	return b.String(), args, nil
}

// sqlFunctionWords are functions that run SQL text or read a table by name:
// a Where may not call them, as they read past the tenant filter.
var sqlFunctionWords = []string{"_to_xml", "dblink"}

// checkWhere refuses a Where that is not one condition over a row: an
// unclosed quote, a parenthesis closed before it was opened or left open,
// a statement separator, a comment, a dollar-quoted string, a subquery
// (SELECT or TABLE) or a function that runs SQL text. What stands inside
// quotes is not looked at.
func checkWhere(s string) error {
	depth := 0
	for i := 0; i < len(s); {
		c := s[i]
		next := byte(0)
		if i+1 < len(s) {
			next = s[i+1]
		}
		switch {
		case c == '\'' || c == '"':
			// E'…' strings escape with backslashes; all quotes double to escape.
			backslash := c == '\'' && i > 0 && (s[i-1] == 'e' || s[i-1] == 'E') && (i < 2 || !isIdentByte(s[i-2]))
			end := closingQuote(s, i, backslash)
			if end < 0 {
				return errors.New("a quote is not closed")
			}
			i = end + 1
			continue
		case c == '$':
			j := i + 1
			for j < len(s) && s[j] >= '0' && s[j] <= '9' {
				j++
			}
			if j == i+1 {
				return errors.New("$ may only start a placeholder ($1, $2, …); pass values through Args")
			}
			i = j
			continue
		case c == ';':
			return errors.New("; would end the statement")
		case c == '-' && next == '-', c == '/' && next == '*':
			return errors.New("comments are not allowed")
		case c == '(':
			depth++
		case c == ')':
			if depth--; depth < 0 {
				return errors.New("a parenthesis is closed that was not opened")
			}
		case isIdentByte(c) && (c < '0' || c > '9'):
			j := i
			for j < len(s) && isIdentByte(s[j]) {
				j++
			}
			word := strings.ToLower(s[i:j])
			if word == "select" || word == "table" {
				return errors.New("subqueries are not allowed: they read past the tenant filter")
			}
			for _, f := range sqlFunctionWords {
				if strings.Contains(word, f) {
					return fmt.Errorf("%s is not allowed: it reads past the tenant filter", word)
				}
			}
			i = j
			continue
		}
		i++
	}
	if depth != 0 {
		return errors.New("a parenthesis is not closed")
	}
	return nil
}

// closingQuote returns the index of the quote that closes the one at s[open],
// or -1; a doubled quote is part of the text, and so is a backslashed
// character when backslash is set.
func closingQuote(s string, open int, backslash bool) int {
	q := s[open]
	for j := open + 1; j < len(s); j++ {
		switch {
		case backslash && s[j] == '\\':
			j++
		case s[j] == q && j+1 < len(s) && s[j+1] == q:
			j++
		case s[j] == q:
			return j
		}
	}
	return -1
}

// isIdentByte reports whether c can be part of an unquoted SQL identifier or
// keyword (any non-ASCII byte can).
func isIdentByte(c byte) bool {
	return c == '_' || c >= 0x80 || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
}

// orderBy turns an OrderBy into SQL: a comma-separated list of the table's
// declared columns (bare, or double-quoted), each with an optional ASC or
// DESC and NULLS FIRST or NULLS LAST; "" is the primary key. Anything else
// is refused.
func orderBy(def feature.TableDef, s string) (string, error) {
	if strings.TrimSpace(s) == "" {
		key := make([]string, len(def.PrimaryKey))
		for i, col := range def.PrimaryKey {
			key[i] = pgx.Identifier{col}.Sanitize()
		}
		return strings.Join(key, ", "), nil
	}
	var out []string
	for item := range strings.SplitSeq(s, ",") {
		words := strings.Fields(item)
		if len(words) == 0 {
			return "", errors.New("an empty item")
		}
		col := words[0]
		if len(col) >= 2 && col[0] == '"' && col[len(col)-1] == '"' {
			col = col[1 : len(col)-1]
		} else {
			col = strings.ToLower(col)
		}
		if _, ok := def.Column(col); !ok {
			return "", fmt.Errorf("%q is not a column of %s", words[0], def.Name)
		}
		sql := pgx.Identifier{col}.Sanitize()
		rest := strings.ToUpper(strings.Join(words[1:], " "))
		for _, dir := range []string{"ASC", "DESC"} {
			if r, ok := strings.CutPrefix(rest, dir); ok && (r == "" || r[0] == ' ') {
				sql += " " + dir
				rest = strings.TrimSpace(r)
				break
			}
		}
		switch rest {
		case "":
		case "NULLS FIRST", "NULLS LAST":
			sql += " " + rest
		default:
			return "", fmt.Errorf("%q: a column may only be followed by ASC or DESC and NULLS FIRST or NULLS LAST", strings.TrimSpace(item))
		}
		out = append(out, sql)
	}
	return strings.Join(out, ", "), nil
}

func (q *projectionQuery) Rows(f feature.ProjectionFilter) ([]map[string]any, error) {
	if q.err != nil {
		return nil, q.err
	}
	sql, args, err := q.sql("*", f, true)
	if err != nil {
		return nil, err
	}
	rows, err := q.db.Query(q.ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("query projection: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (map[string]any, error) {
		m, err := pgx.RowToMap(r)
		row := make(map[string]any, len(m))
		for k, v := range m {
			if k != "tenant_id" {
				row[camelCase(k)] = fromDB(v)
			}
		}
		return row, err
	})
	if err != nil {
		return nil, fmt.Errorf("query projection: %w", err)
	}
	return out, nil
}

// camelCase is the JSON name of a column: created_at → createdAt.
func camelCase(column string) string {
	parts := strings.Split(column, "_")
	for i := 1; i < len(parts); i++ {
		if p := parts[i]; p != "" {
			parts[i] = strings.ToUpper(p[:1]) + p[1:]
		}
	}
	return strings.Join(parts, "")
}

func (q *projectionQuery) Row(f feature.ProjectionFilter) (map[string]any, error) {
	f.Limit = 1
	rows, err := q.Rows(f)
	if err != nil || len(rows) == 0 {
		return nil, err
	}
	return rows[0], nil
}

func (q *projectionQuery) Count(f feature.ProjectionFilter) (int64, error) {
	if q.err != nil {
		return 0, q.err
	}
	f.Limit = 0
	sql, args, err := q.sql("count(*)", f, false)
	if err != nil {
		return 0, err
	}
	var n int64
	if err := q.db.QueryRow(q.ctx, sql, args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("count projection: %w", err)
	}
	return n, nil
}

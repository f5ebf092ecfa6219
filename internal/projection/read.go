package projection

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/internal/spec"
	"github.com/kumiko-go/kumiko/kumikotype"
	"github.com/kumiko-go/kumiko/registry"
)

// ListResult is a page of a CRUD list.
type ListResult struct {
	Rows []map[string]any `json:"rows"`
	// NextCursor continues after the last row; "" on the last page.
	NextCursor string `json:"nextCursor"`
}

// Detail reads one entity row of the caller's tenant, or its state at
// in.AsOf folded from events; nil when it does not exist for the caller.
func (s *Side) Detail(ctx context.Context, u feature.User, t *Entity, in registry.DetailInput) (any, error) {
	tenant := t.Tenant(u)
	var row map[string]any
	if in.AsOf.IsZero() {
		rows, err := s.pool.Query(ctx, fmt.Sprintf("SELECT %s FROM %s WHERE id = $1 AND tenant_id = $2%s",
			t.selectList, t.table, t.liveOnly()), [16]byte(in.ID), [16]byte(tenant))
		if err != nil {
			return nil, err
		}
		found, err := t.scanRows(rows)
		if err != nil {
			return nil, err
		}
		if len(found) > 0 {
			row = found[0]
		}
	} else {
		evs, err := s.store.Load(ctx, tenant, in.ID, eventstore.LoadOptions{AsOf: in.AsOf})
		if err != nil {
			return nil, err
		}
		if len(evs) > 0 && evs[0].AggregateType == t.e.Name() {
			if row, err = t.Fold(nil, evs); err != nil {
				return nil, err
			}
		}
		if row != nil && row["deletedAt"] != nil {
			row = nil
		}
	}
	if row == nil {
		return nil, nil
	}
	return t.Visible(row, u), nil
}

// sortKey is a list ordering key resolved to its column.
type sortKey struct {
	field, col, typ string
	desc            bool
}

// listPlan is a list request resolved against the entity: ordering keys
// (ending in id, which makes the order total) and the keyset position.
type listPlan struct {
	keys   []sortKey
	cursor []any // values of keys in the last row of the previous page
}

func (s *Side) planList(u feature.User, t *Entity, in registry.ListInput) (*listPlan, error) {
	p := &listPlan{}
	sorts := in.Sort
	if len(sorts) == 0 {
		sorts = []registry.SortKey{{Field: "createdAt"}}
	}
	for _, s := range sorts {
		k := sortKey{field: s.Field, desc: s.Desc}
		switch s.Field {
		case "id":
			k.col, k.typ = "id", "uuid"
		case "createdAt", "updatedAt":
			k.col, k.typ = spec.ColumnName(s.Field), "timestamptz"
		default:
			k.col, k.typ = t.cols[s.Field], t.specs[s.Field].Type.ColumnType()
		}
		p.keys = append(p.keys, k)
	}
	if p.keys[len(p.keys)-1].field != "id" {
		p.keys = append(p.keys, sortKey{field: "id", col: "id", typ: "uuid"})
	}
	for f := range in.Filter {
		if err := t.checkRead(u, f); err != nil {
			return nil, err
		}
	}
	for _, k := range p.keys {
		if err := t.checkRead(u, k.field); err != nil {
			return nil, err
		}
	}
	if in.Cursor != "" {
		var cur listCursor
		raw, err := base64.RawURLEncoding.DecodeString(in.Cursor)
		if err == nil {
			err = json.Unmarshal(raw, &cur)
		}
		if err == nil {
			err = p.checkCursor(&cur)
		}
		if err != nil {
			return nil, kumikotype.NewError(kumikotype.CodeValidation, kumikotype.ReasonInvalidCursor, "the cursor does not belong to this list", err)
		}
		p.cursor = cur.Values
	}
	return p, nil
}

// checkRead refuses filtering or sorting by a field the caller may not read:
// the order and the cursor would disclose it.
func (t *Entity) checkRead(u feature.User, field string) *kumikotype.Error {
	if spec, ok := t.specs[field]; ok && !spec.CanRead(u.Authenticated, u.HasRole) {
		return kumikotype.NewError(kumikotype.CodeAccessDenied, kumikotype.ReasonFieldAccess, "you may not read the field "+field, nil).With("field", field)
	}
	return nil
}

// listCursor is the position after a page: the ordering it belongs to and
// the values of its keys in the page's last row.
type listCursor struct {
	Order  string `json:"o"`
	Values []any  `json:"v"`
}

// order names the plan's ordering, so a cursor of another ordering is refused.
func (p *listPlan) order() string {
	parts := make([]string, len(p.keys))
	for i, k := range p.keys {
		parts[i] = k.field
		if k.desc {
			parts[i] = "-" + k.field
		}
	}
	return strings.Join(parts, ",")
}

func (p *listPlan) cursorOf(row map[string]any) string {
	cur := listCursor{Order: p.order(), Values: make([]any, len(p.keys))}
	for i, k := range p.keys {
		cur.Values[i] = row[k.field]
	}
	raw, _ := json.Marshal(cur)
	return base64.RawURLEncoding.EncodeToString(raw)
}

// checkCursor refuses a cursor of another ordering or with values its keys'
// columns cannot hold (they would reach SQL otherwise), and normalises the
// rest: uuids canonical, times in UTC.
func (p *listPlan) checkCursor(cur *listCursor) error {
	if cur.Order != p.order() || len(cur.Values) != len(p.keys) {
		return errors.New("the cursor belongs to another ordering")
	}
	for i, k := range p.keys {
		v := cur.Values[i]
		if v == nil {
			if k.field == "id" {
				return errors.New("the cursor has no id")
			}
			continue
		}
		s, isStr := v.(string)
		ok := false
		switch k.typ {
		case "uuid":
			id, err := uuid.Parse(s)
			ok = isStr && err == nil
			cur.Values[i] = id.String()
		case "timestamptz":
			t, err := registry.ParseTime(s)
			ok = isStr && err == nil
			cur.Values[i] = formatTime(t)
		case "numeric":
			_, ok = v.(float64)
		case "boolean":
			_, ok = v.(bool)
		case "text":
			ok = isStr && !strings.ContainsRune(s, 0) // text cannot hold NUL
		}
		if !ok {
			return fmt.Errorf("cursor value %d does not fit %s", i, k.field)
		}
	}
	return nil
}

// List reads a page of the caller's tenant's rows with keyset pagination:
// ordered by the sort keys, nulls last, then id; a page continues strictly
// after the cursor's row, so concurrent inserts never repeat or skip rows
// already passed.
func (s *Side) List(ctx context.Context, u feature.User, t *Entity, in registry.ListInput) (any, error) {
	p, err := s.planList(u, t, in)
	if err != nil {
		return nil, err
	}
	var rows []map[string]any
	if in.AsOf.IsZero() {
		rows, err = s.listRows(ctx, u, t, in, p)
	} else {
		rows, err = s.listAsOf(ctx, u, t, in, p)
	}
	if err != nil {
		return nil, err
	}
	res := ListResult{Rows: make([]map[string]any, 0, len(rows))}
	if len(rows) > in.Limit {
		rows = rows[:in.Limit]
		res.NextCursor = p.cursorOf(rows[len(rows)-1])
	}
	for _, r := range rows {
		res.Rows = append(res.Rows, t.Visible(r, u))
	}
	return res, nil
}

// listRows reads limit+1 rows from the read table.
func (s *Side) listRows(ctx context.Context, u feature.User, t *Entity, in registry.ListInput, p *listPlan) ([]map[string]any, error) {
	args := []any{[16]byte(t.Tenant(u))}
	arg := func(v any, typ string) string {
		args = append(args, toText(v, typ))
		return fmt.Sprintf("$%d::text::%s", len(args), typ)
	}
	where := []string{"tenant_id = $1"}
	if t.soft && !in.IncludeDeleted {
		where = append(where, "deleted_at IS NULL")
	}
	where = append(where, t.filterWhere(in.Filter, arg)...)
	if p.cursor != nil {
		// After the cursor row: for some key i, equal on keys before i and
		// strictly after on key i. With nulls last, a null cursor value has
		// nothing strictly after it, and every null comes after a value.
		var ors []string
		for i, k := range p.keys {
			if p.cursor[i] == nil {
				continue // nothing sorts strictly after a null
			}
			var and []string
			for j := range i {
				kj := p.keys[j]
				if p.cursor[j] == nil {
					and = append(and, kj.col+" IS NULL")
				} else {
					and = append(and, kj.col+" = "+arg(p.cursor[j], kj.typ))
				}
			}
			op := ">"
			if k.desc {
				op = "<"
			}
			and = append(and, fmt.Sprintf("(%s %s %s OR %s IS NULL)", k.col, op, arg(p.cursor[i], k.typ), k.col))
			ors = append(ors, "("+strings.Join(and, " AND ")+")")
		}
		if len(ors) == 0 {
			ors = []string{"false"}
		}
		where = append(where, "("+strings.Join(ors, " OR ")+")")
	}
	order := make([]string, len(p.keys))
	for i, k := range p.keys {
		dir := "ASC"
		if k.desc {
			dir = "DESC"
		}
		order[i] = k.col + " " + dir + " NULLS LAST"
	}
	sql := fmt.Sprintf("SELECT %s FROM %s WHERE %s ORDER BY %s LIMIT %d",
		t.selectList, t.table, strings.Join(where, " AND "), strings.Join(order, ", "), in.Limit+1)
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return t.scanRows(rows)
}

// filterWhere is the conditions of a list's or search's filter; arg adds
// a value of a column type as a parameter and returns its placeholder.
func (t *Entity) filterWhere(filter map[string]any, arg func(v any, typ string) string) []string {
	var where []string
	for _, f := range slices.Sorted(maps.Keys(filter)) {
		col, typ := "id", "uuid"
		if f != "id" {
			col, typ = t.cols[f], t.specs[f].Type.ColumnType()
		}
		if v := filter[f]; v == nil {
			where = append(where, col+" IS NULL")
		} else {
			where = append(where, col+" = "+arg(v, typ))
		}
	}
	return where
}

// errAsOfTimeout is the cause of an as-of list's context past AsOfTimeout.
var errAsOfTimeout = errors.New("as-of list timed out")

// asOfChunkEvents is how many events an as-of list reads in one statement
// and folds before it yields: one statement holds the database for well
// under a millisecond, one chunk's fold holds a core for a millisecond or
// two.
const asOfChunkEvents = 250

// asOfYield gives the processor and the database to other work for twice
// as long as the chunk that just ended took (worked), so an as-of list
// works at most about a third of its time. Measured on 2 cores with as-of
// lists running flat out (`make bench`, group asof), another tenant's
// write p95 rose about 4× with chunks of 500 and a pause as long as the
// chunk, and about 2.5× with these; as-of lists take about 3× as long as
// unpaused. It returns early when ctx ends: the next read then fails with
// its cause.
func asOfYield(ctx context.Context, worked time.Duration) {
	runtime.Gosched()
	if worked <= 0 {
		return
	}
	timer := time.NewTimer(2 * worked)
	defer timer.Stop()
	select {
	case <-ctx.Done():
	case <-timer.C:
	}
}

// asOfStream is one stream's fold in progress: the state folded from
// versions 1 to folded, and the events read but not folded yet.
type asOfStream struct {
	state   map[string]any
	folded  int
	pending []eventstore.Event
	inChunk bool // has events in the chunk being read
}

// foldReady folds the pending events that continue the folded versions,
// in version order; all of them, in version order, when rest is set.
func (s *asOfStream) foldReady(t *Entity, rest bool) error {
	if len(s.pending) == 0 {
		return nil
	}
	slices.SortFunc(s.pending, func(a, b eventstore.Event) int { return a.Version - b.Version })
	n := len(s.pending)
	if !rest {
		n = 0
		for n < len(s.pending) && s.pending[n].Version == s.folded+1 {
			s.folded++
			n++
		}
	}
	if n == 0 {
		return nil
	}
	state, err := t.Fold(s.state, s.pending[:n])
	if err != nil {
		return err
	}
	s.state = state
	s.pending = slices.Delete(s.pending, 0, n)
	if len(s.pending) == 0 {
		s.pending = nil // the next chunk's events get a fresh, small array
	}
	return nil
}

// listAsOf folds every stream of the entity in the caller's tenant up to
// in.AsOf and pages the result like listRows. Text orders bytewise here,
// where the read table orders by the database collation.
//
// Its cost grows with the tenant's history of the entity, so it is bounded:
// at most AsOfConcurrency run at once (one more is refused at once) and each
// runs for at most AsOfTimeout (its reads are then cancelled in the
// database); both answer unavailable, never an unbounded wait.
//
// It reads and folds the history in chunks of asOfChunk events, one
// statement per chunk, and pauses between chunks twice as long as the chunk
// took (asOfYield), so a long history never holds a core or a database
// connection for a long stretch while other tenants' requests wait; an
// as-of list therefore takes about three times its work, within
// AsOfTimeout. A stream's events fold in version
// order as they arrive (ids follow versions within a stream); any that do
// not continue the versions already folded wait for the rest, and what is
// still waiting at the end folds in version order, as if the whole history
// had been read first.
func (s *Side) listAsOf(ctx context.Context, u feature.User, t *Entity, in registry.ListInput, p *listPlan) ([]map[string]any, error) {
	if s.asOfSlots != nil {
		select {
		case s.asOfSlots <- struct{}{}:
			defer func() { <-s.asOfSlots }()
		default:
			return nil, kumikotype.NewError(kumikotype.CodeUnavailable, kumikotype.ReasonAsOfBusy, "too many lists with asOf are running; retry later", nil)
		}
	}
	if s.asOfTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, s.asOfTimeout, errAsOfTimeout)
		defer cancel()
	}
	streams := map[uuid.UUID]*asOfStream{}
	var order []uuid.UUID
	var touched []*asOfStream // streams with pending events in this chunk
	foldChunk := func() error {
		for _, s := range touched {
			s.inChunk = false
			if err := s.foldReady(t, false); err != nil {
				return err
			}
		}
		touched = touched[:0]
		return nil
	}
	filter := eventstore.ReadFilter{TenantID: t.Tenant(u), AggregateTypes: []string{t.e.Name()}, PageSize: s.asOfChunk}
	read, chunkStart := 0, time.Now()
	for ev, err := range s.store.ReadAll(ctx, 0, filter) {
		if err != nil {
			if errors.Is(context.Cause(ctx), errAsOfTimeout) {
				return nil, kumikotype.NewError(kumikotype.CodeUnavailable, kumikotype.ReasonAsOfTimeout,
					"the list with asOf took longer than allowed; narrow it or retry later", err)
			}
			return nil, err
		}
		if !ev.CreatedAt.After(in.AsOf) {
			s, ok := streams[ev.AggregateID]
			if !ok {
				s = &asOfStream{}
				streams[ev.AggregateID] = s
				order = append(order, ev.AggregateID)
			}
			if !s.inChunk {
				s.inChunk = true
				touched = append(touched, s)
			}
			s.pending = append(s.pending, ev)
		}
		if read++; read%s.asOfChunk == 0 {
			// The chunk's last event, read by a statement that is done:
			// fold the chunk, then yield before the next statement.
			if err := foldChunk(); err != nil {
				return nil, err
			}
			asOfYield(ctx, time.Since(chunkStart))
			chunkStart = time.Now()
		}
	}
	var rows []map[string]any
	for _, id := range order {
		s := streams[id]
		if err := s.foldReady(t, true); err != nil {
			return nil, err
		}
		row := s.state
		if row == nil || (row["deletedAt"] != nil && !in.IncludeDeleted) || !matches(row, in.Filter) {
			continue
		}
		rows = append(rows, row)
	}
	cmpRows := func(a, b map[string]any) int {
		for _, k := range p.keys {
			if c := compareValues(a[k.field], b[k.field], k.typ); c != 0 {
				if k.desc && a[k.field] != nil && b[k.field] != nil {
					return -c
				}
				return c
			}
		}
		return 0
	}
	slices.SortFunc(rows, cmpRows)
	if p.cursor != nil {
		cur := map[string]any{}
		for i, k := range p.keys {
			cur[k.field] = p.cursor[i]
		}
		i, _ := slices.BinarySearchFunc(rows, cur, cmpRows)
		for i < len(rows) && cmpRows(rows[i], cur) <= 0 {
			i++
		}
		rows = rows[i:]
	}
	if len(rows) > in.Limit+1 {
		rows = rows[:in.Limit+1]
	}
	return rows, nil
}

func matches(row, filter map[string]any) bool {
	for f, want := range filter {
		if compareValues(row[f], want, "") != 0 || (row[f] == nil) != (want == nil) {
			return false
		}
	}
	return true
}

// compareValues orders JSON-native values of one column, nulls last.
func compareValues(a, b any, typ string) int {
	switch {
	case a == nil && b == nil:
		return 0
	case a == nil:
		return 1
	case b == nil:
		return -1
	}
	switch x := a.(type) {
	case float64:
		y, _ := b.(float64)
		return cmp.Compare(x, y)
	case bool:
		y, _ := b.(bool)
		return cmp.Compare(boolInt(x), boolInt(y))
	case string:
		y, _ := b.(string)
		if typ == "timestamptz" {
			tx, errX := time.Parse(time.RFC3339Nano, x)
			ty, errY := time.Parse(time.RFC3339Nano, y)
			if errX == nil && errY == nil {
				return tx.Compare(ty)
			}
		}
		return strings.Compare(x, y)
	}
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return strings.Compare(string(ja), string(jb))
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

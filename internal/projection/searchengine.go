package projection

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/kumiko-go/kumiko/consumer"
	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/kumikotype"
	"github.com/kumiko-go/kumiko/registry"
	"github.com/kumiko-go/kumiko/search"
)

// An entity's search declared with feature.SearchEngine runs on a
// search.Engine: the consumer "search.<entity>" puts each row its events
// change into the engine (or deletes it there), and the query asks the
// engine for ids and reads their rows from the read table.

// SearchConsumerPrefix starts the names of the consumers that feed search
// engines: "search.<entity>".
const SearchConsumerPrefix = "search."

// engineIndex is the index an entity's search keeps in its engine: the
// searchable fields, and every field (and id) to filter by.
func engineIndex(t *Entity, s registry.Search) search.Index {
	return search.Index{Name: t.e.Name(), Fields: s.Fields, Config: s.Config, Filters: append([]string{"id"}, t.fields...)}
}

// ensureEngines makes sure every engine holds its searches' indexes, after
// the read tables are there; an index that is new or changed is filled
// again from the beginning of the log by resetting its consumer (not yet
// registered on a first start: it starts from the beginning anyway).
func (s *Side) ensureEngines(ctx context.Context) error {
	for _, e := range s.reg.Entities() {
		t := s.entities[e.Name()]
		if t.search == nil || t.search.engine == nil {
			continue
		}
		fresh, err := t.search.engine.Ensure(ctx, t.search.index)
		if err != nil {
			return fmt.Errorf("search of %s: engine %s: %w", e.Name(), t.search.engineName, err)
		}
		if !fresh {
			continue
		}
		name := SearchConsumerPrefix + e.Name()
		_, err = s.consumers.Reset(ctx, name, consumer.ResetOptions{Actor: "kumiko", Detail: map[string]any{"why": "search index created or changed"}})
		if err != nil && !errors.Is(err, consumer.ErrNotFound) {
			return fmt.Errorf("search of %s: the index in engine %s is new and empty, and its consumer could not start again from the beginning "+
				"(run: consumer reset %s --to beginning): %w", e.Name(), t.search.engineName, name, err)
		}
	}
	return nil
}

// SearchConsumers returns the consumers that feed the search engines: one
// per entity whose search runs on one, delivering the entity's CRUD events
// and the forgets of data subjects.
func (s *Side) SearchConsumers() []consumer.Consumer {
	var out []consumer.Consumer
	for _, e := range s.reg.Entities() {
		t := s.entities[e.Name()]
		if t.search == nil || t.search.engine == nil {
			continue
		}
		types := []string{feature.SubjectForgottenEvent}
		for _, v := range e.Verbs() {
			if v.IsWrite() {
				types = append(types, v.EventType(e.Name()))
			}
		}
		out = append(out, consumer.Consumer{
			Name:  SearchConsumerPrefix + e.Name(),
			Types: types,
			Handle: func(ctx context.Context, tx pgx.Tx, ev eventstore.Event) error {
				ids := []uuid.UUID{ev.AggregateID}
				if ev.Type == feature.SubjectForgottenEvent {
					var p feature.SubjectForgotten
					if err := json.Unmarshal(ev.Payload, &p); err != nil {
						return fmt.Errorf("%s: %w", ev.Type, err)
					}
					var err error
					if ids, err = t.subjectIDs(ctx, tx, ev.TenantID, p.Subject); err != nil {
						return err
					}
				}
				return t.putRows(ctx, tx, ev.TenantID, ids)
			},
		})
	}
	return out
}

// putRows puts the rows ids of tenant into the entity's engine as they
// are in tx, and deletes there those that are gone (or soft-deleted).
func (t *Entity) putRows(ctx context.Context, tx pgx.Tx, tenant uuid.UUID, ids []uuid.UUID) error {
	if len(ids) == 0 {
		return nil
	}
	rows, err := t.rowsByID(ctx, tx, tenant, ids)
	if err != nil {
		return err
	}
	p := t.search
	var docs []search.Document
	var gone []string
	for _, id := range ids {
		row, ok := rows[id]
		if !ok {
			gone = append(gone, id.String())
			continue
		}
		doc := search.Document{Tenant: tenant, ID: id.String(), Text: map[string]string{}, Values: map[string]string{"id": id.String()}}
		for name := range p.index.Fields {
			if v, ok := row[name].(string); ok {
				doc.Text[name] = v
			}
		}
		for _, f := range t.fields {
			if v, ok := toText(row[f], t.specs[f].Type.ColumnType()).(string); ok {
				doc.Values[f] = v
			}
		}
		docs = append(docs, doc)
	}
	if len(docs) > 0 {
		if err := p.engine.Put(ctx, p.index.Name, docs...); err != nil {
			return fmt.Errorf("search engine %s: put: %w", p.engineName, err)
		}
	}
	if len(gone) > 0 {
		if err := p.engine.Delete(ctx, p.index.Name, tenant, gone...); err != nil {
			return fmt.Errorf("search engine %s: delete: %w", p.engineName, err)
		}
	}
	return nil
}

// rowsByID reads the live rows ids of tenant, by id.
func (t *Entity) rowsByID(ctx context.Context, db interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, tenant uuid.UUID, ids []uuid.UUID) (map[uuid.UUID]map[string]any, error) {
	keys := make([][16]byte, len(ids))
	for i, id := range ids {
		keys[i] = id
	}
	rows, err := db.Query(ctx, fmt.Sprintf("SELECT %s FROM %s WHERE tenant_id = $1 AND id = ANY($2)%s", t.selectList, t.table, t.liveOnly()),
		[16]byte(tenant), keys)
	if err != nil {
		return nil, err
	}
	list, err := t.scanRows(rows)
	if err != nil {
		return nil, err
	}
	out := make(map[uuid.UUID]map[string]any, len(list))
	for _, row := range list {
		id, _ := uuid.Parse(row["id"].(string))
		out[id] = row
	}
	return out, nil
}

// searchEngine answers an entity's search on its engine for u: the engine
// finds the ids among the fields u may read, the rows come from the read
// table (a row deleted since the engine last heard of it is left out).
func (s *Side) searchEngine(ctx context.Context, u feature.User, t *Entity, in registry.SearchInput, readable []string) (SearchResult, error) {
	p := t.search
	q := search.Query{Tenant: t.Tenant(u), Text: in.Q, Fields: readable, Filter: map[string]string{}, Limit: in.Limit, Cursor: in.Cursor}
	for f, v := range in.Filter {
		typ := "uuid"
		if f != "id" {
			typ = t.specs[f].Type.ColumnType()
		}
		text, ok := toText(v, typ).(string)
		if !ok {
			return SearchResult{}, kumikotype.NewError(kumikotype.CodeValidation, "",
				"a search on a search engine cannot filter by null", fmt.Errorf("filter %s: null", f)).With("field", f)
		}
		q.Filter[f] = text
	}
	page, err := p.engine.Search(ctx, p.index.Name, q)
	if errors.Is(err, search.ErrInvalidCursor) {
		return SearchResult{}, cursorError(err)
	}
	if err != nil {
		return SearchResult{}, fmt.Errorf("search engine %s: %w", p.engineName, err)
	}
	ids := make([]uuid.UUID, 0, len(page.Hits))
	for _, h := range page.Hits {
		if id, err := uuid.Parse(h.ID); err == nil {
			ids = append(ids, id)
		}
	}
	rows, err := t.rowsByID(ctx, s.pool, t.Tenant(u), ids)
	if err != nil {
		return SearchResult{}, err
	}
	res := SearchResult{Hits: []SearchHit{}, NextCursor: page.NextCursor}
	for _, h := range page.Hits {
		id, _ := uuid.Parse(h.ID)
		row, ok := rows[id]
		if !ok {
			continue
		}
		hit := SearchHit{Row: t.Visible(row, u), Rank: h.Rank, Highlights: map[string]string{}}
		for _, f := range readable {
			if v, ok := h.Highlights[f]; ok {
				hit.Highlights[f] = v
			}
		}
		res.Hits = append(res.Hits, hit)
	}
	return res, nil
}

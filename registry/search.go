package registry

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/internal/spec"
	"github.com/kumiko-go/kumiko/registry/internal/codec"
)

// Search is the full-text search of an entity or of a projection's table
// (feature.Registrar.Search).
type Search struct {
	// Fields maps each searchable field to its weight, 'A' (most) to 'D':
	// an entity's fields by their JSON names, a projection table's text
	// columns by their column names.
	Fields map[string]byte
	// Config is the PostgreSQL text search configuration.
	Config string
	// Engine names the search engine the search runs on (see
	// feature.SearchEngine); "" = in the read table.
	Engine string
}

func (s *Search) copy() (Search, bool) {
	if s == nil {
		return Search{}, false
	}
	return Search{Fields: maps.Clone(s.Fields), Config: s.Config, Engine: s.Engine}, true
}

// Search returns the entity's full-text search; false when it has none.
func (e *Entity) Search() (Search, bool) { return e.search.copy() }

// Search returns the full-text search of the projection's table; false
// when it has none.
func (p *Projection) Search() (Search, bool) { return p.search.copy() }

// Search returns the full-text search of the projection's table; false
// when it has none.
func (m *MSP) Search() (Search, bool) { return m.search.copy() }

// search compiles a Search: run after the CRUD handlers, whose list's
// access rule an entity's search query takes, and after the projections,
// whose tables a projection's searches.
func (b *builder) search(feat string, def spec.Search) {
	item := fmt.Sprintf("search %q", def.Entity)
	entityOwner, entity := b.entityOwner[def.Entity]
	projOwner, projection := b.projOwner[def.Entity]
	switch {
	case entity && projection:
		b.fail(feat, item, RuleSearch, "%q names both an entity and a projection; Search cannot tell which to search (rename one)", def.Entity)
	case entity && entityOwner != feat:
		b.fail(feat, item, RuleSearch, "entity %q belongs to feature %q; only its feature can declare Search", def.Entity, entityOwner)
	case entity:
		b.entitySearch(feat, item, def)
	case projection && projOwner != feat:
		b.fail(feat, item, RuleSearch, "projection %q belongs to feature %q; only its feature can declare Search", def.Entity, projOwner)
	case projection:
		b.tableSearch(feat, item, def)
	default:
		b.fail(feat, item, RuleSearch, "Search for %q, which is neither a declared entity nor a projection", def.Entity)
	}
}

// entitySearch compiles an entity's Search.
func (b *builder) entitySearch(feat, item string, def spec.Search) {
	e := b.reg.entities[def.Entity]
	if e.search != nil {
		b.fail(feat, item, RuleSearch, "Search is declared twice for the entity")
		return
	}
	var fallback feature.Rule
	if list, ok := b.reg.handlers[VerbList.HandlerName(def.Entity)]; ok && list.Feature == feat {
		fallback = list.Access
	}
	access, ok := b.searchAccess(feat, item, def, fallback,
		"Search needs Crud for the entity with a list access rule, which the search query takes, or feature.SearchAccess")
	good := b.searchSettings(feat, item, &def, func(name string) string {
		switch fs, ok := e.def.Fields[name]; {
		case !ok:
			return fmt.Sprintf("field %q is not a field of entity %q", name, def.Entity)
		case fs.Type != spec.TypeText:
			return fmt.Sprintf("field %q is a %s field; only text fields are searchable", name, fs.Type)
		}
		return ""
	})
	name := VerbSearch.HandlerName(def.Entity)
	if !ok || !good || !b.claimHandler(feat, fmt.Sprintf("handler %q", name), name) {
		return
	}
	e.search = &Search{Fields: maps.Clone(def.Fields), Config: def.Config, Engine: def.Engine}
	p := b.crudCodec(feat, item, name, e, codec.Search)
	b.reg.handlers[name] = Handler{Name: name, Kind: KindQuery, Feature: feat, Access: access, Input: p.Type, Verb: VerbSearch, Entity: def.Entity}
}

// tableSearch compiles the Search of an inline projection's or a
// multi-stream projection's table.
func (b *builder) tableSearch(feat, item string, def spec.Search) {
	var (
		table  feature.TableDef
		read   feature.Rule
		target **Search
	)
	if p, ok := b.reg.projections[def.Entity]; ok {
		table, read, target = p.table, p.read, &p.search
	} else if m, ok := b.reg.msps[def.Entity]; ok {
		if m.m.Table == nil {
			b.fail(feat, item, RuleSearch, "multi-stream projection %q has no table to search", def.Entity)
			return
		}
		table, read, target = *m.m.Table, m.m.Read, &m.search
	} else {
		return // the projection failed to compile: its own errors say why
	}
	if *target != nil {
		b.fail(feat, item, RuleSearch, "Search is declared twice for the projection")
		return
	}
	good := true
	if c, ok := table.Column("tenant_id"); !ok || !strings.EqualFold(c.Type, "uuid") {
		b.fail(feat, item, RuleSearch, "table %q needs a tenant_id uuid column: a search finds the rows of the caller's tenant", table.Name)
		good = false
	}
	if len(table.PrimaryKey) == 0 {
		b.fail(feat, item, RuleSearch, "table %q needs a primary key: it orders the hits of equal rank and the pages", table.Name)
		good = false
	}
	for _, c := range table.Columns {
		if strings.HasPrefix(c.Name, "kumiko_") {
			b.fail(feat, item, RuleSearch, "column %q uses the framework's prefix kumiko_, which names the search's own columns of a searchable table", c.Name)
			good = false
		}
	}
	if def.Engine != "" {
		b.fail(feat, item, RuleSearch, "SearchEngine(%q): a projection's search runs in its table; search engines take entities' searches", def.Engine)
		good = false
	}
	access, ok := b.searchAccess(feat, item, def, read,
		"a projection's search query needs an access rule: set the projection's Read rule or pass feature.SearchAccess")
	good = b.searchSettings(feat, item, &def, func(name string) string {
		switch c, ok := table.Column(name); {
		case !ok:
			return fmt.Sprintf("field %q is not a column of table %q", name, table.Name)
		case !strings.EqualFold(strings.TrimSpace(c.Type), "text"):
			return fmt.Sprintf("column %q has type %s; only text columns are searchable", name, c.Type)
		}
		return ""
	}) && good
	name := VerbSearch.HandlerName(def.Entity)
	if !ok || !good || !b.claimHandler(feat, fmt.Sprintf("handler %q", name), name) {
		return
	}
	*target = &Search{Fields: maps.Clone(def.Fields), Config: def.Config}
	p, err := codec.CrudPayload(tableCodec(def.Entity, table), codec.Search)
	if err != nil {
		b.fail(feat, item, RuleInternal, "schema of %q: %v", name, err)
	}
	b.reg.payloads[name] = p
	b.reg.handlers[name] = Handler{Name: name, Kind: KindQuery, Feature: feat, Access: access, Input: p.Type, Verb: VerbSearch, Projection: def.Entity}
}

// searchAccess resolves the access rule of a search query: SearchAccess's,
// else fallback; without either it fails with missing.
func (b *builder) searchAccess(feat, item string, def spec.Search, fallback feature.Rule, missing string) (feature.Rule, bool) {
	rule := fallback
	if r, ok := def.Access.(feature.Rule); ok {
		rule = r
	}
	switch {
	case rule.IsZero():
		b.fail(feat, item, RuleSearch, "%s", missing)
		return rule, false
	case rule.Problem() != "":
		b.fail(feat, item, RuleAccess, "SearchAccess: %s", rule.Problem())
		return rule, false
	case rule.IsDeny():
		b.fail(feat, item, RuleSearch, "the search query's rule is Deny(), which allows nobody: pass feature.SearchAccess with a rule that allows its callers")
		return rule, false
	}
	return rule, true
}

// searchSettings checks a Search's fields — each one refuse does not
// refuse, with a weight from A to D, at least one — and its text search
// configuration, which it defaults to simple.
func (b *builder) searchSettings(feat, item string, def *spec.Search, refuse func(name string) string) bool {
	good := len(def.Fields) > 0
	if !good {
		b.fail(feat, item, RuleSearch, "Search needs at least one field")
	}
	for _, name := range slices.Sorted(maps.Keys(def.Fields)) {
		if msg := refuse(name); msg != "" {
			b.fail(feat, item, RuleSearch, "%s", msg)
			good = false
		} else if w := def.Fields[name]; w < 'A' || w > 'D' {
			b.fail(feat, item, RuleSearch, "field %q has weight %q; use feature.WeightA to WeightD", name, rune(w))
			good = false
		}
	}
	if def.Config == "" {
		def.Config = "simple"
	}
	if !sqlIdentRe.MatchString(def.Config) || len(def.Config) > maxIdent {
		b.fail(feat, item, RuleSearch, "SearchConfig(%q) is not the name of a text search configuration", def.Config)
		good = false
	}
	return good
}

// tableCodec is what decoding a search of table needs: its columns but
// tenant_id by their JSON names, each with the field type its filter
// values take (spec.FilterType).
func tableCodec(name string, table feature.TableDef) *codec.Entity {
	e := &codec.Entity{Name: name, Fields: map[string]spec.Field{}, Table: true}
	for _, c := range table.Columns {
		if c.Name == "tenant_id" {
			continue
		}
		field := spec.JSONName(c.Name)
		e.Fields[field] = spec.Field{Type: spec.FilterType(c.Type)}
		e.Names = append(e.Names, field)
	}
	slices.Sort(e.Names)
	return e
}

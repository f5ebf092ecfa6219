package registry

import (
	"fmt"
	"maps"
	"slices"

	"github.com/kumiko-go/kumiko/internal/spec"
	"github.com/kumiko-go/kumiko/registry/internal/codec"
)

// Search is an entity's full-text search (feature.Registrar.Search).
type Search struct {
	// Fields maps each searchable field (JSON name) to its weight, 'A'
	// (most) to 'D'.
	Fields map[string]byte
	// Config is the PostgreSQL text search configuration.
	Config string
	// Engine names the search engine the search runs on (see
	// feature.SearchEngine); "" = in the read table.
	Engine string
}

// Search returns the entity's full-text search; false when it has none.
func (e *Entity) Search() (Search, bool) {
	if e.search == nil {
		return Search{}, false
	}
	return Search{Fields: maps.Clone(e.search.Fields), Config: e.search.Config, Engine: e.search.Engine}, true
}

// search compiles an entity's Search: run after the CRUD handlers, whose
// list's access rule the search query takes.
func (b *builder) search(feat string, def spec.Search) {
	item := fmt.Sprintf("search %q", def.Entity)
	owner, ok := b.entityOwner[def.Entity]
	switch {
	case !ok:
		b.fail(feat, item, RuleSearch, "Search for entity %q, which is not declared", def.Entity)
		return
	case owner != feat:
		b.fail(feat, item, RuleSearch, "entity %q belongs to feature %q; only its feature can declare Search", def.Entity, owner)
		return
	}
	e := b.reg.entities[def.Entity]
	if e.search != nil {
		b.fail(feat, item, RuleSearch, "Search is declared twice for the entity")
		return
	}
	list, ok := b.reg.handlers[VerbList.HandlerName(def.Entity)]
	if !ok || list.Feature != feat {
		b.fail(feat, item, RuleSearch, "Search needs Crud for the entity with a list access rule: the search query takes it")
		return
	}
	good := len(def.Fields) > 0
	if !good {
		b.fail(feat, item, RuleSearch, "Search needs at least one field")
	}
	for _, name := range slices.Sorted(maps.Keys(def.Fields)) {
		fs, ok := e.def.Fields[name]
		switch w := def.Fields[name]; {
		case !ok:
			b.fail(feat, item, RuleSearch, "field %q is not a field of entity %q", name, def.Entity)
			good = false
		case fs.Type != spec.TypeText:
			b.fail(feat, item, RuleSearch, "field %q is a %s field; only text fields are searchable", name, fs.Type)
			good = false
		case w < 'A' || w > 'D':
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
	name := VerbSearch.HandlerName(def.Entity)
	if !good || !b.claimHandler(feat, fmt.Sprintf("handler %q", name), name) {
		return
	}
	e.search = &Search{Fields: maps.Clone(def.Fields), Config: def.Config, Engine: def.Engine}
	p := b.crudCodec(feat, item, name, e, codec.Search)
	b.reg.handlers[name] = Handler{Name: name, Kind: KindQuery, Feature: feat, Access: list.Access, Input: p.Type, Verb: VerbSearch, Entity: def.Entity}
}

package registry_test

import (
	"encoding/json"
	"maps"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/registry"
)

func TestSearchCompilesToAQuery(t *testing.T) {
	t.Parallel()
	reg, err := registry.Build(feature.Define("desk", func(r *feature.Registrar) {
		r.Entity("ticket", feature.Fields{"title": feature.Text(), "notes": feature.Text()})
		r.Crud("ticket", feature.Access{Write: feature.AnyUser(), Read: feature.Roles("Agent"), List: feature.Roles("Lead")})
		r.Search("ticket", feature.SearchFields{"title": feature.WeightA, "notes": feature.WeightC}, feature.SearchConfig("german"))
	}))
	require.NoError(t, err)
	h, ok := reg.Handler("ticket.search")
	require.True(t, ok)
	require.Equal(t, registry.KindQuery, h.Kind)
	require.Equal(t, registry.VerbSearch, h.Verb)
	require.Equal(t, feature.Roles("Lead"), h.Access, "the list's rule")
	e, _ := reg.Entity("ticket")
	s, ok := e.Search()
	require.True(t, ok)
	require.Equal(t, registry.Search{Fields: map[string]byte{"title": 'A', "notes": 'C'}, Config: "german"}, s)
	s.Fields["title"] = 'D'
	s, _ = e.Search()
	require.Equal(t, byte('A'), s.Fields["title"], "Search returns a copy")

	in, err := reg.DecodePayload("ticket.search", []byte(`{"q":"inv","limit":5,"filter":{"title":"x"}}`))
	require.NoError(t, err)
	require.Equal(t, registry.SearchInput{Q: "inv", Limit: 5, Filter: map[string]any{"title": "x"}}, in)
	require.NotNil(t, reg.ResultSchema("ticket.search"))
	for payload, path := range map[string]string{
		`{}`:                   "q",
		`{"q":"  ?! "}`:        "q",
		`{"q":7}`:              "q",
		`{"q":"a","limit":0}`:  "limit",
		`{"q":"a","sort":[]}`:  "sort",
		`{"q":"a","filter":1}`: "filter",
	} {
		_, err := reg.DecodePayload("ticket.search", []byte(payload))
		var v *registry.ValidationError
		require.ErrorAs(t, err, &v, payload)
		require.Equal(t, path, v.Fields[0].Path, payload)
	}
}

func TestSearchDeclarationErrors(t *testing.T) {
	t.Parallel()
	const it = `search "ticket"`
	entity := func(r *feature.Registrar) {
		r.Entity("ticket", feature.Fields{"title": feature.Text(), "count": feature.Number()})
	}
	crud := func(r *feature.Registrar) {
		r.Crud("ticket", feature.Access{Write: feature.AnyUser(), Read: feature.AnyUser()})
	}
	cases := []struct {
		name string
		fn   func(r *feature.Registrar)
		msg  string
	}{
		{"unknown entity", func(r *feature.Registrar) { r.Search("ticket", feature.SearchFields{"title": feature.WeightA}) },
			`Search for "ticket", which is neither a declared entity nor a projection`},
		{"without Crud", func(r *feature.Registrar) {
			entity(r)
			r.Search("ticket", feature.SearchFields{"title": feature.WeightA})
		}, "Search needs Crud for the entity with a list access rule, which the search query takes, or feature.SearchAccess"},
		{"with a Deny rule", func(r *feature.Registrar) {
			entity(r)
			crud(r)
			r.Search("ticket", feature.SearchFields{"title": feature.WeightA}, feature.SearchAccess(feature.Deny()))
		}, "the search query's rule is Deny(), which allows nobody"},
		{"no fields", func(r *feature.Registrar) { entity(r); crud(r); r.Search("ticket", nil) }, "Search needs at least one field"},
		{"unknown field", func(r *feature.Registrar) {
			entity(r)
			crud(r)
			r.Search("ticket", feature.SearchFields{"body": feature.WeightA})
		}, `field "body" is not a field of entity "ticket"`},
		{"not text", func(r *feature.Registrar) {
			entity(r)
			crud(r)
			r.Search("ticket", feature.SearchFields{"count": feature.WeightA})
		}, `field "count" is a number field; only text fields are searchable`},
		{"bad weight", func(r *feature.Registrar) {
			entity(r)
			crud(r)
			r.Search("ticket", feature.SearchFields{"title": 'E'})
		}, `field "title" has weight 'E'`},
		{"bad config", func(r *feature.Registrar) {
			entity(r)
			crud(r)
			r.Search("ticket", feature.SearchFields{"title": feature.WeightA}, feature.SearchConfig("english; DROP"))
		}, `SearchConfig("english; DROP") is not the name of a text search configuration`},
		{"twice", func(r *feature.Registrar) {
			entity(r)
			crud(r)
			r.Search("ticket", feature.SearchFields{"title": feature.WeightA})
			r.Search("ticket", feature.SearchFields{"title": feature.WeightB})
		}, "Search is declared twice for the entity"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			_, err := registry.Build(feature.Define("desk", c.fn))
			requireBootErrors(t, err, want{"desk", it, registry.RuleSearch, c.msg})
		})
	}
	_, err := registry.Build(feature.Define("desk", func(r *feature.Registrar) {
		entity(r)
		crud(r)
		r.Search("ticket", feature.SearchFields{"title": feature.WeightA}, feature.SearchConfig(""))
	}))
	requireBootErrors(t, err, want{"desk", it, registry.RuleDefinition, "SearchConfig needs a configuration name"})
}

// SearchAccess replaces an entity list's rule, and makes an entity without
// a list searchable.
func TestSearchAccessOfAnEntity(t *testing.T) {
	t.Parallel()
	reg, err := registry.Build(feature.Define("desk", func(r *feature.Registrar) {
		r.Entity("ticket", feature.Fields{"title": feature.Text()})
		r.Crud("ticket", feature.Access{Write: feature.AnyUser(), Read: feature.AnyUser()})
		r.Search("ticket", feature.SearchFields{"title": feature.WeightA}, feature.SearchAccess(feature.Roles("Agent")))
		r.Entity("note", feature.Fields{"body": feature.Text()})
		r.Crud("note", feature.Access{Write: feature.AnyUser(), Read: feature.Deny()})
		r.Search("note", feature.SearchFields{"body": feature.WeightA}, feature.SearchAccess(feature.AnyUser()))
	}))
	require.NoError(t, err)
	h, _ := reg.Handler("ticket.search")
	require.Equal(t, feature.Roles("Agent"), h.Access)
	h, _ = reg.Handler("note.search")
	require.Equal(t, feature.AnyUser(), h.Access)
	_, err = registry.Build(feature.Define("desk", func(r *feature.Registrar) {
		r.Entity("ticket", feature.Fields{"title": feature.Text()})
		r.Search("ticket", feature.SearchFields{"title": feature.WeightA}, feature.SearchAccess(feature.Rule{}))
	}))
	requireBootErrors(t, err, want{"desk", `search "ticket"`, registry.RuleDefinition, "SearchAccess needs a rule"})
	_, err = registry.Build(feature.Define("desk", func(r *feature.Registrar) {
		r.Entity("ticket", feature.Fields{"title": feature.Text()})
		r.Search("ticket", feature.SearchFields{"title": feature.WeightA}, feature.SearchAccess(feature.Roles()))
	}))
	requireBootErrors(t, err, want{"desk", `search "ticket"`, registry.RuleAccess, "SearchAccess: Roles() without role names"})
}

// board is a searchable table: its text columns, a tenant and a key.
func board(name string) feature.TableDef {
	return feature.TableDef{Name: name, Columns: []feature.Column{
		{Name: "tenant_id", Type: "uuid", NotNull: true},
		{Name: "ticket_id", Type: "uuid", NotNull: true},
		{Name: "title", Type: "text"},
		{Name: "secret_note", Type: "TEXT", ReadRoles: []string{"Lead"}},
		{Name: "votes", Type: "integer"},
		{Name: "opened_at", Type: "timestamptz"},
		{Name: "labels", Type: "text[]"},
	}, PrimaryKey: []string{"ticket_id"}}
}

// The search of an inline projection's table and of a multi-stream
// projection's compile to queries: by column name, with the projection's
// Read rule or SearchAccess's, filtering by the columns' JSON names.
func TestSearchOfAProjectionCompiles(t *testing.T) {
	t.Parallel()
	reg, err := registry.Build(feature.Define("desk", func(r *feature.Registrar) {
		r.Entity("ticket", feature.Fields{"title": feature.Text()})
		r.Crud("ticket", feature.Access{Write: feature.AnyUser(), Read: feature.AnyUser()})
		r.Projection("ticket_board", feature.InlineProjection{Source: "ticket", Table: board("ticket_board"), Read: feature.AnyUser(),
			Apply: map[string]feature.ProjectionApplyFunc{"ticket.created": nopProject}})
		r.Search("ticket_board", feature.SearchFields{"title": feature.WeightA, "secret_note": feature.WeightB}, feature.SearchConfig("english"))
		r.MultiStreamProjection(feature.MultiStreamProjection{Name: "desk.wall", Table: new(board("wall")),
			Apply: map[string]feature.ApplyFunc{"ticket.created": nopApply}})
		r.Search("desk.wall", feature.SearchFields{"title": feature.WeightA}, feature.SearchAccess(feature.Roles("Lead")))
	}))
	require.NoError(t, err)
	h, ok := reg.Handler("ticket_board.search")
	require.True(t, ok)
	require.Equal(t, registry.Handler{Name: "ticket_board.search", Kind: registry.KindQuery, Feature: "desk", Access: feature.AnyUser(),
		Input: h.Input, Verb: registry.VerbSearch, Projection: "ticket_board"}, h, "the projection's Read rule")
	p, _ := reg.Projection("ticket_board")
	s, ok := p.Search()
	require.True(t, ok)
	require.Equal(t, registry.Search{Fields: map[string]byte{"title": 'A', "secret_note": 'B'}, Config: "english"}, s)
	h, _ = reg.Handler("desk.wall.search")
	require.Equal(t, feature.Roles("Lead"), h.Access)
	require.Equal(t, "desk.wall", h.Projection)
	m, _ := reg.MSP("desk.wall")
	s, ok = m.Search()
	require.True(t, ok)
	require.Equal(t, "simple", s.Config)

	in, err := reg.DecodePayload("ticket_board.search",
		[]byte(`{"q":"inv","filter":{"ticketId":"0190A000-0000-7000-8000-000000000001","votes":3,"openedAt":null,"secretNote":"x"}}`))
	require.NoError(t, err)
	require.Equal(t, registry.SearchInput{Q: "inv", Limit: 50, Filter: map[string]any{
		"ticketId": "0190a000-0000-7000-8000-000000000001", "votes": float64(3), "openedAt": nil, "secretNote": "x"}}, in)
	for payload, msg := range map[string]string{
		`{"q":"a","filter":{"id":"0190a000-0000-7000-8000-000000000001"}}`:        "is not a column of ticket_board",
		`{"q":"a","filter":{"tenantId":"0190a000-0000-7000-8000-000000000001"}}`:  "is not a column of ticket_board",
		`{"q":"a","filter":{"ticket_id":"0190a000-0000-7000-8000-000000000001"}}`: "is not a column of ticket_board",
		`{"q":"a","filter":{"labels":["x"]}}`:                                     "is a column of a type a filter cannot compare",
		`{"q":"a","filter":{"votes":"many"}}`:                                     "must be a number",
		`{"q":"a","filter":{"ticketId":"no"}}`:                                    "must be a UUID",
	} {
		_, err := reg.DecodePayload("ticket_board.search", []byte(payload))
		var v *registry.ValidationError
		require.ErrorAs(t, err, &v, payload)
		require.Contains(t, v.Fields[0].Message, msg, payload)
	}

	var schema struct {
		Properties struct {
			Hits struct {
				Items struct {
					Properties struct {
						Row struct {
							Properties map[string]any `json:"properties"`
						} `json:"row"`
					} `json:"properties"`
				} `json:"items"`
			} `json:"hits"`
		} `json:"properties"`
	}
	require.NoError(t, json.Unmarshal(reg.ResultSchema("ticket_board.search"), &schema))
	row := schema.Properties.Hits.Items.Properties.Row.Properties
	require.ElementsMatch(t, []string{"ticketId", "title", "secretNote", "votes", "openedAt", "labels"}, slices.Collect(maps.Keys(row)),
		"a hit's row is the table's columns but tenant_id")
	var input struct {
		Properties struct {
			Filter struct {
				Properties map[string]any `json:"properties"`
			} `json:"filter"`
		} `json:"properties"`
	}
	require.NoError(t, json.Unmarshal(reg.Schema("ticket_board.search"), &input))
	require.ElementsMatch(t, []string{"ticketId", "title", "secretNote", "votes", "openedAt"}, slices.Collect(maps.Keys(input.Properties.Filter.Properties)),
		"the filter takes the columns it can compare")
}

func TestSearchOfAProjectionDeclarationErrors(t *testing.T) {
	t.Parallel()
	entity := func(r *feature.Registrar) {
		r.Entity("ticket", feature.Fields{"title": feature.Text()})
		r.Crud("ticket", feature.Access{Write: feature.AnyUser(), Read: feature.AnyUser()})
	}
	inline := func(r *feature.Registrar, read feature.Rule, edit func(*feature.TableDef)) {
		table := board("ticket_board")
		if edit != nil {
			edit(&table)
		}
		r.Projection("ticket_board", feature.InlineProjection{Source: "ticket", Table: table, Read: read,
			Apply: map[string]feature.ProjectionApplyFunc{"ticket.created": nopProject}})
	}
	const it = `search "ticket_board"`
	cases := []struct {
		name string
		fn   func(r *feature.Registrar)
		item string
		rule string
		msg  string
	}{
		{"no access rule", func(r *feature.Registrar) {
			entity(r)
			inline(r, feature.Rule{}, nil)
			r.Search("ticket_board", feature.SearchFields{"title": feature.WeightA})
		}, it, registry.RuleSearch, "a projection's search query needs an access rule: set the projection's Read rule or pass feature.SearchAccess"},
		{"a Deny read rule", func(r *feature.Registrar) {
			entity(r)
			inline(r, feature.Deny(), nil)
			r.Search("ticket_board", feature.SearchFields{"title": feature.WeightA})
		}, it, registry.RuleSearch, "Deny()"},
		{"not a column", func(r *feature.Registrar) {
			entity(r)
			inline(r, feature.AnyUser(), nil)
			r.Search("ticket_board", feature.SearchFields{"body": feature.WeightA})
		}, it, registry.RuleSearch, `field "body" is not a column of table "ticket_board"`},
		{"a JSON name", func(r *feature.Registrar) {
			entity(r)
			inline(r, feature.AnyUser(), nil)
			r.Search("ticket_board", feature.SearchFields{"secretNote": feature.WeightA})
		}, it, registry.RuleSearch, `field "secretNote" is not a column of table "ticket_board"`},
		{"not text", func(r *feature.Registrar) {
			entity(r)
			inline(r, feature.AnyUser(), nil)
			r.Search("ticket_board", feature.SearchFields{"labels": feature.WeightA})
		}, it, registry.RuleSearch, `column "labels" has type text[]; only text columns are searchable`},
		{"no primary key", func(r *feature.Registrar) {
			entity(r)
			inline(r, feature.AnyUser(), func(t *feature.TableDef) { t.PrimaryKey = nil })
			r.Search("ticket_board", feature.SearchFields{"title": feature.WeightA})
		}, it, registry.RuleSearch, `table "ticket_board" needs a primary key`},
		{"a column of the framework's prefix", func(r *feature.Registrar) {
			entity(r)
			inline(r, feature.AnyUser(), func(t *feature.TableDef) {
				t.Columns = append(t.Columns, feature.Column{Name: "kumiko_search_x", Type: "text"})
			})
			r.Search("ticket_board", feature.SearchFields{"title": feature.WeightA})
		}, it, registry.RuleSearch, `column "kumiko_search_x" uses the framework's prefix kumiko_`},
		{"twice", func(r *feature.Registrar) {
			entity(r)
			inline(r, feature.AnyUser(), nil)
			r.Search("ticket_board", feature.SearchFields{"title": feature.WeightA})
			r.Search("ticket_board", feature.SearchFields{"title": feature.WeightB})
		}, it, registry.RuleSearch, "Search is declared twice for the projection"},
		{"bad weight", func(r *feature.Registrar) {
			entity(r)
			inline(r, feature.AnyUser(), nil)
			r.Search("ticket_board", feature.SearchFields{"title": 'Z'})
		}, it, registry.RuleSearch, `field "title" has weight 'Z'`},
		{"on an engine", func(r *feature.Registrar) {
			entity(r)
			inline(r, feature.AnyUser(), nil)
			r.Search("ticket_board", feature.SearchFields{"title": feature.WeightA}, feature.SearchEngine("docs"))
		}, it, registry.RuleSearch, `SearchEngine("docs"): a projection's search runs in its table`},
		{"an msp without a tenant", func(r *feature.Registrar) {
			entity(r)
			table := board("wall")
			table.Columns = table.Columns[1:]
			r.MultiStreamProjection(feature.MultiStreamProjection{Name: "wall", Table: &table, Read: feature.AnyUser(),
				Apply: map[string]feature.ApplyFunc{"ticket.created": nopApply}})
			r.Search("wall", feature.SearchFields{"title": feature.WeightA})
		}, `search "wall"`, registry.RuleSearch, `table "wall" needs a tenant_id uuid column`},
		{"an msp without a table", func(r *feature.Registrar) {
			entity(r)
			r.MultiStreamProjection(feature.MultiStreamProjection{Name: "mail",
				Apply: map[string]feature.ApplyFunc{"ticket.created": nopApply}})
			r.Search("mail", feature.SearchFields{"title": feature.WeightA}, feature.SearchAccess(feature.AnyUser()))
		}, `search "mail"`, registry.RuleSearch, `multi-stream projection "mail" has no table to search`},
		{"an entity and a projection of one name", func(r *feature.Registrar) {
			entity(r)
			r.Projection("ticket", feature.InlineProjection{Source: "ticket", Table: board("ticket_board"), Read: feature.AnyUser(),
				Apply: map[string]feature.ProjectionApplyFunc{"ticket.created": nopProject}})
			r.Search("ticket", feature.SearchFields{"title": feature.WeightA})
		}, `search "ticket"`, registry.RuleSearch, `"ticket" names both an entity and a projection`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			_, err := registry.Build(feature.Define("desk", c.fn))
			requireBootErrors(t, err, want{"desk", c.item, c.rule, c.msg})
		})
	}
	_, err := registry.Build(
		feature.Define("desk", func(r *feature.Registrar) {
			entity(r)
			inline(r, feature.AnyUser(), nil)
		}),
		feature.Define("other", func(r *feature.Registrar) {
			r.Search("ticket_board", feature.SearchFields{"title": feature.WeightA})
		}))
	requireBootErrors(t, err, want{"other", it, registry.RuleSearch, `projection "ticket_board" belongs to feature "desk"`})
}

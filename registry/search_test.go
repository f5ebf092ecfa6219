package registry_test

import (
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
			`Search for entity "ticket", which is not declared`},
		{"without Crud", func(r *feature.Registrar) {
			entity(r)
			r.Search("ticket", feature.SearchFields{"title": feature.WeightA})
		}, "Search needs Crud for the entity"},
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

package pipeline_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/kumikotest"
	"github.com/kumiko-go/kumiko/pipeline"
)

// findInput asks lead.find for the titles of the leads matching Q, after
// writing a lead titled Write (when set) in the same command.
type findInput struct {
	Q     string `json:"q"`
	Write string `json:"write"`
}

// finder has leads searchable by title and by notes (support only), and a
// command that searches them as its caller.
var finder = feature.Define("finder", func(r *feature.Registrar) {
	r.Entity("lead", feature.Fields{"title": feature.Text().Required(), "notes": feature.Text().ReadRoles("Support")})
	r.Crud("lead", feature.Access{Write: feature.AnyUser(), Read: feature.AnyUser()})
	r.Search("lead", feature.SearchFields{"title": feature.WeightA, "notes": feature.WeightB})
	r.Command("lead.find", findInput{}, feature.AnyUser(), func(ctx feature.CommandContext, in findInput) (any, error) {
		if in.Write != "" {
			if _, err := ctx.AppendEvent(feature.AppendSpec{AggregateType: "lead", Type: "lead.created",
				Payload: map[string]any{"title": in.Write}}); err != nil {
				return nil, err
			}
		}
		res, err := ctx.Search("lead", feature.SearchRequest{Q: in.Q, Limit: 10})
		if err != nil {
			return nil, err
		}
		titles := []string{}
		for _, h := range res.Hits {
			titles = append(titles, h.Row["title"].(string))
		}
		return titles, nil
	})
})

func TestSearchInACommandRunsAsTheCaller(t *testing.T) {
	t.Parallel()
	app := kumikotest.NewApp(t, []*feature.Feature{finder})
	write(t, app, agent, "lead.create", `{"title":"Printer jam","notes":"toner smudge"}`)
	write(t, app, bob, "lead.create", `{"title":"Toner of another tenant"}`)
	find := func(c pipeline.Caller, payload string) []string {
		t.Helper()
		out, err := app.Executor.Command(ctx, c, req("lead.find", payload))
		require.NoError(t, err, payload)
		return out.([]string)
	}
	require.Equal(t, []string{"Printer jam"}, find(agent, `{"q":"toner"}`), "notes match for support, not the other tenant's title")
	require.Empty(t, find(guest, `{"q":"toner"}`), "a field the caller may not read does not match")
	require.Equal(t, []string{"Printer jam"}, find(guest, `{"q":"printer"}`))
	require.Equal(t, []string{"Printer jam"}, find(agent, `{"q":"printer","write":"Printer on fire"}`),
		"the command's own write is not committed yet")
	require.Equal(t, []string{"Printer on fire"}, find(agent, `{"q":"fire"}`), "and is found once it is")
	_, err := app.Executor.Command(ctx, agent, req("lead.find", `{"q":"!!!"}`))
	c, _ := code(t, err)
	require.Equal(t, pipeline.CodeValidation, c, "bad input is the search's validation_error")
}

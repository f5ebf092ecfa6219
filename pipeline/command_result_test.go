package pipeline_test

import (
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/kumikotest"
)

type widgetSpin struct {
	ID uuid.UUID `json:"id" validate:"required"`
}

type widgetSpun struct{}

// widgets has a command whose result cannot be encoded as JSON.
var widgets = feature.Define("widgets", func(r *feature.Registrar) {
	r.DefineEvent("widget.spun", widgetSpun{})
	feature.HandleCommand(r, "widget.spin", feature.Roles("User"), func(ctx feature.CommandContext, in widgetSpin) (any, error) {
		if _, err := ctx.AppendEvent(feature.AppendSpec{AggregateID: in.ID, AggregateType: "widget", Type: "widget.spun", Payload: widgetSpun{}}); err != nil {
			return nil, err
		}
		return map[string]any{"done": make(chan int)}, nil
	})
})

// A command whose result cannot be encoded fails before it commits: the
// client is never told of a failure for a command that took effect.
func TestCommandResultEncodedBeforeCommit(t *testing.T) {
	t.Parallel()
	app := kumikotest.NewApp(t, []*feature.Feature{widgets})
	_, err := app.Executor.Command(ctx, alice, req("widget.spin", `{"id":"`+uuid.NewString()+`"}`))
	c, _ := code(t, err)
	require.Equal(t, "internal_error", c)
	require.Equal(t, 0, app.Count(t, "SELECT count(*) FROM kumiko_events"))
}

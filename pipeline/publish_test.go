package pipeline_test

import (
	"fmt"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/consumer"
	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/kumikotest"
	"github.com/kumiko-go/kumiko/pipeline"
)

type parcelSent struct {
	Parcel string `json:"parcel" validate:"required"`
	Depot  int    `json:"depot"`
}

type sendParcel struct {
	Parcel string `json:"parcel" validate:"required"`
	Depot  int    `json:"depot"`
	Stream bool   `json:"stream"`
}

// post publishes parcel.sent (keyed by its depot field) and parcel.noted
// (keyed by the stream): from a command that first appends to a parcel
// stream, from one that appends nothing, and from a multi-stream
// projection reacting to parcel.created.
var post = feature.Define("post", func(r *feature.Registrar) {
	r.Entity("parcel", feature.Fields{"label": feature.Text().Required()})
	r.Crud("parcel", feature.Access{Write: feature.AnyUser(), Read: feature.AnyUser()})
	r.IntegrationEvent("parcel.sent", parcelSent{}, feature.MessageKey("depot"))
	r.IntegrationEvent("parcel.noted", parcelSent{})
	feature.HandleCommand(r, "parcel.send", feature.AnyUser(), func(ctx feature.CommandContext, in sendParcel) (any, error) {
		if in.Stream {
			if _, err := ctx.AppendEvent(feature.AppendSpec{AggregateID: uuid.MustParse(in.Parcel), AggregateType: "parcel",
				Type: "parcel.created", Payload: map[string]any{"label": "x"}, ExpectedVersion: feature.AnyVersion}); err != nil {
				return nil, err
			}
		}
		if err := ctx.Publish("parcel.sent", parcelSent{Parcel: in.Parcel, Depot: in.Depot}); err != nil {
			return nil, err
		}
		return nil, ctx.Publish("parcel.noted", parcelSent{Parcel: in.Parcel, Depot: in.Depot})
	})
	r.MultiStreamProjection(feature.MultiStreamProjection{
		Name: "parcel-announcer",
		Apply: map[string]feature.ApplyFunc{
			"parcel.created": func(ctx feature.ApplyContext, e feature.Event) error {
				return ctx.Publish("parcel.noted", parcelSent{Parcel: "from-projection"})
			},
		},
	})
})

// A message's key (kumiko-key): the contract's key field, else the stream
// the transaction appended to, else the stream of the event a projection
// applies; none when there is none.
func TestPublishedMessagesCarryTheirKey(t *testing.T) {
	t.Parallel()
	app := kumikotest.NewApp(t, []*feature.Feature{post})
	key := func(typ, parcel string) string {
		return queryString(t, app, `SELECT coalesce(metadata->'headers'->>$3, '-') FROM kumiko_events
WHERE aggregate_type = $1 AND type = $2 AND payload->>'parcel' = $4`, pipeline.MessageStream, typ, pipeline.MessageKeyHeader, parcel)
	}
	streamed, bare := uuid.New(), uuid.New()
	for _, in := range []string{fmt.Sprintf(`{"parcel":%q,"depot":7,"stream":true}`, streamed), fmt.Sprintf(`{"parcel":%q,"depot":8}`, bare)} {
		_, err := app.Executor.Command(ctx, alice, req("parcel.send", in))
		require.NoError(t, err)
	}
	require.Equal(t, "7", key("parcel.sent", streamed.String()), "the contract's key field")
	require.Equal(t, "8", key("parcel.sent", bare.String()))
	require.Equal(t, "parcel/"+streamed.String(), key("parcel.noted", streamed.String()), "the stream appended to")
	require.Equal(t, "-", key("parcel.noted", bare.String()), "no stream, no key")

	e, err := consumer.New(app.Store, consumer.Config{InstanceID: "p1"}, app.Executor.Consumers()...)
	require.NoError(t, err)
	require.NoError(t, e.Register(ctx))
	kumikotest.CatchUp(t, e, "parcel-announcer")
	require.Equal(t, "parcel/"+streamed.String(), key("parcel.noted", "from-projection"), "the stream of the event applied")
}

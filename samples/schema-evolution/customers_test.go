package schemaevolution_test

import (
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/kumikotest"
	"github.com/kumiko-go/kumiko/pipeline"
	schemaevolution "github.com/kumiko-go/kumiko/samples/schema-evolution"
)

// Moves stored as versions 1 and 2 (appended directly, as an older release
// wrote them) and one made now over HTTP all read as version 3; inspect
// shows both forms.
func TestOldMovesReadAsNew(t *testing.T) {
	t.Parallel()
	srv := kumikotest.NewServer(t, []*feature.Feature{schemaevolution.Feature})
	tenant, id := uuid.New(), uuid.New()
	customer := func(typ string, v int, payload any) kumikotest.Given {
		return kumikotest.Given{Stream: id, AggregateType: "customer", Type: typ, EventVersion: v, Payload: payload}
	}
	srv.Given(t, tenant,
		customer("customer.created", 1, map[string]any{"name": "Ada"}),
		customer("customer.moved", 1, map[string]any{"address": "Main St 1, Berlin"}),
		customer("customer.moved", 2, map[string]any{"street": "Elm St 2", "city": "Hamburg"}))

	clerk := srv.As(t, tenant, "cy", "Clerk")
	kumikotest.Data[any](clerk.Command("customer.move",
		schemaevolution.MoveCustomer{ID: id, Street: "Rue 3", City: "Paris", Country: "FR"}))

	require.Equal(t, []schemaevolution.Move{
		{Version: 2, Address: schemaevolution.CustomerMoved{Street: "Main St 1", City: "Berlin", Country: "DE"}},
		{Version: 3, Address: schemaevolution.CustomerMoved{Street: "Elm St 2", City: "Hamburg", Country: "DE"}},
		{Version: 4, Address: schemaevolution.CustomerMoved{Street: "Rue 3", City: "Paris", Country: "FR"}},
	}, kumikotest.Data[[]schemaevolution.Move](clerk.Query("customer.moves", schemaevolution.MovesQuery{ID: id})))

	timeline := kumikotest.Data[pipeline.Timeline](srv.As(t, tenant, "root", "Admin").Get("/api/inspect/customer/" + id.String()))
	first := timeline.Events[1]
	require.Equal(t, 1, first.StoredEventVersion)
	require.Equal(t, 3, first.EventVersion)
	require.JSONEq(t, `{"address":"Main St 1, Berlin"}`, string(first.RawPayload), "the stored row is never rewritten")
	require.JSONEq(t, `{"street":"Main St 1","city":"Berlin","country":"DE"}`, string(first.Payload))
}

package pipeline_test

import (
	"encoding/json"
	nethttp "net/http"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/kumikotest"
	"github.com/kumiko-go/kumiko/pipeline"
)

// shop has orders whose customer must exist in the writer's tenant and
// whose referrer is a plain reference; customers are soft-deleted.
// order.place appends the created event from a command.
var shop = feature.Define("shop", func(r *feature.Registrar) {
	r.Entity("customer", feature.Fields{"name": feature.Text()}, feature.SoftDelete())
	r.Crud("customer", feature.Access{Write: feature.AnyUser(), Read: feature.AnyUser()})
	r.Entity("order", feature.Fields{
		"customer": feature.Reference("customer").MustExist(),
		"referrer": feature.Reference("customer"),
		"note":     feature.Text(),
	})
	r.Crud("order", feature.Access{Write: feature.AnyUser(), Read: feature.AnyUser()})
	type place struct {
		Customer uuid.UUID `json:"customer"`
	}
	feature.HandleCommand(r, "order.place", feature.AnyUser(), func(ctx feature.CommandContext, in place) (any, error) {
		ref, err := ctx.AppendEvent(feature.AppendSpec{AggregateID: uuid.Must(uuid.NewV7()), Type: "order.created",
			Payload: map[string]any{"customer": in.Customer.String()}})
		return ref.AggregateID, err
	})
})

// TestReferenceMustExist: a MustExist reference is checked on create and
// update, over HTTP, in the write's transaction: a row of the writer's tenant
// passes; a missing id, a soft-deleted row and another tenant's row answer
// the same 422 naming the field, byte for byte but the request id, and
// write nothing; a plain reference accepts any UUID.
func TestReferenceMustExist(t *testing.T) {
	t.Parallel()
	srv := kumikotest.NewServer(t, []*feature.Feature{shop})
	a, b := srv.As(t, tenantA, "alice", "User"), srv.As(t, tenantB, "bob", "User")
	created := func(c *kumikotest.Client, typ string, payload any) map[string]any {
		t.Helper()
		res := c.Write(typ, payload)
		require.Equal(t, nethttp.StatusOK, res.Status, "%s", res.Body)
		return kumikotest.Data[map[string]any](res)
	}
	own := created(a, "customer.create", map[string]any{"name": "own"})["id"].(string)
	gone := created(a, "customer.create", map[string]any{"name": "gone"})
	created(a, "customer.delete", map[string]any{"id": gone["id"]})
	foreign := created(b, "customer.create", map[string]any{"name": "foreign"})["id"].(string)
	missing := uuid.Must(uuid.NewV7()).String()

	order := created(a, "order.create", map[string]any{"customer": own, "referrer": foreign})
	require.Equal(t, own, order["customer"])
	require.Equal(t, foreign, order["referrer"], "a plain reference accepts another tenant's id")
	created(a, "order.create", map[string]any{"referrer": missing})
	placed := a.Command("order.place", map[string]any{"customer": own})
	require.Equal(t, nethttp.StatusOK, placed.Status, "%s", placed.Body)

	// refused asserts the 422 and returns its body without the request id.
	refused := func(res kumikotest.Response) string {
		t.Helper()
		require.Equal(t, nethttp.StatusUnprocessableEntity, res.Status, "%s", res.Body)
		p := res.Problem()
		require.Equal(t, pipeline.CodeUnprocessable, p.Code)
		require.Equal(t, pipeline.ReasonReferenceNotFound, p.Reason)
		require.Equal(t, "customer", p.Details["field"])
		var body map[string]any
		require.NoError(t, json.Unmarshal(res.Body, &body))
		delete(body, "requestId")
		out, err := json.Marshal(body)
		require.NoError(t, err)
		return string(out)
	}
	before := events(t, srv.App)
	want := refused(a.Write("order.create", map[string]any{"customer": missing}))
	for name, id := range map[string]string{"another tenant's": foreign, "a soft-deleted": gone["id"].(string)} {
		require.Equal(t, want, refused(a.Write("order.create", map[string]any{"customer": id})), "create with %s id", name)
		require.Equal(t, want, refused(a.Write("order.update", map[string]any{"id": order["id"], "version": 1,
			"changes": map[string]any{"customer": id}})), "update with %s id", name)
		require.Equal(t, want, refused(a.Command("order.place", map[string]any{"customer": id})), "command with %s id", name)
	}
	require.Equal(t, before, events(t, srv.App), "a refused write appends nothing")

	// An update that leaves the reference alone, or sets it to a row of
	// the tenant, passes.
	upd := created(a, "order.update", map[string]any{"id": order["id"], "version": 1, "changes": map[string]any{"note": "x"}})
	upd = created(a, "order.update", map[string]any{"id": order["id"], "version": upd["version"],
		"changes": map[string]any{"customer": own}})
	require.Equal(t, own, upd["customer"])
}

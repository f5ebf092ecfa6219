package kumiko_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/kumiko"
	"github.com/kumiko-go/kumiko/kumikotest"
	"github.com/kumiko-go/kumiko/pipeline"
)

var members = feature.Define("members", func(r *feature.Registrar) {
	r.Entity("member", feature.Fields{"name": feature.Text().Personal()})
	r.Crud("member", feature.Access{Write: feature.AnyUser(), Read: feature.AnyUser()})
})

func dataKey(t *testing.T) string {
	t.Helper()
	k := make([]byte, 32)
	_, err := rand.Read(k)
	require.NoError(t, err)
	return base64.StdEncoding.EncodeToString(k)
}

// Personal fields need a data key: without one, or with one that does not
// parse, New fails; with another key than the one that wrapped the stored
// data keys Start fails; after a rotation (new key first, old after it)
// the app starts and reads the data.
func TestDataKeyIsRequiredAndChecked(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := kumikotest.NewDB(t)
	base := kumiko.Config{DatabaseURL: db.URL, Schema: db.Schema, JWTSecret: secret, InstanceID: "pd-1"}

	_, err := kumiko.BuildWorker(ctx, base, members)
	require.ErrorContains(t, err, "entity member declares personal fields")
	require.ErrorContains(t, err, "KUMIKO_DATA_KEY")
	bad := base
	bad.DataKey = "not base64!"
	_, err = kumiko.BuildWorker(ctx, bad, members)
	require.ErrorContains(t, err, "KUMIKO_DATA_KEY")

	start := func(key string) (*kumiko.App, error) {
		c := base
		c.DataKey = key
		app, err := kumiko.BuildWorker(ctx, c, members)
		require.NoError(t, err)
		if err := app.Start(ctx); err != nil {
			return nil, err
		}
		t.Cleanup(func() { require.NoError(t, app.Stop(context.Background())) })
		return app, nil
	}
	old := dataKey(t)
	app, err := start(old)
	require.NoError(t, err)
	alice := kumikotest.User(uuid.New(), "alice", "User")
	out, err := app.Parts().Executor.Write(ctx, alice, pipeline.Request{Type: "member.create", Payload: json.RawMessage(`{"name":"Ada Lovelace"}`)})
	require.NoError(t, err)
	id := out.(map[string]any)["id"].(string)
	require.Zero(t, db.Count(t, "SELECT count(*) FROM kumiko_events WHERE payload::text LIKE '%Ada%'"))

	_, err = start(dataKey(t))
	require.ErrorIs(t, err, eventstore.ErrDataKey)
	require.ErrorContains(t, err, "does not open")

	rotated, err := start(dataKey(t) + "," + old)
	require.NoError(t, err)
	evs, err := rotated.Parts().Store.Load(ctx, alice.User.TenantID, uuid.MustParse(id), eventstore.LoadOptions{})
	require.NoError(t, err)
	require.JSONEq(t, `{"name":"Ada Lovelace"}`, string(evs[0].Payload))
}

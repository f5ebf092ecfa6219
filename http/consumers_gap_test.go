package http_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/consumer"
	"github.com/kumiko-go/kumiko/eventstore"
)

// GET /api/consumers shows how long a shard has been waiting at a gap and
// the backend of the open writer holding it; both clear once it ends.
func TestConsumersShowGapWait(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	alice := token(t, "alice", tenantA, "User")
	operator := token(t, "ops", tenantA, "Operator")
	d, err := consumer.New(e.app.Store, consumer.Config{InstanceID: "p1"}, consumer.Consumer{
		Name:   "mailer",
		Handle: func(context.Context, pgx.Tx, eventstore.Event) error { return nil },
	})
	require.NoError(t, err)
	require.NoError(t, d.Register(ctx))

	writer, err := e.app.Pool.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = writer.Rollback(context.Background()) })
	_, err = e.app.Store.AppendTx(ctx, writer, eventstore.Stream{TenantID: tenantA, AggregateType: "thing"}, 0,
		eventstore.NewEvent{Type: "thing.made", Payload: json.RawMessage(`{}`)})
	require.NoError(t, err)
	pid := float64(writer.Conn().PgConn().PID())
	e.create(alice, "behind the writer")
	_, err = d.RunPass(ctx, "mailer")
	require.NoError(t, err)

	shard := func() map[string]any {
		t.Helper()
		r := e.do(get("/api/consumers", operator))
		require.Equal(t, http.StatusOK, r.status, r.String())
		list := r.obj(t)["data"].([]any)
		require.Len(t, list, 1)
		return list[0].(map[string]any)
	}
	row := shard()
	require.Equal(t, float64(0), row["cursor"], "held at the writer's id")
	require.Positive(t, row["gapWaitSeconds"])
	require.Equal(t, []any{pid}, row["gapBackends"])
	waited := row["gapWaitSeconds"].(float64)
	require.Eventually(t, func() bool { return shard()["gapWaitSeconds"].(float64) > waited }, 10*time.Second, 5*time.Millisecond, "the wait grows")

	require.NoError(t, writer.Rollback(ctx))
	_, err = d.RunPass(ctx, "mailer")
	require.NoError(t, err)
	row = shard()
	require.Equal(t, float64(0), row["gapWaitSeconds"])
	require.Equal(t, []any{}, row["gapBackends"])
	require.Equal(t, float64(0), row["lagEvents"])
}

package pipeline_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/kumiko-go/kumiko/consumer"
	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/kumikotest"
	"github.com/kumiko-go/kumiko/pipeline"
	"github.com/kumiko-go/kumiko/samples/tasks"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var (
	tenantA = uuid.MustParse("0190a000-0000-7000-8000-00000000000a")
	tenantB = uuid.MustParse("0190b000-0000-7000-8000-00000000000b")
	alice   = kumikotest.User(tenantA, "alice", "User")
	bob     = kumikotest.User(tenantB, "bob", "User")
	ctx     = context.Background()
)

func newTasks(t *testing.T, extra ...*feature.Feature) *kumikotest.App {
	t.Helper()
	return kumikotest.NewApp(t, append([]*feature.Feature{tasks.Feature}, extra...))
}

func req(typ string, payload string) pipeline.Request {
	return pipeline.Request{Type: typ, Payload: json.RawMessage(payload)}
}

// row turns a dispatcher result into a map for assertions.
func row(t *testing.T, v any) map[string]any {
	t.Helper()
	raw, err := json.Marshal(v)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(raw, &m))
	return m
}

func write(t *testing.T, app *kumikotest.App, c pipeline.Caller, typ, payload string) map[string]any {
	t.Helper()
	out, err := app.Executor.Write(ctx, c, req(typ, payload))
	require.NoError(t, err)
	return row(t, out)
}

func query(t *testing.T, app *kumikotest.App, c pipeline.Caller, typ, payload string) any {
	t.Helper()
	out, err := app.Executor.Query(ctx, c, req(typ, payload))
	require.NoError(t, err)
	raw, err := json.Marshal(out)
	require.NoError(t, err)
	var v any
	require.NoError(t, json.Unmarshal(raw, &v))
	return v
}

// code is the error code of a dispatcher error.
func code(t *testing.T, err error) (string, *pipeline.Error) {
	t.Helper()
	require.Error(t, err)
	var pe *pipeline.Error
	require.ErrorAs(t, err, &pe)
	return pe.Code(), pe
}

func events(t *testing.T, app *kumikotest.App) int {
	return app.Count(t, "SELECT count(*) FROM kumiko_events")
}

// recorder is a consumer that writes every event it applies into a table in
// the pass transaction, keyed by event id: a duplicate apply fails loudly.
func recorder(t *testing.T, db *kumikotest.DB, name string, delivery feature.Delivery) consumer.Consumer {
	t.Helper()
	table := "seen_" + name
	db.Exec(t, fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (event_id bigint PRIMARY KEY, seq bigserial)`, table))
	return consumer.Consumer{
		Name:     name,
		Delivery: delivery,
		Handle: func(ctx context.Context, tx pgx.Tx, ev eventstore.Event) error {
			_, err := tx.Exec(ctx, fmt.Sprintf("INSERT INTO %s (event_id) VALUES ($1)", table), ev.ID)
			return err
		},
	}
}

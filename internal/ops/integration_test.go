package ops_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/consumer"
	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/integration"
	"github.com/kumiko-go/kumiko/internal/ops"
	"github.com/kumiko-go/kumiko/kumikotest"
	"github.com/kumiko-go/kumiko/pipeline"
)

type noted struct {
	Text string `json:"text" validate:"required"`
}

// `integration dead list|retry|drop` on the in-process transport's dead
// messages: a handler failing every attempt leaves one, list shows it,
// retry hands it to the (now healthy) handler, drop deletes another.
func TestIntegrationDeadCommands(t *testing.T) {
	t.Parallel()
	var failing atomic.Bool
	failing.Store(true)
	f := feature.Define("notes", func(r *feature.Registrar) {
		r.IntegrationEvent("note.taken", noted{})
		feature.HandleCommand(r, "note.take", feature.AnyUser(), func(ctx feature.CommandContext, in noted) (any, error) {
			return nil, ctx.Publish("note.taken", in)
		})
		r.OnIntegrationEvent("note.taken", "file-note", func(ctx feature.CommandContext, m feature.Message) error {
			if failing.Load() {
				return errors.New("the filing cabinet is locked")
			}
			return nil
		})
	})
	app := kumikotest.NewApp(t, []*feature.Feature{f})
	svc, err := integration.New(app.Executor, app.Store, integration.Config{RetryBackoff: 1})
	require.NoError(t, err)
	relay, _ := svc.Relay()
	d, err := consumer.New(app.Store, consumer.Config{InstanceID: "cli"}, relay)
	require.NoError(t, err)
	require.NoError(t, d.Register(context.Background()))
	for _, text := range []string{"first", "second"} {
		_, err := app.Executor.Command(context.Background(), kumikotest.User(uuid.New(), "alice", "User"),
			pipeline.Request{Type: "note.take", Payload: json.RawMessage(`{"text":"` + text + `"}`)})
		require.NoError(t, err)
	}
	kumikotest.CatchUp(t, d, integration.RelayName)

	cli := func(args ...string) (string, error) {
		// Settings from the flags alone: no RABBITMQ_URL of the environment.
		root := ops.NewCommand(ops.App{Name: "notes", Features: []*feature.Feature{f},
			Resolve: func(s ops.Settings) ops.Settings { s.Name = "notes"; return s }})
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&out)
		root.SetArgs(append(args, "--database-url", app.URL, "--schema", app.Schema))
		err := root.ExecuteContext(context.Background())
		return out.String(), err
	}
	out, err := cli("integration", "dead", "list", "--json")
	require.NoError(t, err, out)
	var dead []integration.DeadMessage
	require.NoError(t, json.Unmarshal([]byte(out), &dead))
	require.Len(t, dead, 2)
	require.Equal(t, "file-note", dead[0].Handler)
	require.Equal(t, "internal_error: handler file-note: the filing cabinet is locked", dead[0].LastError)

	out, err = cli("integration", "dead", "list")
	require.NoError(t, err)
	require.Contains(t, out, dead[0].Message.ID.String())
	require.Contains(t, out, "the filing cabinet is locked")

	out, err = cli("integration", "dead", "retry", dead[0].Message.ID.String())
	require.Error(t, err, "still failing: %s", out)
	failing.Store(false)
	out, err = cli("integration", "dead", "retry", dead[0].Message.ID.String())
	require.NoError(t, err, out)
	require.Contains(t, out, "retried")
	out, err = cli("integration", "dead", "drop", dead[1].Message.ID.String())
	require.NoError(t, err, out)
	_, err = cli("integration", "dead", "drop", dead[1].Message.ID.String())
	require.ErrorContains(t, err, "dead_message_not_found")

	out, err = cli("integration", "dead", "list")
	require.NoError(t, err)
	require.Contains(t, out, "no dead messages")
	require.Equal(t, 1, app.Count(t, "SELECT count(*) FROM kumiko_inbox"), "the retried message was handled")

	// `events prune --types kumiko.message` removes the relayed messages
	// only: with the relay's shard disabled, the consumer guard would let
	// a message go that never left.
	_, err = app.Executor.Command(context.Background(), kumikotest.User(uuid.New(), "alice", "User"),
		pipeline.Request{Type: "note.take", Payload: json.RawMessage(`{"text":"waiting"}`)})
	require.NoError(t, err)
	_, err = consumer.NewOps(app.Store).Disable(context.Background(), integration.RelayName, consumer.SharedInstance)
	require.NoError(t, err)
	future := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	out, err = cli("events", "prune", "--types", pipeline.MessageStream, "--older-than", future)
	require.NoError(t, err, out)
	require.Contains(t, out, "removed 2 events")
	require.Equal(t, 1, app.Count(t, "SELECT count(*) FROM kumiko_events WHERE aggregate_type = $1 AND payload->>'text' = 'waiting'",
		pipeline.MessageStream))
}

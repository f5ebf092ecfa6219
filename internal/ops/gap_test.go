package ops_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/consumer"
	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/kumikotest"
	"github.com/kumiko-go/kumiko/samples/tasks"
)

// `consumer list` and `consumer status` show how long a shard has been
// waiting at a gap and the backend of the open writer holding it.
func TestConsumerCLIShowsGapWait(t *testing.T) {
	t.Parallel()
	bin := tasksBinary(t)
	ctx := context.Background()
	app := kumikotest.NewApp(t, []*feature.Feature{tasks.Feature})
	d, err := consumer.New(app.Store, consumer.Config{InstanceID: "cli-gap"}, consumer.Consumer{
		Name:   "watcher",
		Handle: func(context.Context, pgx.Tx, eventstore.Event) error { return nil },
	})
	require.NoError(t, err)
	require.NoError(t, d.Register(ctx))
	stream := eventstore.Stream{TenantID: uuid.New(), AggregateType: "thing"}
	thing := eventstore.NewEvent{Type: "thing.made", Payload: json.RawMessage(`{}`)}

	writer, err := app.Pool.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = writer.Rollback(context.Background()) })
	_, err = app.Store.AppendTx(ctx, writer, stream, 0, thing)
	require.NoError(t, err)
	pid := int32(writer.Conn().PgConn().PID())
	_, err = app.Store.Append(ctx, stream, 0, thing)
	require.NoError(t, err)
	res, err := d.RunPass(ctx, "watcher")
	require.NoError(t, err)
	require.Zero(t, res.Handled, "held at the open writer's id")

	env := cliEnv(app.DB)
	ok := func(args ...string) string {
		t.Helper()
		r := runCLI(t, bin, env, args...)
		require.Equal(t, 0, r.code, "%v: stdout:\n%s\nstderr:\n%s", args, r.stdout, r.stderr)
		return r.stdout
	}
	var list []consumer.ShardStatus
	require.NoError(t, json.Unmarshal([]byte(ok("consumer", "list", "--json")), &list))
	require.Len(t, list, 1)
	require.Positive(t, list[0].GapWaitSeconds)
	require.Equal(t, []int32{pid}, list[0].GapBackends)

	out := ok("consumer", "list")
	require.Regexp(t, `(?m)^NAME\s+INSTANCE\s+PARTITION\s+OWNER\s+LIVENESS\s+STATUS\s+CURSOR\s+HEAD\s+LAG\s+LAG\(s\)\s+GAP WAIT\(s\)\s+GAP BACKENDS\s+ATTEMPTS\s+PARKED`, out)
	require.Regexp(t, fmt.Sprintf(`(?m)^watcher\s+__shared__\s+-\s+-\s+-\s+catching_up\s+0\s+\d+\s+1\s+[\d.]+\s+[\d.]+\s+%d\s+0\s+0\s`, pid), out)
	require.Regexp(t, fmt.Sprintf(`(?m)^watcher\s.*\s%d\s+0\s+0\s`, pid), ok("consumer", "status", "watcher"))

	require.NoError(t, writer.Rollback(ctx))
	_, err = d.RunPass(ctx, "watcher")
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal([]byte(ok("consumer", "list", "--json")), &list))
	require.Zero(t, list[0].GapWaitSeconds)
	require.Empty(t, list[0].GapBackends)
	require.Regexp(t, `(?m)^watcher\s+__shared__\s+-\s+-\s+-\s+idle\s+\d+\s+\d+\s+0\s+[\d.]+\s+0\.0\s+-\s+0\s+0\s`, ok("consumer", "list"))
}

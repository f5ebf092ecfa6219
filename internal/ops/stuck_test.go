package ops_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/consumer"
	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/kumikotest"
	"github.com/kumiko-go/kumiko/samples/tasks"
)

// `consumer list` and `consumer status` (and --json) show a shard whose
// handler runs past StuckAfter in another process as stuck, with the event,
// the process and since when; idle again once the handler returns.
func TestConsumerCLIShowsStuck(t *testing.T) {
	t.Parallel()
	bin := tasksBinary(t)
	ctx := context.Background()
	app := kumikotest.NewApp(t, []*feature.Feature{tasks.Feature})
	release := make(chan struct{})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	var calls atomic.Int32
	d, err := consumer.New(app.Store, consumer.Config{InstanceID: "cli-stuck", PollInterval: 50 * time.Millisecond,
		Heartbeat: 200 * time.Millisecond, StaleAfter: 5 * time.Second, StuckAfter: 300 * time.Millisecond}, consumer.Consumer{
		Name: "watcher",
		Handle: func(ctx context.Context, _ pgx.Tx, _ eventstore.Event) error {
			if calls.Add(1) > 1 {
				return nil
			}
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		},
	})
	require.NoError(t, err)
	require.NoError(t, d.Start(ctx))
	t.Cleanup(func() { require.NoError(t, d.Stop(context.Background())) })
	t.Cleanup(unblock)
	res, err := app.Store.Append(ctx, eventstore.Stream{TenantID: uuid.New(), AggregateType: "thing"}, 0,
		eventstore.NewEvent{Type: "thing.made", Payload: json.RawMessage(`{}`)})
	require.NoError(t, err)
	id := res.Events[0].ID

	env := cliEnv(app.DB)
	ok := func(args ...string) string {
		t.Helper()
		r := runCLI(t, bin, env, args...)
		require.Equal(t, 0, r.code, "%v: stdout:\n%s\nstderr:\n%s", args, r.stdout, r.stderr)
		return r.stdout
	}
	require.Eventually(t, func() bool {
		var st consumer.ShardStatus
		require.NoError(t, json.Unmarshal([]byte(ok("consumer", "status", "watcher", "--json")), &st))
		return st.Status == consumer.StatusStuck
	}, 30*time.Second, 50*time.Millisecond, "the shard shows stuck")
	var list []consumer.ShardStatus
	require.NoError(t, json.Unmarshal([]byte(ok("consumer", "list", "--json")), &list))
	require.Len(t, list, 1)
	require.Equal(t, consumer.StatusStuck, list[0].Status)
	require.Equal(t, id, list[0].StuckEventID)
	require.Equal(t, "cli-stuck", list[0].StuckInstanceID)
	require.NotNil(t, list[0].StuckSince)

	out := ok("consumer", "list")
	require.Regexp(t, `(?m)^NAME\s+INSTANCE\s+PARTITION\s+OWNER\s+LIVENESS\s+STATUS\s+.*\s+ATTEMPTS\s+PARKED\s+STUCK\s+UPDATED`, out)
	row := fmt.Sprintf(`(?m)^watcher\s+__shared__\s+-\s+-\s+-\s+stuck\s+\d+\s+\d+\s+1\s.*\s0\s+0\s+event %d on cli-stuck since \S+ \([\d.]+s\)\s`, id)
	require.Regexp(t, row, out)
	require.Regexp(t, row, ok("consumer", "status", "watcher"))

	unblock()
	require.Eventually(t, func() bool {
		var st consumer.ShardStatus
		require.NoError(t, json.Unmarshal([]byte(ok("consumer", "status", "watcher", "--json")), &st))
		return st.Status == consumer.StatusIdle && st.Cursor == id && st.StuckSince == nil
	}, 30*time.Second, 50*time.Millisecond, "idle once the handler returned")
	require.Regexp(t, `(?m)^watcher\s+__shared__\s+-\s+-\s+-\s+idle\s.*\s0\s+0\s+-\s`, ok("consumer", "list"))
}

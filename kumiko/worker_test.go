package kumiko_test

import (
	"bufio"
	"context"
	"net/http"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/consumer"
	"github.com/kumiko-go/kumiko/feature"
	khttp "github.com/kumiko-go/kumiko/http"
	"github.com/kumiko-go/kumiko/kumiko"
	"github.com/kumiko-go/kumiko/kumikotest"
	"github.com/kumiko-go/kumiko/samples/tasks"
)

// counter counts created tasks per tenant, asynchronously.
var counter = feature.Define("counter", func(r *feature.Registrar) {
	r.MultiStreamProjection(feature.MultiStreamProjection{
		Name: "task-counter",
		Table: &feature.TableDef{Name: "task_counts", Columns: []feature.Column{
			{Name: "tenant_id", Type: "uuid", NotNull: true},
			{Name: "n", Type: "bigint", NotNull: true},
		}, PrimaryKey: []string{"tenant_id"}},
		Apply: map[string]feature.ApplyFunc{
			"task.created": func(ctx feature.ApplyContext, e feature.Event) error {
				_, err := ctx.DB().Exec(ctx.Context(), "INSERT INTO "+ctx.Table()+` AS t (tenant_id, n) VALUES ($1, 1)
					ON CONFLICT (tenant_id) DO UPDATE SET n = t.n + 1`, ctx.Tenant())
				return err
			},
		},
	})
})

// The API/worker split: a server without consumers of its own writes, a
// worker delivers; and serve alone delivers too.
func TestServeAndWorkerDeliverEvents(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	ctx := context.Background()
	cfg := kumiko.Config{DatabaseURL: db.URL, Schema: db.Schema, JWTSecret: secret, Addr: "127.0.0.1:0"}

	api := cfg
	api.InstanceID = "api-1"
	server, err := kumiko.BuildServer(ctx, api, tasks.Feature, counter)
	require.NoError(t, err)
	require.NoError(t, server.Start(ctx))
	t.Cleanup(func() { _ = server.Stop(context.Background()) })

	wcfg := cfg
	wcfg.InstanceID = "worker-1"
	worker, err := kumiko.BuildWorker(ctx, wcfg, tasks.Feature, counter)
	require.NoError(t, err)
	require.Nil(t, worker.Parts().HTTP, "a worker serves no HTTP")
	require.NoError(t, worker.Start(ctx))
	t.Cleanup(func() { _ = worker.Stop(context.Background()) })

	token, err := khttp.IssueToken([]byte(secret), "u-1", "01900000-0000-7000-8000-000000000001", []string{"User"}, time.Minute)
	require.NoError(t, err)
	for range 5 {
		post(t, "http://"+server.Addr()+"/api/write", token, `{"type":"task.create","payload":{"title":"t"}}`, http.StatusOK)
	}
	require.Eventually(t, func() bool {
		return db.Count(t, "SELECT COALESCE(sum(n), 0) FROM task_counts") == 5
	}, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, 1, db.Count(t, "SELECT count(*) FROM kumiko_event_consumers WHERE name = 'task-counter'"), "one shared shard")
}

// The server's event stream is fed by its dispatcher: a write shows up as a
// frame, and Stop ends the open stream instead of waiting for it.
func TestServerStreamsEvents(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	ctx := context.Background()
	server, err := kumiko.BuildServer(ctx, kumiko.Config{DatabaseURL: db.URL, Schema: db.Schema, JWTSecret: secret,
		Addr: "127.0.0.1:0", InstanceID: "sse-1", ShutdownTimeout: 2 * time.Second}, tasks.Feature)
	require.NoError(t, err)
	require.NoError(t, server.Start(ctx))
	token, err := khttp.IssueToken([]byte(secret), "u-1", "01900000-0000-7000-8000-000000000001", []string{"User"}, time.Minute)
	require.NoError(t, err)

	req, err := http.NewRequest(http.MethodGet, "http://"+server.Addr()+"/api/events", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)

	post(t, "http://"+server.Addr()+"/api/write", token, `{"type":"task.create","payload":{"title":"streamed"}}`, http.StatusOK)
	lines := bufio.NewScanner(resp.Body)
	for lines.Scan() {
		if lines.Text() == "event: task.created" {
			break
		}
	}
	require.NoError(t, lines.Err())

	// With the stream still open, a graceful stop must not run into its
	// timeout (Shutdown would report the deadline).
	require.NoError(t, server.Stop(ctx))
}

// Every process records its liveness; with CollectStaleInstances a running
// one removes the record of a process that stopped beating.
func TestWorkersRecordLivenessAndCollectStale(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	ctx := context.Background()
	cfg := kumiko.Config{DatabaseURL: db.URL, Schema: db.Schema, JWTSecret: secret,
		InstanceHeartbeat: 100 * time.Millisecond, InstanceStaleAfter: time.Second}
	start := func(id string, collect bool) *kumiko.App {
		c := cfg
		c.InstanceID, c.CollectStaleInstances = id, collect
		w, err := kumiko.BuildWorker(ctx, c, tasks.Feature, counter)
		require.NoError(t, err)
		require.NoError(t, w.Start(ctx))
		return w
	}
	gone := start("w-gone", false)
	require.NoError(t, gone.Stop(ctx))
	keeper := start("w-keeper", true)
	t.Cleanup(func() { _ = keeper.Stop(context.Background()) })

	ops := consumer.NewOps(db.Store)
	host, _ := os.Hostname()
	instances, err := ops.Instances(ctx)
	require.NoError(t, err)
	i := slices.IndexFunc(instances, func(in consumer.Instance) bool { return in.InstanceID == "w-keeper" })
	require.GreaterOrEqual(t, i, 0)
	require.Equal(t, host, instances[i].Host)
	require.NotNil(t, instances[i].StartedAt)
	require.Eventually(t, func() bool {
		instances, err := ops.Instances(ctx)
		require.NoError(t, err)
		return len(instances) == 1 && instances[0].InstanceID == "w-keeper" && !instances[0].Stale
	}, 20*time.Second, 20*time.Millisecond, "the stopped worker's record is collected")
}

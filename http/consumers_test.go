package http_test

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/consumer"
	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/feature"
	khttp "github.com/kumiko-go/kumiko/http"
)

// An operator sees every consumer shard with its cursor, head, lag and
// status; others, a tenant's admin included, are refused.
func TestConsumers(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	alice := token(t, "alice", tenantA, "User")
	admin := token(t, "ada", tenantA, "Admin")
	operator := token(t, "olga", tenantA, "Operator")
	ctx := context.Background()

	r := e.do(get("/api/consumers", operator))
	require.Equal(t, http.StatusOK, r.status, r.String())
	require.JSONEq(t, `{"data":[]}`, string(r.body), "no shards yet: an empty list")

	// A strict consumer that fails on the second task, a per-instance one
	// that handles everything.
	var bad int64
	strict := consumer.Consumer{
		Name: "mailer", MaxAttempts: 1,
		Handle: func(_ context.Context, _ pgx.Tx, ev eventstore.Event) error {
			if ev.ID == bad {
				return errors.New("smtp down")
			}
			return nil
		},
	}
	cache := consumer.Consumer{
		Name: "cache", Delivery: feature.PerInstance,
		Handle: func(context.Context, pgx.Tx, eventstore.Event) error { return nil },
	}
	d, err := consumer.New(e.app.Store, consumer.Config{InstanceID: "p1"}, strict, cache)
	require.NoError(t, err)
	require.NoError(t, d.Register(ctx))
	e.create(alice, "one")
	e.create(alice, "two")
	e.create(alice, "three")
	var ids []int64
	rows, err := e.app.Pool.Query(ctx, "SELECT id FROM kumiko_events ORDER BY id")
	require.NoError(t, err)
	ids, err = pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	require.Len(t, ids, 3)
	bad = ids[1]
	for _, name := range []string{"mailer", "cache"} {
		_, err := d.RunPass(ctx, name)
		require.NoError(t, err)
	}

	r = e.do(get("/api/consumers", operator))
	require.Equal(t, http.StatusOK, r.status, r.String())
	require.Equal(t, "application/json", r.header.Get("Content-Type"))
	list, ok := r.obj(t)["data"].([]any)
	require.True(t, ok, r.String())
	require.Len(t, list, 2)

	cacheRow := list[0].(map[string]any)
	require.Equal(t, "cache", cacheRow["name"])
	require.Equal(t, "p1", cacheRow["instanceId"])
	require.Equal(t, "idle", cacheRow["status"])
	require.Equal(t, float64(ids[2]), cacheRow["cursor"])
	require.Equal(t, float64(ids[2]), cacheRow["head"])
	require.Equal(t, float64(0), cacheRow["lagEvents"])
	require.Equal(t, float64(0), cacheRow["lagSeconds"])
	require.Equal(t, float64(0), cacheRow["attempts"])
	require.Equal(t, "", cacheRow["lastError"])
	require.Equal(t, consumer.LivenessUnknown, cacheRow["liveness"], "p1 never beat")
	require.Nil(t, cacheRow["lastSeen"])
	require.Equal(t, float64(0), cacheRow["expiredUpTo"])

	mailer := list[1].(map[string]any)
	require.Equal(t, "mailer", mailer["name"])
	require.Equal(t, consumer.SharedInstance, mailer["instanceId"])
	require.Equal(t, "dead", mailer["status"])
	require.Equal(t, float64(ids[0]), mailer["cursor"])
	require.Equal(t, float64(ids[2]), mailer["head"])
	require.Equal(t, float64(2), mailer["lagEvents"])
	require.GreaterOrEqual(t, mailer["lagSeconds"], float64(0))
	require.Less(t, mailer["lagSeconds"], float64(60))
	require.Equal(t, float64(1), mailer["attempts"])
	require.Contains(t, mailer["lastError"], "smtp down")
	at, err := time.Parse(time.RFC3339Nano, mailer["updatedAt"].(string))
	require.NoError(t, err)
	require.WithinDuration(t, time.Now(), at, time.Minute)
	require.Equal(t, "", mailer["liveness"], "a shared shard has no instance")

	// A running process's per-instance shard: live, with its last beat.
	d2, err := consumer.New(e.app.Store, consumer.Config{InstanceID: "p2"}, cache)
	require.NoError(t, err)
	require.NoError(t, d2.Start(ctx))
	t.Cleanup(func() { require.NoError(t, d2.Stop(context.Background())) })
	r = e.do(get("/api/consumers", operator))
	require.Equal(t, http.StatusOK, r.status, r.String())
	list = r.obj(t)["data"].([]any)
	require.Len(t, list, 3)
	p2 := list[1].(map[string]any)
	require.Equal(t, "p2", p2["instanceId"])
	require.Equal(t, consumer.LivenessLive, p2["liveness"])
	seenAt, err := time.Parse(time.RFC3339Nano, p2["lastSeen"].(string))
	require.NoError(t, err)
	require.WithinDuration(t, time.Now(), seenAt, time.Minute)

	// No operator role, no token, another method.
	requireProblem(t, e.do(get("/api/consumers", alice)), http.StatusForbidden, "access_denied", "")
	requireProblem(t, e.do(get("/api/consumers", admin)), http.StatusForbidden, "access_denied", "")
	requireProblem(t, e.do(get("/api/consumers", "")), http.StatusUnauthorized, "unauthenticated", "")
	requireProblem(t, e.do(get("/api/consumers", "not-a-token")), http.StatusUnauthorized, "unauthenticated", "")
	requireProblem(t, e.do(request{method: http.MethodPost, path: "/api/consumers", token: operator}), http.StatusMethodNotAllowed, "method_not_allowed", "")
}

// A handler that runs past its consumer's StuckAfter: GET /api/consumers
// shows the shard stuck — which event, which process, since when — and
// /metrics the stuck gauge; once the handler returns, the shard is idle.
func TestConsumersShowStuckHandler(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	e := newEnv(t, func(c *khttp.Config) { c.Metrics = reg })
	alice := token(t, "alice", tenantA, "User")
	operator := token(t, "olga", tenantA, "Operator")
	ctx := context.Background()

	release := make(chan struct{})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	var calls atomic.Int32
	slow := consumer.Consumer{
		Name: "mailer", StuckAfter: 300 * time.Millisecond,
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
	}
	d, err := consumer.New(e.app.Store, consumer.Config{InstanceID: "p1", PollInterval: 50 * time.Millisecond,
		Heartbeat: 200 * time.Millisecond, StaleAfter: time.Second, Metrics: reg}, slow)
	require.NoError(t, err)
	require.NoError(t, d.Start(ctx))
	t.Cleanup(func() { require.NoError(t, d.Stop(context.Background())) })
	t.Cleanup(unblock)

	e.create(alice, "one")
	var id int64
	require.NoError(t, e.app.Pool.QueryRow(ctx, "SELECT max(id) FROM kumiko_events").Scan(&id))
	var row map[string]any
	require.Eventually(t, func() bool {
		r := e.do(get("/api/consumers", operator))
		require.Equal(t, http.StatusOK, r.status, r.String())
		list := r.obj(t)["data"].([]any)
		require.Len(t, list, 1)
		row = list[0].(map[string]any)
		return row["status"] == consumer.StatusStuck
	}, 20*time.Second, 20*time.Millisecond, "the shard shows stuck")
	require.Equal(t, float64(id), row["stuckEventId"])
	require.Equal(t, "p1", row["stuckInstanceId"])
	require.Equal(t, consumer.SharedInstance, row["instanceId"])
	since, err := time.Parse(time.RFC3339Nano, row["stuckSince"].(string))
	require.NoError(t, err)
	require.WithinDuration(t, time.Now(), since, time.Minute)
	require.Greater(t, row["stuckSeconds"], float64(0))
	require.Equal(t, float64(0), row["attempts"])

	m := e.do(get("/metrics", operator))
	require.Equal(t, http.StatusOK, m.status)
	require.Contains(t, string(m.body), `kumiko_event_consumer_stuck{consumer="mailer",instance_id="p1"} 1`)

	unblock()
	require.Eventually(t, func() bool {
		r := e.do(get("/api/consumers", operator))
		row = r.obj(t)["data"].([]any)[0].(map[string]any)
		return row["status"] == consumer.StatusIdle
	}, 20*time.Second, 20*time.Millisecond, "idle once the handler returned")
	require.Equal(t, float64(id), row["cursor"])
	require.Nil(t, row["stuckSince"])
	require.Equal(t, float64(0), row["stuckEventId"])
	require.Equal(t, "", row["stuckInstanceId"])
}

// slowLog is a side-effect multi-stream projection whose apply waits for
// its context: its HandlerTimeout cancels it.
var slowLog = feature.Define("slowlog", func(r *feature.Registrar) {
	r.MultiStreamProjection(feature.MultiStreamProjection{
		Name: "slow_log", MaxAttempts: 3, HandlerTimeout: 200 * time.Millisecond, StuckAfter: time.Hour,
		Apply: map[string]feature.ApplyFunc{"task.created": func(ctx feature.ApplyContext, _ feature.Event) error {
			<-ctx.Context().Done()
			return ctx.Context().Err()
		}},
	})
})

// A multi-stream projection's HandlerTimeout cancels its apply and counts
// the attempt: GET /api/consumers shows it with the timeout as last error.
func TestConsumersShowHandlerTimeout(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, 8, []*feature.Feature{slowLog})
	alice := token(t, "alice", tenantA, "User")
	operator := token(t, "olga", tenantA, "Operator")
	var slow []consumer.Consumer
	for _, c := range e.app.Executor.Consumers() {
		if c.Name == "slow_log" {
			slow = append(slow, c)
		}
	}
	require.Len(t, slow, 1)
	require.Equal(t, 200*time.Millisecond, slow[0].HandlerTimeout)
	d, err := consumer.New(e.app.Store, consumer.Config{InstanceID: "p1"}, slow...)
	require.NoError(t, err)
	require.NoError(t, d.Register(context.Background()))
	e.create(alice, "one")

	res, err := d.RunPass(context.Background(), "slow_log")
	require.NoError(t, err)
	require.Error(t, res.Failed)
	r := e.do(get("/api/consumers", operator))
	require.Equal(t, http.StatusOK, r.status, r.String())
	row := r.obj(t)["data"].([]any)[0].(map[string]any)
	require.Equal(t, "slow_log", row["name"])
	require.Equal(t, float64(1), row["attempts"])
	require.Contains(t, row["lastError"], "handler timeout after 200ms")
	require.Equal(t, consumer.StatusCatchingUp, row["status"])
}

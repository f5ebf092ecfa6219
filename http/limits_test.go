package http_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	khttp "github.com/kumiko-go/kumiko/http"
	"github.com/kumiko-go/kumiko/idempotency"
	"github.com/kumiko-go/kumiko/kumikotest"
	"github.com/kumiko-go/kumiko/pipeline"
	"github.com/kumiko-go/kumiko/registry"
)

// unknownFields is a task.create envelope whose payload has n unknown
// fields and no title.
func unknownFields(n int) string {
	var b strings.Builder
	b.WriteString(`{"type":"task.create","payload":{`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"x%d":1`, i)
	}
	b.WriteString(`}}`)
	return b.String()
}

// 70,000 unknown fields answer a short problem: 50 entries and the total,
// and the request's log line stays short too.
func TestValidationErrorListIsCapped(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	alice := token(t, "alice", tenantA, "User")
	body := unknownFields(70_000)
	require.Less(t, len(body), 1<<20, "the body fits the body limit")

	r := e.post("/api/write", alice, body)
	p := requireProblem(t, r, 400, "validation_error", "")
	require.Equal(t, registry.MaxFieldErrors, len(p["fields"].([]any)))
	require.Equal(t, float64(70_000+1), p["fieldsTotal"], "every unknown field and the missing title")
	require.Less(t, len(r.body), 16<<10, "the answer is small")
	refused := e.logs.lines(map[string]any{"msg": "request refused"})
	require.NotEmpty(t, refused)
	for _, line := range refused {
		require.Less(t, len(fmt.Sprint(line)), 16<<10, "the log line is small")
	}

	// A short list is complete, and says so.
	p = requireProblem(t, e.post("/api/write", alice, unknownFields(2)), 400, "validation_error", "")
	require.Len(t, p["fields"], 3)
	require.Equal(t, float64(3), p["fieldsTotal"])
	require.Zero(t, e.events())
}

// A keyed request whose response is larger than IdempotencyMaxResponse keeps
// a small record in Redis: a 2xx is recorded as applied without its body
// (a retry answers 409 already_applied and applies nothing), a 4xx is not
// recorded (a retry runs again), and the key still belongs to its request.
func TestIdempotencyRecordIsCapped(t *testing.T) {
	t.Parallel()
	const limit = 1 << 10
	opts, err := redis.ParseURL(kumikotest.RedisURL())
	require.NoError(t, err)
	client := redis.NewClient(opts)
	t.Cleanup(func() { _ = client.Close() })
	ctx := context.Background()
	prefix := "kumiko:test:" + uuid.NewString() + ":"
	t.Cleanup(func() {
		keys, _ := client.Keys(context.Background(), prefix+"*").Result()
		if len(keys) > 0 {
			_ = client.Del(context.Background(), keys...).Err()
		}
	})
	e := newEnv(t, func(c *khttp.Config) {
		c.Idempotency = idempotency.NewRedisStore(client, idempotency.RedisConfig{Prefix: prefix})
		c.IdempotencyMaxResponse = limit
	})
	alice := token(t, "alice", tenantA, "User")
	records := func() map[string]int64 {
		keys, err := client.Keys(ctx, prefix+"*").Result()
		require.NoError(t, err)
		out := map[string]int64{}
		for _, k := range keys {
			out[k], err = client.StrLen(ctx, k).Result()
			require.NoError(t, err)
		}
		return out
	}

	var cmds []string
	for i := range 10 {
		cmds = append(cmds, fmt.Sprintf(`{"type":"task.create","payload":{"title":"%s %d"}}`, strings.Repeat("t", 150), i))
	}
	batch := `{"commands":[` + strings.Join(cmds, ",") + `]}`
	first := e.post("/api/batch", alice, batch, "Idempotency-Key", "big-1")
	require.Equal(t, 200, first.status, first.String())
	require.Greater(t, len(first.body), 2*limit, "the response is larger than the limit")
	rec := records()
	require.Len(t, rec, 1)
	for k, n := range rec {
		require.Less(t, n, int64(limit), "the record of %s holds no body", k)
	}

	again := e.post("/api/batch", alice, batch, "Idempotency-Key", "big-1")
	requireProblem(t, again, 409, "idempotency_conflict", "already_applied")
	require.Equal(t, "true", again.header.Get("Idempotent-Replayed"))
	require.Equal(t, 10, e.events(), "the retry applied nothing")
	reused := e.post("/api/batch", alice, `{"commands":[{"type":"task.create","payload":{"title":"other"}}]}`, "Idempotency-Key", "big-1")
	requireProblem(t, reused, 422, "idempotency_conflict", "key_reused")

	// A large 4xx is not kept: the retry runs again and answers the same.
	bad := unknownFields(60)
	for range 2 {
		r := e.post("/api/write", alice, bad, "Idempotency-Key", "big-2")
		requireProblem(t, r, 400, "validation_error", "")
		require.Greater(t, len(r.body), limit)
		require.Empty(t, r.header.Get("Idempotent-Replayed"))
	}
	require.NoError(t, e.s.WaitRecords(ctx)) // a record is settled after the answer
	require.Len(t, records(), 1, "no record of the 4xx")

	// A response within the limit is replayed as before.
	small := e.post("/api/write", alice, keyedCreate, "Idempotency-Key", "small-1")
	require.Equal(t, 200, small.status, small.String())
	replayed := e.post("/api/write", alice, keyedCreate, "Idempotency-Key", "small-1")
	require.Equal(t, small.body, replayed.body)
	require.Equal(t, "true", replayed.header.Get("Idempotent-Replayed"))
	require.Equal(t, 11, e.events())
}

// A list with asOf that outlasts its time budget answers a clean 503 with
// Retry-After, not a 500 and not an unbounded wait.
func TestAsOfListTimeoutIs503(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	d, err := pipeline.New(e.app.Registry, e.app.Store, pipeline.Config{AsOfTimeout: 100 * time.Millisecond})
	require.NoError(t, err)
	s, err := khttp.NewServer(khttp.Config{JWTSecret: secret, Logger: slog.New(slog.NewJSONHandler(e.logs, nil))}, d, e.app.Store)
	require.NoError(t, err)
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	alice := token(t, "alice", tenantA, "User")
	e.create(alice, "then")

	tx, err := e.app.Pool.Begin(context.Background())
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	_, err = tx.Exec(context.Background(), `LOCK TABLE kumiko_events IN ACCESS EXCLUSIVE MODE`)
	require.NoError(t, err)

	asOf := fmt.Sprintf(`{"type":"task.list","payload":{"asOf":%q}}`, time.Now().Add(time.Hour).UTC().Format(time.RFC3339))
	r := doOn(t, srv, request{path: "/api/query", token: alice, body: strings.NewReader(asOf)})
	requireProblem(t, r, 503, "unavailable", "as_of_timeout")
	require.NotEmpty(t, r.header.Get("Retry-After"))

	require.NoError(t, tx.Rollback(context.Background()))
	r = doOn(t, srv, request{path: "/api/query", token: alice, body: strings.NewReader(asOf)})
	require.Equal(t, 200, r.status, r.String())
}

// A request stuck in the database — here behind a table lock — ends at
// RequestTimeout: its statement is cancelled, its transaction rolls back
// and its connection returns to the pool, and the client gets 503
// unavailable (timeout) instead of waiting as long as the lock is held.
func TestRequestTimeoutEndsAStuckRequest(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *khttp.Config) { c.RequestTimeout = 300 * time.Millisecond })
	alice := token(t, "alice", tenantA, "Admin", "User")
	id := e.create(alice, "locked")["id"].(string)
	before := e.events()

	bg := context.Background()
	tx, err := e.app.Pool.Begin(bg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(bg) })
	var holder int
	require.NoError(t, tx.QueryRow(bg, `SELECT pg_backend_pid()`).Scan(&holder))
	_, err = tx.Exec(bg, `LOCK TABLE read_task IN ACCESS EXCLUSIVE MODE`)
	require.NoError(t, err)

	update := fmt.Sprintf(`{"type":"task.update","payload":{"id":%q,"version":1,"changes":{"done":true}}}`, id)
	for _, c := range []struct{ path, body string }{
		{"/api/query", `{"type":"task.list","payload":{}}`},
		{"/api/query", fmt.Sprintf(`{"type":"task.detail","payload":{"id":%q}}`, id)},
		{"/api/write", update},
		{"/api/batch", `{"commands":[` + update + `]}`},
		{"/api/command", fmt.Sprintf(`{"type":"task.complete","payload":{"id":%q,"version":1}}`, id)},
	} {
		r := e.post(c.path, alice, c.body)
		requireProblem(t, r, 503, "unavailable", "timeout")
	}
	// Nothing waits for the lock any more: every statement was cancelled.
	require.Eventually(t, func() bool {
		return e.app.Count(t, `SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))`, holder) == 0
	}, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, before, e.events(), "nothing was written")

	require.NoError(t, tx.Rollback(bg))
	r := e.post("/api/write", alice, update)
	require.Equal(t, 200, r.status, r.String())
}

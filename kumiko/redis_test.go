package kumiko_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	khttp "github.com/kumiko-go/kumiko/http"
	"github.com/kumiko-go/kumiko/kumiko"
	"github.com/kumiko-go/kumiko/kumikotest"
	"github.com/kumiko-go/kumiko/samples/tasks"
)

// privateRedis starts a redis-server of the test's own, so the test can flush
// and stop it without touching anyone else's. A free port can be taken
// between choosing it and binding it, so it tries a few.
func privateRedis(t *testing.T) (url string, stop func()) {
	t.Helper()
	for range 3 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		port := ln.Addr().(*net.TCPAddr).Port
		require.NoError(t, ln.Close())
		cmd := exec.Command("redis-server", "--port", fmt.Sprint(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
		require.NoError(t, cmd.Start(), "redis-server must be installed (make services installs it)")
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		var once sync.Once
		stop = func() { once.Do(func() { _ = cmd.Process.Kill(); <-exited }) }
		client := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", port)})
		up := false
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
			if client.Ping(context.Background()).Err() == nil {
				up = true
				break
			}
			select {
			case <-exited: // the port was taken: try another
				deadline = time.Time{}
			case <-time.After(10 * time.Millisecond):
			}
		}
		client.Close()
		if up {
			t.Cleanup(stop)
			return fmt.Sprintf("redis://127.0.0.1:%d/0", port), stop
		}
		stop()
	}
	t.Fatal("could not start a private redis-server")
	return "", nil
}

func keyed(t *testing.T, url, token, key, body string) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var b strings.Builder
	_, _ = fmt.Fprint(&b, readAll(t, resp))
	return resp.StatusCode, b.String(), resp.Header
}

// Idempotency over HTTP with the real Redis store: replays, concurrent
// duplicates, a flushed Redis (the Postgres record still refuses a second
// apply) and a stopped Redis (keyed writes 503, unkeyed writes go on).
func TestIdempotencyWithRedis(t *testing.T) {
	t.Parallel()
	redisURL, stopRedis := privateRedis(t)
	db := kumikotest.NewDB(t, kumikotest.MaxConns(4))
	ctx := context.Background()
	app, err := kumiko.BuildServer(ctx, kumiko.Config{
		DatabaseURL: db.URL, Schema: db.Schema, RedisURL: redisURL, JWTSecret: secret, Addr: "127.0.0.1:0", InstanceID: "idem",
	}, tasks.Feature)
	require.NoError(t, err)
	require.NoError(t, app.Start(ctx))
	t.Cleanup(func() { _ = app.Stop(context.Background()) })
	write := "http://" + app.Addr() + "/api/write"
	token, err := khttp.IssueToken([]byte(secret), "u-1", "01900000-0000-7000-8000-000000000001", []string{"User"}, time.Minute)
	require.NoError(t, err)
	events := func() int { return db.Count(t, "SELECT count(*) FROM kumiko_events") }

	body := `{"type":"task.create","payload":{"title":"once"}}`
	status, first, _ := keyed(t, write, token, "key-1", body)
	require.Equal(t, http.StatusOK, status)
	status, replay, h := keyed(t, write, token, "key-1", body)
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, first, replay, "the replay is the identical body")
	require.Equal(t, "true", h.Get("Idempotent-Replayed"))
	require.Equal(t, 1, events())

	status, reused, _ := keyed(t, write, token, "key-1", `{"type":"task.create","payload":{"title":"other"}}`)
	require.Equal(t, http.StatusUnprocessableEntity, status, reused)
	require.Contains(t, reused, `"reason":"key_reused"`)

	// 20 identical keyed requests at once: one event.
	var wg sync.WaitGroup
	statuses := make([]int, 20)
	for i := range statuses {
		wg.Go(func() {
			statuses[i], _, _ = keyed(t, write, token, "key-2", `{"type":"task.create","payload":{"title":"race"}}`)
		})
	}
	wg.Wait()
	require.Equal(t, 2, events())
	for _, s := range statuses {
		require.Contains(t, []int{http.StatusOK, http.StatusConflict}, s)
	}

	// Redis loses its records: the key recorded in Postgres still refuses.
	client := redis.NewClient(mustParse(t, redisURL))
	require.NoError(t, client.FlushAll(ctx).Err())
	client.Close()
	status, again, _ := keyed(t, write, token, "key-1", body)
	require.Equal(t, http.StatusConflict, status, again)
	require.Contains(t, again, `"reason":"already_applied"`)
	require.Equal(t, 2, events())

	// Redis stops: keyed writes cannot be made safe, unkeyed ones go on.
	stopRedis()
	status, down, h := keyed(t, write, token, "key-3", body)
	require.Equal(t, http.StatusServiceUnavailable, status, down)
	require.Contains(t, down, `"code":"unavailable"`)
	require.NotEmpty(t, h.Get("Retry-After"))
	status, _, _ = keyed(t, write, token, "", body)
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, 3, events())
}

func mustParse(t *testing.T, url string) *redis.Options {
	opts, err := redis.ParseURL(url)
	require.NoError(t, err)
	return opts
}

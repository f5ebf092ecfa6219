package http_test

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/feature"
	khttp "github.com/kumiko-go/kumiko/http"
	"github.com/kumiko-go/kumiko/idempotency"
	"github.com/kumiko-go/kumiko/kumikotest"
	"github.com/kumiko-go/kumiko/samples/tasks"
)

// A Redis that accepts connections and never answers costs a keyed write
// the store's Timeout, not go-redis's 5 s read timeout: the client here
// keeps every go-redis default (context deadlines ignored), the store's
// bound alone ends the wait. The keyed write answers 503 unavailable with
// Retry-After well before 5 s, fail-open runs it within the same bound,
// and unkeyed writes never touch Redis.
func TestHangingRedisIsUnavailableWithinTheStoreTimeout(t *testing.T) {
	t.Parallel()
	app := kumikotest.NewApp(t, []*feature.Feature{tasks.Feature})
	client := redis.NewClient(&redis.Options{Addr: silentListener(t)})
	t.Cleanup(func() { _ = client.Close() }) // ends the calls the store abandoned
	store := idempotency.NewRedisStore(client, idempotency.RedisConfig{})
	serve := func(failOpen bool) *httptest.Server {
		s, err := khttp.NewServer(khttp.Config{JWTSecret: secret, Idempotency: store, IdempotencyFailOpen: failOpen}, app.Executor, app.Store)
		require.NoError(t, err)
		srv := httptest.NewServer(s.Handler())
		t.Cleanup(srv.Close)
		return srv
	}
	closed, open := serve(false), serve(true)
	user := token(t, "u-1", tenantA, "User")
	write := func(srv *httptest.Server, key string) (reply, time.Duration) {
		r := request{path: "/api/write", token: user, body: strings.NewReader(`{"type":"task.create","payload":{"title":"t"}}`)}
		if key != "" {
			r.header = map[string]string{"Idempotency-Key": key}
		}
		start := time.Now()
		rep := doOn(t, srv, r)
		return rep, time.Since(start)
	}
	// The feature itself: DefaultRedisTimeout (1s) plus slack for a loaded
	// machine, far below go-redis's own 5 s.
	const within = 3 * time.Second

	for _, key := range []string{"k-1", "k-2"} { // a fresh connection, then the pool's
		r, took := write(closed, key)
		requireProblem(t, r, http.StatusServiceUnavailable, "unavailable", "idempotency_unavailable")
		require.Equal(t, "1", r.header.Get("Retry-After"))
		require.Less(t, took, within, "the keyed write waited for go-redis's timeouts")
	}
	require.Zero(t, app.Count(t, "SELECT count(*) FROM kumiko_events"), "the refused keyed writes wrote nothing")

	r, took := write(closed, "")
	require.Equal(t, http.StatusOK, r.status, r.String())
	require.Less(t, took, within, "an unkeyed write never waits for Redis")

	r, took = write(open, "k-3")
	require.Equal(t, http.StatusOK, r.status, r.String())
	require.Less(t, took, within, "fail-open runs the keyed write within the bound")
	require.Equal(t, 2, app.Count(t, "SELECT count(*) FROM kumiko_events"))
}

// silentListener listens on a free port of 127.0.0.1 and accepts every
// connection, reads what it is sent and never answers — a Redis that hangs.
// Its connections close when the test ends.
func silentListener(t *testing.T) string {
	t.Helper()
	ln, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var (
		mu     sync.Mutex
		conns  []net.Conn
		closed bool
		wg     sync.WaitGroup
	)
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			if closed {
				_ = c.Close()
			}
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() { _, _ = io.Copy(io.Discard, c) })
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		closed = true
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

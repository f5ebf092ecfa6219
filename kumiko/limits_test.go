package kumiko_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	khttp "github.com/kumiko-go/kumiko/http"
	"github.com/kumiko-go/kumiko/kumiko"
	"github.com/kumiko-go/kumiko/kumikotest"
	"github.com/kumiko-go/kumiko/pipeline"
	"github.com/kumiko-go/kumiko/samples/tasks"
)

// generous bounds every wait of these tests: far longer than any timeout
// they configure, so only a server that never acts runs into it.
const generous = 15 * time.Second

// startLimited starts a server over a fresh database with cfg's limits.
func startLimited(t *testing.T, cfg kumiko.Config) (*kumiko.App, *kumikotest.DB) {
	t.Helper()
	db := kumikotest.NewDB(t, kumikotest.MaxConns(4))
	cfg.DatabaseURL, cfg.Schema, cfg.JWTSecret, cfg.Addr, cfg.InstanceID = db.URL, db.Schema, secret, "127.0.0.1:0", "limits"
	app, err := kumiko.BuildServer(context.Background(), cfg, tasks.Feature)
	require.NoError(t, err)
	require.NoError(t, app.Start(context.Background()))
	t.Cleanup(func() { _ = app.Stop(context.Background()) })
	return app, db
}

func dial(t *testing.T, app *kumiko.App) net.Conn {
	t.Helper()
	conn, err := net.DialTimeout("tcp", app.Addr(), generous)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// requireClosedByServer reads conn until the server closes it and returns
// what it read; a read that runs into the generous deadline fails the test.
func requireClosedByServer(t *testing.T, conn net.Conn, what string) string {
	t.Helper()
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(generous)))
	got, err := io.ReadAll(conn)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("%s: the server kept the connection open (read %q)", what, got)
	}
	if err != nil && !errors.Is(err, syscall.ECONNRESET) {
		require.NoError(t, err, what)
	}
	return string(got)
}

const slowBodyHead = "POST /api/write HTTP/1.1\r\nHost: kumiko\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n"

// A client that sends its headers and then withholds or trickles its body is
// disconnected after ReadTimeout.
func TestServerReadTimeoutDropsSlowBodies(t *testing.T) {
	t.Parallel()
	app, _ := startLimited(t, kumiko.Config{ReadTimeout: 300 * time.Millisecond})

	missing := dial(t, app)
	_, err := io.WriteString(missing, slowBodyHead+`{"ty`)
	require.NoError(t, err)
	requireClosedByServer(t, missing, "a withheld body")

	trickle := dial(t, app)
	_, err = io.WriteString(trickle, slowBodyHead)
	require.NoError(t, err)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				if _, err := trickle.Write([]byte(" ")); err != nil {
					return
				}
			}
		}
	})
	requireClosedByServer(t, trickle, "a trickled body")
	close(stop)
	wg.Wait()
}

// A keep-alive connection that sends no next request is closed after
// IdleTimeout.
func TestServerIdleTimeoutClosesKeepAlive(t *testing.T) {
	t.Parallel()
	app, _ := startLimited(t, kumiko.Config{IdleTimeout: 300 * time.Millisecond})
	conn := dial(t, app)
	_, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: kumiko\r\n\r\n")
	require.NoError(t, err)
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(generous)))
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.False(t, resp.Close, "the connection is kept alive")

	rest, err := io.ReadAll(br)
	var ne net.Error
	require.False(t, errors.As(err, &ne) && ne.Timeout(), "the idle connection was never closed")
	require.Empty(t, rest)
}

// Headers past the default cap of 64 KiB answer 431.
func TestServerHeaderCap(t *testing.T) {
	t.Parallel()
	app, _ := startLimited(t, kumiko.Config{})
	conn := dial(t, app)
	go func() { // the server may stop reading before the end
		_, _ = io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: kumiko\r\nX-Big: "+strings.Repeat("b", 100<<10)+"\r\n\r\n")
	}()
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(generous)))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusRequestHeaderFieldsTooLarge, resp.StatusCode)

	// Headers within the cap are served.
	req, err := http.NewRequest(http.MethodGet, "http://"+app.Addr()+"/healthz", nil)
	require.NoError(t, err)
	req.Header.Set("X-Big", strings.Repeat("b", 32<<10))
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	ok, err := client.Do(req)
	require.NoError(t, err)
	ok.Body.Close()
	require.Equal(t, http.StatusOK, ok.StatusCode)
}

// GET /api/events outlives the read, write and idle timeouts: after all of
// them have passed, it still delivers a new event.
func TestEventStreamOutlivesServerTimeouts(t *testing.T) {
	t.Parallel()
	app, _ := startLimited(t, kumiko.Config{
		ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond, IdleTimeout: 400 * time.Millisecond,
	})
	base := "http://" + app.Addr()
	token, err := khttp.IssueToken([]byte(secret), "u-1", "01900000-0000-7000-8000-000000000001", []string{"User"}, time.Hour)
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/events", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	stream, err := client.Do(req)
	require.NoError(t, err)
	defer stream.Body.Close()
	require.Equal(t, http.StatusOK, stream.StatusCode)
	lines := make(chan string, 64)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() {
		defer close(lines)
		sc := bufio.NewScanner(stream.Body)
		for sc.Scan() {
			lines <- sc.Text()
		}
	})

	// An idle connection opened after the stream is closed after
	// IdleTimeout, which is longer than the read and write timeouts: by
	// then the stream has outlived all three.
	idle := dial(t, app)
	_, err = io.WriteString(idle, "GET /healthz HTTP/1.1\r\nHost: kumiko\r\n\r\n")
	require.NoError(t, err)
	requireClosedByServer(t, idle, "an idle connection")

	// The event comes from the executor itself: a write over HTTP would be
	// bound by this server's 100 ms RequestTimeout, which a loaded machine
	// can miss.
	_, err = app.Parts().Executor.Write(ctx, kumikotest.User(uuid.MustParse("01900000-0000-7000-8000-000000000001"), "u-1", "User"),
		pipeline.Request{Type: "task.create", Payload: []byte(`{"title":"still streaming"}`)})
	require.NoError(t, err)
	deadline := time.After(generous)
	for {
		select {
		case l, ok := <-lines:
			require.True(t, ok, "the stream ended")
			if strings.HasPrefix(l, "event: task.created") {
				return
			}
		case <-deadline:
			t.Fatal("no event on the stream")
		}
	}
}

// The server prunes idempotency keys past IdempotencyRetention on its
// schedule; newer keys stay.
func TestServerPrunesIdempotencyKeys(t *testing.T) {
	t.Parallel()
	app, db := startLimited(t, kumiko.Config{IdempotencyPruneInterval: 20 * time.Millisecond})
	require.NotNil(t, app.Parts().Executor)
	db.Exec(t, `INSERT INTO kumiko_idempotency_keys (tenant_id, user_id, key, created_at) VALUES
	('01900000-0000-7000-8000-000000000001', 'u', 'old', now() - interval '8 days'),
	('01900000-0000-7000-8000-000000000001', 'u', 'six-days', now() - interval '6 days'),
	('01900000-0000-7000-8000-000000000001', 'u', 'recent', now())`)
	require.Eventually(t, func() bool {
		return db.Count(t, `SELECT count(*) FROM kumiko_idempotency_keys WHERE key = 'old'`) == 0
	}, generous, 10*time.Millisecond, "the schedule pruned the old key")
	require.Equal(t, 2, db.Count(t, `SELECT count(*) FROM kumiko_idempotency_keys WHERE key IN ('six-days', 'recent')`))
}

// The limits are validated with the field named.
func TestLimitConfigValidation(t *testing.T) {
	t.Parallel()
	base := kumiko.Config{DatabaseURL: "postgres://x/y", JWTSecret: secret}
	cases := map[string]func(*kumiko.Config){
		"Config.IdempotencyRetention must be at least 24h0m0s": func(c *kumiko.Config) { c.IdempotencyRetention = time.Hour },
		"Config.MaxHeaderBytes must not be negative":           func(c *kumiko.Config) { c.MaxHeaderBytes = -1 },
		"Config.IdempotencyPruneInterval must not be negative": func(c *kumiko.Config) { c.IdempotencyPruneInterval = -time.Second },
		"Config.InstanceStaleAfter must be at least two Config.InstanceHeartbeat": func(c *kumiko.Config) {
			c.InstanceHeartbeat, c.InstanceStaleAfter = time.Second, time.Second
		},
		"Config.RequestTimeout must be less than Config.WriteTimeout": func(c *kumiko.Config) {
			c.RequestTimeout, c.WriteTimeout = time.Minute, time.Minute
		},
	}
	for want, mutate := range cases {
		cfg := base
		mutate(&cfg)
		_, err := kumiko.BuildServer(context.Background(), cfg, tasks.Feature)
		require.ErrorContains(t, err, want)
	}
	cfg := kumiko.Config{}.WithDefaults()
	require.Equal(t, fmt.Sprint(30*time.Second, 60*time.Second, 120*time.Second, 64<<10, 7*24*time.Hour, 30*time.Second),
		fmt.Sprint(cfg.ReadTimeout, cfg.WriteTimeout, cfg.IdleTimeout, cfg.MaxHeaderBytes, cfg.IdempotencyRetention, cfg.RequestTimeout))
	require.Equal(t, 5*time.Second, kumiko.Config{WriteTimeout: 10 * time.Second}.WithDefaults().RequestTimeout,
		"a short WriteTimeout leaves room for the timeout's answer")
}

// A request stuck behind a lock ends at RequestTimeout with 503 unavailable
// (timeout), well inside WriteTimeout, instead of holding its connection
// for as long as the lock is held.
func TestServerRequestTimeout(t *testing.T) {
	t.Parallel()
	// Long enough for the first write on a loaded machine (the race detector,
	// parallel tests), short against the default.
	app, db := startLimited(t, kumiko.Config{RequestTimeout: 2 * time.Second})
	token, err := khttp.IssueToken([]byte(secret), "u-1", "01900000-0000-7000-8000-000000000001", []string{"User"}, time.Hour)
	require.NoError(t, err)
	base := "http://" + app.Addr()
	post(t, base+"/api/write", token, `{"type":"task.create","payload":{"title":"locked"}}`, http.StatusOK)

	ctx := context.Background()
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(ctx) })
	_, err = tx.Exec(ctx, `LOCK TABLE read_task IN ACCESS EXCLUSIVE MODE`)
	require.NoError(t, err)

	body := post(t, base+"/api/query", token, `{"type":"task.list","payload":{}}`, http.StatusServiceUnavailable)
	require.Contains(t, body, `"reason":"timeout"`)
	require.NoError(t, tx.Rollback(ctx))
	post(t, base+"/api/query", token, `{"type":"task.list","payload":{}}`, http.StatusOK)
}

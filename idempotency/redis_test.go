package idempotency_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/idempotency"
	"github.com/kumiko-go/kumiko/idempotency/idempotencytest"
)

const defaultRedisURL = "redis://127.0.0.1:6379/0"

func TestRedisStore(t *testing.T) {
	t.Parallel()
	idempotencytest.Run(t, func(t *testing.T, ttl, lockTTL time.Duration) idempotency.Store {
		return newRedisStore(t, idempotency.RedisConfig{TTL: ttl, LockTTL: lockTTL})
	})
}

// TestRedisStoreRecord pins what lands in Redis: one key under the prefix,
// a JSON record, and the lifetimes of claim and response.
func TestRedisStoreRecord(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	client := redisClient(t)
	prefix := testPrefix(t, client)
	s := idempotency.NewRedisStore(client, idempotency.RedisConfig{Prefix: prefix, TTL: time.Hour, LockTTL: time.Minute})
	key := idempotency.Key{Tenant: "tenant", User: "user", Key: "key"}
	rkey := idempotency.RedisKey(s, key)
	require.Regexp(t, "^"+prefix+"[0-9a-f]{64}$", rkey)
	fp := "\xffnot utf-8"

	resp, err := s.Claim(ctx, key, fp)
	require.NoError(t, err)
	require.Nil(t, resp)
	requireRecord(t, client, rkey, "pending", fp, nil)
	requireTTL(t, client, rkey, time.Minute)

	want := idempotency.Response{Status: 201, ContentType: "application/json", Body: []byte(`{"id":1}`)}
	require.NoError(t, s.Complete(ctx, key, fp, want))
	requireRecord(t, client, rkey, "done", fp, &want)
	requireTTL(t, client, rkey, time.Hour)

	keys, err := client.Keys(ctx, prefix+"*").Result()
	require.NoError(t, err)
	require.Equal(t, []string{rkey}, keys)
}

func TestRedisStoreDefaults(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	client := redisClient(t)
	s := idempotency.NewRedisStore(client, idempotency.RedisConfig{})
	key := idempotency.Key{Tenant: "test-" + rand.Text(), User: "user", Key: "key"}
	rkey := idempotency.RedisKey(s, key)
	t.Cleanup(func() { deleteKeys(t, client, rkey) })
	require.Regexp(t, "^kumiko:idem:[0-9a-f]{64}$", rkey)

	require.NoError(t, claimErr(s.Claim(ctx, key, "fp")))
	requireTTL(t, client, rkey, idempotency.DefaultLockTTL)
	require.NoError(t, s.Complete(ctx, key, "fp", idempotency.Response{Status: 200}))
	requireTTL(t, client, rkey, idempotency.DefaultTTL)
}

func TestRedisStoreCorruptRecordIsUnavailable(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	client := redisClient(t)
	s := idempotency.NewRedisStore(client, idempotency.RedisConfig{Prefix: testPrefix(t, client)})
	key := idempotency.Key{Key: "corrupt"}
	require.NoError(t, client.Set(ctx, idempotency.RedisKey(s, key), "not json", time.Minute).Err())

	_, err := s.Claim(ctx, key, "fp")
	require.ErrorIs(t, err, idempotency.ErrUnavailable)
	require.ErrorIs(t, s.Complete(ctx, key, "fp", idempotency.Response{Status: 200}), idempotency.ErrUnavailable)
	require.ErrorIs(t, s.Release(ctx, key, "fp"), idempotency.ErrUnavailable)
}

func TestRedisStoreRejectsBadConfig(t *testing.T) {
	t.Parallel()
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
	t.Cleanup(func() { _ = client.Close() })
	require.PanicsWithError(t, "idempotency: RedisConfig.LockTTL is negative (-1s)", func() {
		idempotency.NewRedisStore(client, idempotency.RedisConfig{LockTTL: -time.Second})
	})
	require.PanicsWithValue(t, "idempotency: NewRedisStore: client is nil", func() {
		idempotency.NewRedisStore(nil, idempotency.RedisConfig{})
	})
}

// TestRedisStoreServerGone kills a private redis-server under a store and
// requires every call to fail fast with ErrUnavailable.
func TestRedisStoreServerGone(t *testing.T) {
	t.Parallel()
	addr, stop := startRedisServer(t)
	client := redis.NewClient(&redis.Options{
		Addr:          addr,
		DialTimeout:   250 * time.Millisecond,
		ReadTimeout:   250 * time.Millisecond,
		WriteTimeout:  250 * time.Millisecond,
		MaxRetries:    -1,
		DialerRetries: 1,
	})
	t.Cleanup(func() { _ = client.Close() })
	s := idempotency.NewRedisStore(client, idempotency.RedisConfig{})
	key := idempotency.Key{Tenant: "t", User: "u", Key: "k"}

	require.NoError(t, claimErr(s.Claim(t.Context(), key, "fp")), "the private server works")
	stop()

	// A deadline far beyond the client's timeouts: an error caused by it
	// would mean the store waited instead of failing fast.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for name, call := range storeCalls(ctx, s, key) {
		err := call()
		require.ErrorIs(t, err, idempotency.ErrUnavailable, name)
		require.NotErrorIs(t, err, context.DeadlineExceeded, name)
		require.NoError(t, ctx.Err(), "%s waited for the test deadline", name)
	}
}

// newRedisStore returns a store on the test Redis under a prefix of its own,
// whose keys are deleted when the test ends.
func newRedisStore(t *testing.T, cfg idempotency.RedisConfig) *idempotency.RedisStore {
	client := redisClient(t)
	cfg.Prefix = testPrefix(t, client)
	return idempotency.NewRedisStore(client, cfg)
}

// redisClient connects to REDIS_URL (default redis://127.0.0.1:6379/0) and
// fails the test when Redis does not answer.
func redisClient(t *testing.T) *redis.Client {
	t.Helper()
	url := os.Getenv("REDIS_URL")
	if url == "" {
		url = defaultRedisURL
	}
	opts, err := redis.ParseURL(url)
	require.NoError(t, err, "REDIS_URL")
	client := redis.NewClient(opts)
	t.Cleanup(func() { _ = client.Close() })
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if err := client.Ping(ctx).Err(); err != nil {
		t.Fatalf("Redis at %s does not answer (%v): the idempotency tests need a real Redis; start one (make services) or set REDIS_URL", opts.Addr, err)
	}
	return client
}

// testPrefix returns a fresh key prefix and deletes its keys when the test
// ends.
func testPrefix(t *testing.T, client *redis.Client) string {
	t.Helper()
	prefix := "kumiko:idemtest:" + rand.Text() + ":"
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var keys []string
		iter := client.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		if err := iter.Err(); err != nil {
			t.Errorf("list the keys under %s: %v", prefix, err)
			return
		}
		deleteKeys(t, client, keys...)
	})
	return prefix
}

func deleteKeys(t *testing.T, client *redis.Client, keys ...string) {
	if len(keys) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := client.Del(ctx, keys...).Err(); err != nil {
		t.Errorf("delete test keys: %v", err)
	}
}

func requireRecord(t *testing.T, client *redis.Client, rkey, state, fp string, resp *idempotency.Response) {
	t.Helper()
	raw, err := client.Get(t.Context(), rkey).Bytes()
	require.NoError(t, err)
	var rec struct {
		State       string                `json:"state"`
		Fingerprint []byte                `json:"fingerprint"` // base64
		Response    *idempotency.Response `json:"response"`
	}
	require.NoError(t, json.Unmarshal(raw, &rec), "record %s", raw)
	require.Equal(t, state, rec.State)
	require.Equal(t, []byte(fp), rec.Fingerprint)
	require.Equal(t, resp, rec.Response)
}

// requireTTL requires that rkey expires within lifetime but not much sooner.
func requireTTL(t *testing.T, client *redis.Client, rkey string, lifetime time.Duration) {
	t.Helper()
	ttl, err := client.PTTL(t.Context(), rkey).Result()
	require.NoError(t, err)
	require.LessOrEqual(t, ttl, lifetime)
	require.Greater(t, ttl, lifetime/2)
}

// startRedisServer runs a private redis-server on a free port without
// persistence and returns its address and a function that kills it and
// waits for it to exit. The server is also killed when the test ends.
func startRedisServer(t *testing.T) (addr string, stop func()) {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	require.NoError(t, err, "the test starts its own redis-server: install it")

	for attempt := 1; ; attempt++ {
		addr = freeAddr(t)
		_, port, _ := net.SplitHostPort(addr)
		cmd := exec.Command(bin, "--port", port, "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--dir", t.TempDir())
		require.NoError(t, cmd.Start(), "start redis-server")
		exited := make(chan struct{})
		var waitErr error
		go func() {
			waitErr = cmd.Wait()
			close(exited)
		}()
		stop = func() {
			_ = cmd.Process.Kill() // fails harmlessly once the process is gone
			<-exited
		}
		t.Cleanup(stop)

		err := waitForRedis(t, addr, exited)
		if err == nil {
			return addr, stop
		}
		stop()
		if attempt == 3 { // the port may have been taken after freeAddr closed it
			t.Fatalf("redis-server on %s: %v (exit: %v)", addr, err, waitErr)
		}
	}
}

// freeAddr returns a 127.0.0.1 address with a port nobody listened on a
// moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

// waitForRedis pings addr until it answers, the server exits or 10s pass.
func waitForRedis(t *testing.T, addr string, exited <-chan struct{}) error {
	client := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 250 * time.Millisecond})
	defer func() { _ = client.Close() }()
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		err := client.Ping(t.Context()).Err()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no answer after 10s: %w", err)
		}
		select {
		case <-exited:
			return errors.New("redis-server exited")
		case <-tick.C:
		}
	}
}

// A call whose context ended fails with the context's error, not with
// ErrUnavailable: the client went away, Redis is fine.
func TestRedisStoreCallerCancellationIsNoOutage(t *testing.T) {
	t.Parallel()
	s := newRedisStore(t, idempotency.RedisConfig{})
	key := idempotency.Key{Tenant: "t", User: "u", Key: "k"}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	for name, call := range storeCalls(ctx, s, key) {
		err := call()
		require.ErrorIs(t, err, context.Canceled, name)
		require.NotErrorIs(t, err, idempotency.ErrUnavailable, name)
	}
}

// storeCalls are the three calls of a store on key under ctx, by name.
func storeCalls(ctx context.Context, s idempotency.Store, key idempotency.Key) map[string]func() error {
	return map[string]func() error{
		"claim":    func() error { return claimErr(s.Claim(ctx, key, "fp")) },
		"complete": func() error { return s.Complete(ctx, key, "fp", idempotency.Response{Status: 200}) },
		"release":  func() error { return s.Release(ctx, key, "fp") },
	}
}

// A Redis that accepts connections and never answers fails every call with
// ErrUnavailable at the store's Timeout, whether the client honours context
// deadlines or (go-redis's default) waits for its own 5 s read timeout; a
// caller whose context ends first gets the context's error.
func TestRedisStoreTimeoutBoundsAHangingServer(t *testing.T) {
	t.Parallel()
	addr := hangingServer(t)
	key := idempotency.Key{Tenant: "t", User: "u", Key: "k"}
	for _, honoursContext := range []bool{false, true} {
		client := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: honoursContext})
		t.Cleanup(func() { _ = client.Close() }) // ends the abandoned calls
		s := idempotency.NewRedisStore(client, idempotency.RedisConfig{Timeout: 300 * time.Millisecond})
		for name, call := range storeCalls(t.Context(), s, key) {
			start := time.Now()
			err := call()
			require.ErrorIs(t, err, idempotency.ErrUnavailable, "%s (context deadlines honoured: %v)", name, honoursContext)
			require.ErrorContains(t, err, "no answer within", name)
			require.Less(t, time.Since(start), 2*time.Second, "%s waited for the client's own timeouts", name)
		}

		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		err := claimErr(s.Claim(ctx, key, "fp"))
		cancel()
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.NotErrorIs(t, err, idempotency.ErrUnavailable, "the caller's own deadline is no outage")
	}
}

// hangingServer accepts connections on a free port of 127.0.0.1 and never
// answers on them; they close when the test ends.
func hangingServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	accepted := make(chan net.Conn, 1024)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
		close(accepted)
		for c := range accepted {
			_ = c.Close()
		}
	})
	return ln.Addr().String()
}

package lock_test

import (
	"context"
	"crypto/rand"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/kumikotest"
	"github.com/kumiko-go/kumiko/lock"
	"github.com/kumiko-go/kumiko/lock/locktest"
)

func TestPostgres(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	cfg := lock.PostgresConfig{Namespace: "t-" + rand.Text(), CheckInterval: 50 * time.Millisecond}
	locktest.Run(t, func(t *testing.T) locktest.Subject {
		return locktest.Subject{
			Locker: newPostgres(t, db.Pool, cfg),
			Break: func(t *testing.T, h *lock.Held) {
				require.Equal(t, 1, db.Count(t, sqlTerminateHolder, cfg.Namespace+":"+h.Name()), "the holder's backend is terminated")
			},
		}
	})
}

func TestRedis(t *testing.T) {
	t.Parallel()
	client := redisClient(t)
	cfg := lock.RedisConfig{Prefix: testPrefix(t, client), Lease: 3 * time.Second, Renew: 100 * time.Millisecond, Retry: 5 * time.Millisecond}
	locktest.Run(t, func(t *testing.T) locktest.Subject {
		return locktest.Subject{
			Locker: newRedis(t, redisClient(t), cfg),
			Break: func(t *testing.T, h *lock.Held) {
				require.Equal(t, int64(1), client.Del(t.Context(), cfg.Prefix+h.Name()).Val(), "the lease is deleted")
			},
		}
	})
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	_, err := lock.NewRedis(nil, lock.RedisConfig{Lease: time.Second, Renew: 2 * time.Second})
	require.ErrorContains(t, err, "RedisConfig.Renew")
	_, err = lock.NewRedis(nil, lock.RedisConfig{Lease: -time.Second})
	require.ErrorContains(t, err, "RedisConfig.Lease")
	db := kumikotest.NewDB(t)
	_, err = lock.NewPostgres(db.Pool, lock.PostgresConfig{CheckInterval: -1})
	require.ErrorContains(t, err, "PostgresConfig.CheckInterval")
}

// sqlTerminateHolder ends the backend that holds the advisory lock of $1
// (namespace:name, hashed like the provider does).
const sqlTerminateHolder = `SELECT count(pg_terminate_backend(pid))::int FROM pg_locks
WHERE locktype = 'advisory' AND granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND ((classid::bigint << 32) | objid::bigint) = hashtextextended($1, 0)`

func newPostgres(t *testing.T, pool *pgxpool.Pool, cfg lock.PostgresConfig) *lock.Postgres {
	t.Helper()
	l, err := lock.NewPostgres(pool, cfg)
	require.NoError(t, err)
	return l
}

func newRedis(t *testing.T, client redis.UniversalClient, cfg lock.RedisConfig) *lock.Redis {
	t.Helper()
	l, err := lock.NewRedis(client, cfg)
	require.NoError(t, err)
	return l
}

func redisClient(t testing.TB) *redis.Client {
	t.Helper()
	opts, err := redis.ParseURL(kumikotest.RedisURL())
	require.NoError(t, err, "REDIS_URL")
	client := redis.NewClient(opts)
	t.Cleanup(func() { _ = client.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := client.Ping(ctx).Err(); err != nil {
		t.Fatalf("Redis at %s does not answer (%v): the lock tests need a real Redis; start one (make services) or set REDIS_URL", opts.Addr, err)
	}
	return client
}

// testPrefix returns a fresh key prefix and deletes its keys when the test
// ends.
func testPrefix(t testing.TB, client *redis.Client) string {
	prefix := "kumiko:locktest:" + rand.Text() + ":"
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		keys, err := client.Keys(ctx, prefix+"*").Result()
		if err == nil && len(keys) > 0 {
			err = client.Del(ctx, keys...).Err()
		}
		if err != nil {
			t.Errorf("delete the keys under %s: %v", prefix, err)
		}
	})
	return prefix
}

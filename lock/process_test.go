package lock_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/kumikotest"
	"github.com/kumiko-go/kumiko/lock"
)

// The subprocesses of the tests below read what to do from the environment.
const (
	childEnv    = "KUMIKO_TEST_LOCK_CHILD" // "hold" or "exclusion"
	providerEnv = "KUMIKO_TEST_LOCK_PROVIDER"
	dbEnv       = "KUMIKO_TEST_LOCK_DB"
	prefixEnv   = "KUMIKO_TEST_LOCK_PREFIX" // Redis prefix or Postgres namespace
	nameEnv     = "KUMIKO_TEST_LOCK_NAME"
	leaseEnv    = "KUMIKO_TEST_LOCK_LEASE"
)

const (
	childGoroutines, childRounds = 16, 3
	processes                    = 3
)

type childSpec struct {
	provider, db, prefix, name string
	lease                      time.Duration
}

func (c childSpec) env(mode string) []string {
	return append(os.Environ(), childEnv+"="+mode, providerEnv+"="+c.provider, dbEnv+"="+c.db,
		prefixEnv+"="+c.prefix, nameEnv+"="+c.name, leaseEnv+"="+c.lease.String())
}

func specFromEnv() childSpec {
	lease, _ := time.ParseDuration(os.Getenv(leaseEnv))
	return childSpec{os.Getenv(providerEnv), os.Getenv(dbEnv), os.Getenv(prefixEnv), os.Getenv(nameEnv), lease}
}

func (c childSpec) locker(ctx context.Context) (lock.Locker, func(), error) {
	if c.provider == "redis" {
		opts, err := redis.ParseURL(kumikotest.RedisURL())
		if err != nil {
			return nil, nil, err
		}
		client := redis.NewClient(opts)
		l, err := lock.NewRedis(client, lock.RedisConfig{Prefix: c.prefix, Lease: c.lease, Renew: c.lease / 5, Retry: 5 * time.Millisecond})
		return l, func() { _ = client.Close() }, err
	}
	pool, err := pgxpool.New(ctx, c.db)
	if err != nil {
		return nil, nil, err
	}
	l, err := lock.NewPostgres(pool, lock.PostgresConfig{Namespace: c.prefix, CheckInterval: 50 * time.Millisecond})
	return l, pool.Close, err
}

// runChild is the body of a subprocess: "hold" takes the lock, says "held",
// says "lost" when Lost closes, and releases it on a line from stdin;
// "exclusion" enters the lock's critical section childRounds times from each
// of childGoroutines goroutines and counts clashes in the table excl.
func runChild(mode string) {
	ctx := context.Background()
	spec := specFromEnv()
	l, closeFn, err := spec.locker(ctx)
	if err != nil {
		panic(err)
	}
	defer closeFn()
	switch mode {
	case "hold":
		h, err := l.Acquire(ctx, spec.name, 10*time.Second)
		if err != nil || h == nil {
			panic(fmt.Sprintf("acquire: %v %v", h, err))
		}
		fmt.Println("held")
		released := make(chan struct{})
		go func() {
			_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
			_ = h.Release(ctx)
			fmt.Println("released")
			close(released)
		}()
		select {
		case <-h.Lost():
			fmt.Println("lost")
			<-released
		case <-released:
		}
	case "exclusion":
		pool, err := pgxpool.New(ctx, spec.db)
		if err != nil {
			panic(err)
		}
		defer pool.Close()
		var wg sync.WaitGroup
		for range childGoroutines {
			wg.Go(func() {
				for range childRounds {
					h, err := l.Acquire(ctx, spec.name, time.Minute)
					if err != nil || h == nil {
						panic(fmt.Sprintf("acquire: %v %v", h, err))
					}
					mustExec(ctx, pool, `UPDATE excl SET inside = inside + 1, clashes = clashes + (inside > 0)::int`)
					mustExec(ctx, pool, `UPDATE excl SET inside = inside - 1, entered = entered + 1`)
					if err := h.Release(ctx); err != nil {
						panic(err)
					}
				}
			})
		}
		wg.Wait()
	}
}

func mustExec(ctx context.Context, pool *pgxpool.Pool, sql string) {
	if _, err := pool.Exec(ctx, sql); err != nil {
		panic(err)
	}
}

// child is a running subprocess whose stdout lines arrive on lines.
type child struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
}

func startChild(t *testing.T, spec childSpec, mode string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = spec.env(mode)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	c := &child{cmd: cmd, stdin: stdin, lines: make(chan string, 8)}
	go func() {
		defer close(c.lines)
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			c.lines <- strings.TrimSpace(s.Text())
		}
	}()
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return c
}

func (c *child) expect(t *testing.T, line string) {
	t.Helper()
	select {
	case got := <-c.lines:
		require.Equal(t, line, got)
	case <-time.After(30 * time.Second):
		t.Fatalf("the child did not say %q", line)
	}
}

func (c *child) kill(t *testing.T) {
	t.Helper()
	require.NoError(t, c.cmd.Process.Signal(syscall.SIGKILL))
	_ = c.cmd.Wait()
}

func providers(t *testing.T) map[string]childSpec {
	db := kumikotest.NewDB(t)
	client := redisClient(t)
	return map[string]childSpec{
		"postgres": {provider: "postgres", db: db.URL, prefix: "t-" + rand.Text(), name: "job", lease: 5 * time.Second},
		"redis":    {provider: "redis", db: db.URL, prefix: testPrefix(t, client), name: "job", lease: 5 * time.Second},
	}
}

// Sixteen goroutines in each of three processes take one lock again and
// again; the critical section counts, in Postgres, how often it found
// another holder inside.
func TestMutualExclusionAcrossProcesses(t *testing.T) {
	t.Parallel()
	for provider, spec := range providers(t) {
		t.Run(provider, func(t *testing.T) {
			t.Parallel()
			db := kumikotest.NewDB(t, kumikotest.MaxConns(2))
			spec.db = db.URL
			db.Exec(t, "CREATE TABLE excl (inside int NOT NULL, clashes int NOT NULL, entered int NOT NULL)")
			db.Exec(t, "INSERT INTO excl VALUES (0, 0, 0)")
			var children []*child
			for range processes {
				children = append(children, startChild(t, spec, "exclusion"))
			}
			for _, c := range children {
				require.NoError(t, c.cmd.Wait(), "the child finished its rounds")
			}
			require.Zero(t, db.Count(t, "SELECT clashes FROM excl"), "a holder found another one inside")
			require.Equal(t, processes*childGoroutines*childRounds, db.Count(t, "SELECT entered FROM excl"))
		})
	}
}

// A holder killed with SIGKILL frees its Postgres lock as soon as the server
// sees the connection drop.
func TestKilledHolderFreesPostgresLock(t *testing.T) {
	t.Parallel()
	spec := providers(t)["postgres"]
	pool := kumikotest.NewDB(t).Pool
	l := newPostgres(t, pool, lock.PostgresConfig{Namespace: spec.prefix})
	c := startChild(t, spec, "hold")
	c.expect(t, "held")
	h, err := l.Acquire(t.Context(), spec.name, 0)
	require.NoError(t, err)
	require.Nil(t, h, "the child holds the lock")
	c.kill(t)
	h, err = l.Acquire(t.Context(), spec.name, 20*time.Second)
	require.NoError(t, err)
	require.NotNil(t, h, "the killed holder's lock is free")
	require.NoError(t, h.Release(t.Context()))
}

// A holder killed with SIGKILL keeps its Redis lease until it expires, and
// no longer.
func TestKilledHolderFreesRedisLeaseAfterExpiry(t *testing.T) {
	t.Parallel()
	spec := providers(t)["redis"]
	client := redisClient(t)
	l := newRedis(t, client, lock.RedisConfig{Prefix: spec.prefix, Retry: 10 * time.Millisecond})
	c := startChild(t, spec, "hold")
	c.expect(t, "held")
	c.kill(t)
	h, err := l.Acquire(t.Context(), spec.name, 0)
	require.NoError(t, err)
	require.Nil(t, h, "the killed holder's lease has not expired yet")
	require.Positive(t, client.PTTL(t.Context(), spec.prefix+spec.name).Val(), "the lease lives on")
	h, err = l.Acquire(t.Context(), spec.name, 30*time.Second)
	require.NoError(t, err)
	require.NotNil(t, h, "the lease expired and the lock is free")
	require.NoError(t, h.Release(t.Context()))
}

// A holder paused (SIGSTOP) past its lease loses it: another locker takes
// the lock, the holder sees Lost when it resumes, and its Release leaves the
// new holder's lease alone.
func TestPausedHolderLosesRedisLease(t *testing.T) {
	t.Parallel()
	spec := providers(t)["redis"]
	spec.lease = time.Second
	client := redisClient(t)
	l := newRedis(t, client, lock.RedisConfig{Prefix: spec.prefix, Retry: 10 * time.Millisecond})
	c := startChild(t, spec, "hold")
	c.expect(t, "held")
	require.NoError(t, c.cmd.Process.Signal(syscall.SIGSTOP))
	h, err := l.Acquire(t.Context(), spec.name, 30*time.Second)
	require.NoError(t, err)
	require.NotNil(t, h, "the paused holder's lease expired")
	require.NoError(t, c.cmd.Process.Signal(syscall.SIGCONT))
	c.expect(t, "lost")
	_, err = io.WriteString(c.stdin, "release\n")
	require.NoError(t, err)
	c.expect(t, "released")
	require.NoError(t, c.cmd.Wait())
	select {
	case <-h.Lost():
		t.Fatal("the new holder lost its lease")
	default:
	}
	other, err := l.Acquire(t.Context(), spec.name, 0)
	require.NoError(t, err)
	require.Nil(t, other, "the paused holder's Release did not free the new holder's lease")
	require.NoError(t, h.Release(t.Context()))
}

package jobs_test

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/consumer"
	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/jobs"
	"github.com/kumiko-go/kumiko/kumikotest"
)

const childDispatcherEnv = "KUMIKO_TEST_JOBS_CHILD_DISPATCHER"

// runChildDispatcher runs a dispatcher with the jobs trigger until the
// process is killed.
func runChildDispatcher(dbURL string) {
	ctx := context.Background()
	u, _ := url.Parse(dbURL)
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		panic(err)
	}
	store, err := eventstore.New(pool, eventstore.Config{Schema: u.Query().Get("search_path")})
	if err != nil {
		panic(err)
	}
	r, err := jobs.New(store, jobs.Config{Logger: slog.New(slog.DiscardHandler)}, eventJob())
	if err != nil {
		panic(err)
	}
	c, _ := r.Consumer()
	d, err := consumer.New(store, consumer.Config{InstanceID: "child-" + strconv.Itoa(os.Getpid()), PollInterval: 10 * time.Millisecond}, c)
	if err != nil {
		panic(err)
	}
	if err := d.Start(ctx); err != nil {
		panic(err)
	}
	select {} // until SIGKILL
}

// Two dispatcher processes, killed with SIGKILL again and again while a
// burst of 10,000 events is appended: afterwards every event enqueued its
// job exactly once.
func TestEventJobsSurviveSIGKILL(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	_, err := jobs.Migrate(t.Context(), db.Store)
	require.NoError(t, err)
	const n = 10_000
	var writer sync.WaitGroup
	writer.Go(func() { appendBurst(t, db.Store, n) })

	start := func() *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childDispatcherEnv+"="+db.URL)
		cmd.Stderr = os.Stderr
		require.NoError(t, cmd.Start())
		return cmd
	}
	rng := rand.New(rand.NewPCG(1, uint64(time.Now().UnixNano())))
	for kill := range 6 {
		a, b := start(), start()
		before := db.Count(t, "SELECT count(*) FROM river_job")
		require.Eventually(t, func() bool { c := db.Count(t, "SELECT count(*) FROM river_job"); return c > before || c == n }, 30*time.Second, 5*time.Millisecond,
			"kill %d: the children enqueue jobs", kill)
		time.Sleep(time.Duration(rng.IntN(40)) * time.Millisecond) // a random point mid-stream, not a wait for a condition
		for _, c := range []*exec.Cmd{a, b} {
			require.NoError(t, c.Process.Signal(syscall.SIGKILL))
			_ = c.Wait()
		}
	}
	writer.Wait()
	last := start()
	t.Cleanup(func() { _ = last.Process.Kill(); _ = last.Wait() })
	requireOneJobPerEvent(t, db, n)
}

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
	store := childStore(dbURL)
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

// childStore is the store of a test's schema in a child process.
func childStore(dbURL string) *eventstore.Store {
	u, _ := url.Parse(dbURL)
	pool, err := pgxpool.New(context.Background(), dbURL)
	if err != nil {
		panic(err)
	}
	store, err := eventstore.New(pool, eventstore.Config{Schema: u.Query().Get("search_path")})
	if err != nil {
		panic(err)
	}
	return store
}

// startChild starts this test binary as a child process with env set to
// the test database's URL.
func startChild(t *testing.T, db *kumikotest.DB, env string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env+"="+db.URL)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	return cmd
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

	start := func() *exec.Cmd { return startChild(t, db, childDispatcherEnv) }
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

const childWorkerEnv = "KUMIKO_TEST_JOBS_CHILD_WORKER"

// victim is the job of TestCrashedProcessesJobIsRescued.
func victim(work func(context.Context, jobs.Run) error) jobs.Job {
	return jobs.Job{Name: "crash.victim", Timeout: 3 * time.Second, Work: work}
}

// rescueAfter is the RescueAfter of TestCrashedProcessesJobIsRescued: the
// victim's timeout.
const rescueAfter = 3 * time.Second

// runChildWorker works jobs until the process is killed; the victim's
// attempt blocks until then, whatever its context says, so that the job is
// running when the process dies however loaded the machine is.
func runChildWorker(dbURL string) {
	r, err := jobs.New(childStore(dbURL), jobs.Config{Logger: slog.New(slog.DiscardHandler), PollInterval: 50 * time.Millisecond, RescueAfter: rescueAfter},
		victim(func(context.Context, jobs.Run) error { select {} }))
	if err != nil {
		panic(err)
	}
	if err := r.Start(context.Background()); err != nil {
		panic(err)
	}
	select {} // until SIGKILL
}

// A process killed with SIGKILL in the middle of a job leaves the job
// running; another process, once it leads, rescues it and works it again,
// within RescueAfter plus the rescuer's 30 seconds plus the 20 seconds a
// dead leader's lease can last (the dead process was the leader: it was
// the only one), plus the retry's backoff (about a second) and River's
// scheduler interval (5 s).
func TestCrashedProcessesJobIsRescued(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	cfg := jobs.Config{RescueAfter: rescueAfter}
	e, err := newRunner(t, db, cfg, false, victim(noop)).Enqueue(t.Context(), "crash.victim", nil, jobs.Options{})
	require.NoError(t, err)
	child := startChild(t, db, childWorkerEnv)
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
	require.Eventually(t, func() bool {
		return db.Count(t, "SELECT count(*) FROM river_job WHERE id = $1 AND state = 'running'", e.ID) == 1
	}, 30*time.Second, 5*time.Millisecond, "the child process works the job")
	require.NoError(t, child.Process.Signal(syscall.SIGKILL))
	_ = child.Wait()
	killed := time.Now()

	ran := make(chan jobs.Run, 1)
	r := newRunner(t, db, cfg, true, victim(func(_ context.Context, run jobs.Run) error {
		ran <- run
		return nil
	}))
	const bound = rescueAfter + 30*time.Second + 20*time.Second + 6*time.Second
	run := receiveWithin(t, ran, bound+10*time.Second-time.Since(killed), "the rescued job")
	require.Equal(t, 2, run.Attempt, "the killed attempt counts as failed")
	in := waitState(t, r, e.ID, "completed")
	require.Len(t, in.Errors, 1)
	require.Equal(t, "Stuck job rescued by JobRescuer", in.Errors[0].Error)
	t.Logf("rescued and worked %s after the kill", time.Since(killed).Round(time.Second))
}

package e2e_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/kumiko"
)

// load creates entities through its targets from several goroutines until
// it is finished, and keeps the ids of the creates that were acknowledged
// (200). A target that refuses or is gone is tried again, round robin.
type load struct {
	mu      sync.Mutex
	targets []*client
	acked   []uuid.UUID
	failed  int
	stop    chan struct{}
	wg      sync.WaitGroup
	once    sync.Once
}

// startLoad starts writers goroutines posting typ with a title.
func startLoad(t testing.TB, writers int, typ string, targets ...*client) *load {
	l := &load{targets: targets, stop: make(chan struct{})}
	for w := range writers {
		l.wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-l.stop:
					return
				default:
				}
				l.mu.Lock()
				c := l.targets[(w+i)%len(l.targets)]
				l.mu.Unlock()
				r, err := c.try(http.MethodPost, "/api/write", map[string]any{"type": typ, "payload": map[string]any{"title": fmt.Sprintf("load %d-%d", w, i)}})
				var created struct{ Data entity }
				if err == nil && r.status == http.StatusOK && json.Unmarshal(r.body, &created) == nil {
					l.mu.Lock()
					l.acked = append(l.acked, created.Data.ID)
					l.mu.Unlock()
					continue
				}
				l.mu.Lock()
				l.failed++
				l.mu.Unlock()
				time.Sleep(10 * time.Millisecond) // a refused or lost request: not in a hot loop
			}
		})
	}
	t.Cleanup(func() { l.finish() })
	return l
}

// retarget sends the next writes to targets.
func (l *load) retarget(targets ...*client) {
	l.mu.Lock()
	l.targets = targets
	l.mu.Unlock()
}

func (l *load) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acked)
}

// waitAcked waits until at least n more writes than now are acknowledged.
func (l *load) waitAcked(t testing.TB, n int) {
	t.Helper()
	want := l.count() + n
	waitFor(t, 60*time.Second, "acknowledged writes", func() (bool, string) {
		got := l.count()
		return got >= want, fmt.Sprintf("%d, want %d", got, want)
	})
}

// finish stops the writers and returns the acknowledged ids.
func (l *load) finish() []uuid.UUID {
	l.once.Do(func() { close(l.stop) })
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]uuid.UUID(nil), l.acked...)
}

// SIGTERM while eight writers keep writing through HTTP: the process exits
// 0 within ShutdownTimeout + kumiko.StopMargin, and every write that was
// answered 200 is in the database, once.
func TestSIGTERMUnderWriteLoad(t *testing.T) {
	t.Parallel()
	reserve(t, 1)
	const shutdown = 5 * time.Second
	a := newApp(t, "tasks", "KUMIKO_SHUTDOWN_TIMEOUT="+shutdown.String())
	srv := a.serve(t, "sigterm-load")
	l := startLoad(t, 8, "task.create", a.as(t, srv, uuid.New(), "writer", "User"))
	l.waitAcked(t, 200)

	sent := srv.signal(syscall.SIGTERM)
	before := l.count()
	code := srv.wait(shutdown + kumiko.StopMargin + stopSlack)
	took := time.Since(sent)
	acked := l.finish()
	t.Logf("stopped in %s; %d writes acknowledged, %d after the signal, %d refused or lost", took, len(acked), len(acked)-before, l.failed)
	require.Zero(t, code, "a stop that abandoned nothing exits 0")
	require.Less(t, took, shutdown+kumiko.StopMargin+stopSlack)

	require.Equal(t, len(acked), a.db.Count(t, "SELECT count(*) FROM read_task WHERE id = ANY($1)", acked), "every acknowledged write is there")
	require.Equal(t, len(acked), a.db.Count(t, "SELECT count(*) FROM kumiko_events WHERE type = 'task.created' AND aggregate_id = ANY($1)", acked),
		"once")
	var stopped bool
	for _, rec := range srv.stderr.records() {
		stopped = stopped || rec["msg"] == "kumiko: stopped"
	}
	require.True(t, stopped, "the stop's log line")
}

// Two serve processes and a worker of e2eapp on one database, writers on
// both serve processes; one serve process is killed with SIGKILL and
// started again under the same instance id. Every acknowledged write is
// there once, and every committed note.created was delivered exactly once
// to the table-backed consumer e2e-deliveries, which keeps a row per
// delivery with no key that would hide a second one.
func TestKillOneOfThreeUnderLoad(t *testing.T) {
	t.Parallel()
	reserve(t, 3)
	a := newE2EApp(t)
	srvA, srvB := a.serve(t, "kill-a"), a.serve(t, "kill-b")
	a.worker(t, "kill-w")
	tenant := uuid.New()
	l := startLoad(t, 6, "note.create", a.as(t, srvA, tenant, "writer", "User"), a.as(t, srvB, tenant, "writer", "User"))
	l.waitAcked(t, 150)

	srvB.kill9()
	l.retarget(a.as(t, srvA, tenant, "writer", "User"))
	l.waitAcked(t, 100)
	srvB = a.serve(t, "kill-b")
	l.retarget(a.as(t, srvA, tenant, "writer", "User"), a.as(t, srvB, tenant, "writer", "User"))
	l.waitAcked(t, 150)
	acked := l.finish()
	t.Logf("%d writes acknowledged, %d refused or lost", len(acked), l.failed)

	require.Equal(t, len(acked), a.db.Count(t, "SELECT count(*) FROM read_note WHERE id = ANY($1)", acked), "every acknowledged write is there")
	require.Equal(t, len(acked), a.db.Count(t, "SELECT count(*) FROM kumiko_events WHERE type = 'note.created' AND aggregate_id = ANY($1)", acked), "once")
	events := a.db.Count(t, "SELECT count(*) FROM kumiko_events WHERE type = 'note.created'")
	require.GreaterOrEqual(t, events, len(acked), "acknowledged, and maybe some the killed process committed without answering")
	waitFor(t, 30*time.Second, "every committed note.created delivered", countIs(t, a.db, 0,
		"SELECT count(*) FROM kumiko_events e WHERE e.type = 'note.created' AND NOT EXISTS (SELECT 1 FROM e2e_deliveries d WHERE d.event_id = e.id)"))
	require.Equal(t, events, a.db.Count(t, "SELECT count(*) FROM e2e_deliveries"), "each delivered once: no second row for any event")
	require.Equal(t, events, a.db.Count(t, "SELECT count(DISTINCT event_id) FROM e2e_deliveries"))
}

// SIGTERM while a consumer's handler blocks for ever, ignoring its context:
// the process exits within ShutdownTimeout + kumiko.StopMargin, non-zero,
// with a log line naming the consumer it abandoned; the consumer's cursor
// did not move past the event, and the next start delivers it.
func TestSIGTERMWhileAHandlerBlocks(t *testing.T) {
	t.Parallel()
	reserve(t, 1)
	const shutdown = 2 * time.Second
	a := newE2EApp(t, "KUMIKO_SHUTDOWN_TIMEOUT="+shutdown.String())
	srv := a.serve(t, "block-1", "E2E_BLOCK=1")
	user := a.as(t, srv, uuid.New(), "user", "User")
	delivered := func(note uuid.UUID) func() (bool, string) {
		return countIs(t, a.db, 1, "SELECT count(*) FROM e2e_deliveries WHERE note_id = $1", note)
	}
	before := ok[entity](user.write("note.create", map[string]any{"title": "before"}))
	waitFor(t, 20*time.Second, "the note before is delivered", delivered(before.ID))
	blocking := ok[entity](user.write("note.create", map[string]any{"title": "block"}))
	after := ok[entity](user.write("note.create", map[string]any{"title": "after"}))

	var blockedAt int64
	waitFor(t, 20*time.Second, "the handler blocks", func() (bool, string) {
		for _, rec := range srv.stderr.records() {
			if rec["msg"] == "e2e: blocking" {
				blockedAt = int64(rec["event"].(float64))
				return true, ""
			}
		}
		return false, "not yet"
	})
	var blockEvent int64
	require.NoError(t, a.db.Pool.QueryRow(t.Context(), "SELECT id FROM kumiko_events WHERE aggregate_id = $1", blocking.ID).Scan(&blockEvent))
	require.Equal(t, blockEvent, blockedAt)

	sent := srv.signal(syscall.SIGTERM)
	code := srv.wait(shutdown + kumiko.StopMargin + stopSlack)
	took := time.Since(sent)
	t.Logf("stopped in %s with code %d", took, code)
	require.Less(t, took, shutdown+kumiko.StopMargin+stopSlack, "the stop is bounded")
	require.NotZero(t, code, "work was abandoned")
	var named bool
	for _, rec := range srv.stderr.records() {
		raw, _ := json.Marshal(rec)
		line := string(raw)
		named = named || strings.Contains(line, "abandon") && strings.Contains(line, "e2e-deliveries")
	}
	require.True(t, named, "a log line names the consumer it abandoned")

	cursor := a.db.Count(t, "SELECT last_processed_event_id::int FROM kumiko_event_consumers WHERE name = 'e2e-deliveries' AND instance_id = '__shared__'")
	require.Less(t, int64(cursor), blockEvent, "the cursor did not move past the event")
	require.Zero(t, a.db.Count(t, "SELECT count(*) FROM e2e_deliveries WHERE note_id IN ($1, $2)", blocking.ID, after.ID), "nothing half-applied")

	a.serve(t, "block-1") // without E2E_BLOCK: the handler returns now
	waitFor(t, 20*time.Second, "the next start delivers the event", delivered(blocking.ID))
	waitFor(t, 20*time.Second, "and the one after it", delivered(after.ID))
	require.Equal(t, 1, a.db.Count(t, "SELECT count(*) FROM e2e_deliveries WHERE note_id = $1", before.ID), "the one before, still once")
}

// 2,000 event-triggered jobs worked by four processes (two serve, two
// worker), two of them killed with SIGKILL once each while they work and
// started again: every job completes within the rescue bound (the rescue
// time, the leader's 30 s look, slack), and every job's database effect —
// a row its handler writes in the job's transaction — is there exactly
// once.
func TestJobsSurviveKilledProcesses(t *testing.T) {
	t.Parallel()
	reserve(t, 4)
	const (
		jobs        = 2000
		rescueAfter = 3 * time.Second
	)
	a := newE2EApp(t, "KUMIKO_JOB_RESCUE_AFTER="+rescueAfter.String(), "E2E_WORK_DELAY=100ms")
	srvA, srvB := a.serve(t, "jobs-a"), a.serve(t, "jobs-b")
	w1 := a.worker(t, "jobs-w1")
	a.worker(t, "jobs-w2")
	user := a.as(t, srvA, uuid.New(), "user", "User")
	for range jobs / 500 {
		ok[map[string]int](user.command("e2e.burst", map[string]any{"count": 500}))
	}
	completed := func() int {
		return a.db.Count(t, "SELECT count(*) FROM river_job WHERE kind = 'e2e.work' AND state = 'completed'")
	}
	atLeast := func(n int) func() (bool, string) {
		return func() (bool, string) { c := completed(); return c >= n, fmt.Sprintf("%d completed", c) }
	}
	waitFor(t, 60*time.Second, "a fifth of the jobs", atLeast(jobs/5))
	w1.kill9()
	a.worker(t, "jobs-w1")
	waitFor(t, 60*time.Second, "half of the jobs", atLeast(jobs/2))
	require.Less(t, completed(), jobs, "the second kill lands mid-run")
	srvB.kill9()
	lastKill := time.Now()
	a.serve(t, "jobs-b")

	bound := rescueAfter + 30*time.Second + 15*time.Second
	waitFor(t, bound, "every job completes within the rescue bound", atLeast(jobs))
	t.Logf("all %d jobs completed %s after the last kill", jobs, time.Since(lastKill))
	require.Equal(t, jobs, a.db.Count(t, "SELECT count(*) FROM river_job WHERE kind = 'e2e.work'"), "one job per event")
	require.Positive(t, a.db.Count(t, "SELECT count(*) FROM river_job WHERE kind = 'e2e.work' AND attempt > 1"),
		"some jobs were running in a killed process and were retried")
	require.Equal(t, jobs, a.db.Count(t, "SELECT count(DISTINCT key) FROM e2e_job_runs WHERE job = 'e2e.work'"), "every job's effect is there")
	require.Equal(t, jobs, a.db.Count(t, "SELECT count(*) FROM e2e_job_runs WHERE job = 'e2e.work'"), "and none twice")
}

package http_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	khttp "github.com/kumiko-go/kumiko/http"
)

const keyedCreate = `{"type":"task.create","payload":{"title":"exactly once"}}`

// A retry with the same key replays the first response byte for byte,
// marked Idempotent-Replayed, and writes nothing.
func TestIdempotencyReplay(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	alice := token(t, "alice", tenantA, "User")
	first := e.post("/api/write", alice, keyedCreate, "Idempotency-Key", "replay-1")
	require.Equal(t, 200, first.status, first.String())
	require.Empty(t, first.header.Get("Idempotent-Replayed"))

	again := e.post("/api/write", alice, keyedCreate, "Idempotency-Key", "replay-1")
	require.Equal(t, 200, again.status)
	require.Equal(t, "true", again.header.Get("Idempotent-Replayed"))
	require.Equal(t, first.body, again.body)
	require.Equal(t, first.header.Get("Content-Type"), again.header.Get("Content-Type"))
	require.NotEqual(t, first.header.Get("X-Request-ID"), again.header.Get("X-Request-ID"), "the replay is its own request")
	require.Equal(t, 1, e.events())

	// Batches and commands replay too, with the handler's result.
	id := first.data(t)["id"].(string)
	cmd := fmt.Sprintf(`{"type":"task.complete","payload":{"id":%q,"version":1}}`, id)
	c1 := e.post("/api/command", alice, cmd, "Idempotency-Key", "replay-2")
	c2 := e.post("/api/command", alice, cmd, "Idempotency-Key", "replay-2")
	require.Equal(t, 200, c1.status, c1.String())
	require.Equal(t, 200, c2.status, c2.String())
	require.Equal(t, c1.body, c2.body)
	require.Equal(t, "true", c2.header.Get("Idempotent-Replayed"))
	batch := `{"commands":[{"type":"task.create","payload":{"title":"b1"}},{"type":"task.create","payload":{"title":"b2"}}]}`
	b1 := e.post("/api/batch", alice, batch, "Idempotency-Key", "replay-3")
	b2 := e.post("/api/batch", alice, batch, "Idempotency-Key", "replay-3")
	require.Equal(t, 200, b1.status, b1.String())
	require.Equal(t, b1.body, b2.body)
	require.Equal(t, "true", b2.header.Get("Idempotent-Replayed"))
	require.Equal(t, 1+2+2, e.events(), "create, complete (two events), batch of two")

	// The same key of another user, or of another tenant, is another request.
	for _, other := range []string{token(t, "alma", tenantA, "User"), token(t, "bob", tenantB, "User")} {
		r := e.post("/api/write", other, keyedCreate, "Idempotency-Key", "replay-1")
		require.Equal(t, 200, r.status, r.String())
		require.Empty(t, r.header.Get("Idempotent-Replayed"))
	}
	require.Equal(t, 7, e.events())
}

// 20 identical keyed requests at once produce one event; every client gets
// the first response (or, had it waited too long, request_in_progress).
func TestIdempotencyConcurrentDuplicates(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	alice := token(t, "alice", tenantA, "User")
	const n = 20
	var (
		wg      sync.WaitGroup
		start   = make(chan struct{})
		replies = make([]reply, n)
		errs    = make([]error, n)
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			replies[i], errs[i] = send(e.srv, with(post("/api/write", alice, keyedCreate), "Idempotency-Key", "burst"))
		}()
	}
	close(start)
	wg.Wait()

	var bodies [][]byte
	original := 0
	for i, r := range replies {
		require.NoError(t, errs[i])
		if r.status == 409 {
			requireProblem(t, r, 409, "idempotency_conflict", "request_in_progress")
			continue
		}
		require.Equal(t, 200, r.status, r.String())
		bodies = append(bodies, r.body)
		if r.header.Get("Idempotent-Replayed") == "" {
			original++
		}
	}
	require.Equal(t, 1, original, "one request ran")
	for _, b := range bodies {
		require.Equal(t, bodies[0], b)
	}
	require.Equal(t, 1, e.events())
}

// The same key with another body is refused with 422 key_reused.
func TestIdempotencyKeyReused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	alice := token(t, "alice", tenantA, "User")
	require.Equal(t, 200, e.post("/api/write", alice, keyedCreate, "Idempotency-Key", "reused").status)
	r := e.post("/api/write", alice, `{"type":"task.create","payload":{"title":"something else"}}`, "Idempotency-Key", "reused")
	requireProblem(t, r, 422, "idempotency_conflict", "key_reused")
	// The same body on another route is another request too.
	r = e.post("/api/command", alice, keyedCreate, "Idempotency-Key", "reused")
	requireProblem(t, r, 422, "idempotency_conflict", "key_reused")
	require.Equal(t, 1, e.events())
}

// A duplicate of a request still in flight waits IdempotencyWait, then
// answers 409 request_in_progress; once the first completes it replays.
func TestIdempotencyInProgress(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *khttp.Config) { c.IdempotencyWait = 100 * time.Millisecond })
	hold := &holdHook{entered: make(chan struct{}), release: make(chan struct{})}
	e.idem.hold = hold
	alice := token(t, "alice", tenantA, "User")

	first := make(chan reply, 1)
	go func() {
		first <- sendReply(e.srv, with(post("/api/write", alice, keyedCreate), "Idempotency-Key", "slow"))
	}()
	<-hold.entered // the first request ran and is recording its response

	r := e.post("/api/write", alice, keyedCreate, "Idempotency-Key", "slow")
	requireProblem(t, r, 409, "idempotency_conflict", "request_in_progress")
	require.Equal(t, "1", r.header.Get("Retry-After"))

	close(hold.release)
	original := <-first
	require.Equal(t, 200, original.status, original.String())
	replayed := e.post("/api/write", alice, keyedCreate, "Idempotency-Key", "slow")
	require.Equal(t, original.body, replayed.body)
	require.Equal(t, "true", replayed.header.Get("Idempotent-Replayed"))
	require.Equal(t, 1, e.events())
}

// The record is completed after the answer: the client has its response
// while the record is still pending, and a retry arriving in that window
// waits for the record and is replayed the first response — never run
// again, never answered otherwise.
func TestIdempotencyRetryBeforeCompletion(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *khttp.Config) { c.IdempotencyWait = time.Minute })
	hold := &holdHook{entered: make(chan struct{}), release: make(chan struct{})}
	e.idem.hold = hold
	e.idem.waiting = make(chan struct{})
	alice := token(t, "alice", tenantA, "User")

	first := make(chan reply, 1)
	go func() {
		first <- sendReply(e.srv, with(post("/api/write", alice, keyedCreate), "Idempotency-Key", "window"))
	}()
	var original reply
	select {
	case original = <-first:
	case <-time.After(30 * time.Second): // a deadlock guard: the answer waits for the record
		close(hold.release)
		t.Fatal("the first request was not answered while its record was pending")
	}
	require.Equal(t, 200, original.status, original.String())
	<-hold.entered // the record is still being completed

	retry := make(chan reply, 1)
	go func() {
		retry <- sendReply(e.srv, with(post("/api/write", alice, keyedCreate), "Idempotency-Key", "window"))
	}()
	<-e.idem.waiting // the retry found the claim pending and waits
	close(hold.release)
	replayed := <-retry
	require.Equal(t, 200, replayed.status, replayed.String())
	require.Equal(t, "true", replayed.header.Get("Idempotent-Replayed"))
	require.Equal(t, original.body, replayed.body)
	require.Equal(t, 1, e.events())
}

// When the store lost the record (Redis flushed), the pipeline's own record
// still refuses to apply the request twice: 409 already_applied.
func TestIdempotencyAlreadyApplied(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	alice := token(t, "alice", tenantA, "User")
	require.Equal(t, 200, e.post("/api/write", alice, keyedCreate, "Idempotency-Key", "flushed").status)
	e.idem.flush()
	r := e.post("/api/write", alice, keyedCreate, "Idempotency-Key", "flushed")
	requireProblem(t, r, 409, "idempotency_conflict", "already_applied")
	e.idem.flush()
	r = e.post("/api/write", alice, `{"type":"task.create","payload":{"title":"other"}}`, "Idempotency-Key", "flushed")
	requireProblem(t, r, 422, "idempotency_conflict", "key_reused")
	require.Equal(t, 1, e.events())
}

// A 5xx releases the key, so a retry runs again; a 4xx is recorded and
// replayed.
func TestIdempotencyRecordsOnly2xxAnd4xx(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	alice := token(t, "alice", tenantA, "User")
	for range 2 {
		r := e.post("/api/command", alice, `{"type":"probe.fail","payload":{}}`, "Idempotency-Key", "fails")
		requireProblem(t, r, 500, "internal_error", "")
		require.Empty(t, r.header.Get("Idempotent-Replayed"), "a 5xx is never replayed")
	}
	require.Len(t, e.logs.lines(map[string]any{"level": "ERROR", "msg": "request failed"}), 2, "both ran")

	bad := `{"type":"task.create","payload":{"title":7}}`
	first := e.post("/api/write", alice, bad, "Idempotency-Key", "invalid")
	requireProblem(t, first, 400, "validation_error", "")
	again := e.post("/api/write", alice, bad, "Idempotency-Key", "invalid")
	require.Equal(t, first.body, again.body)
	require.Equal(t, "application/problem+json", again.header.Get("Content-Type"))
	require.Equal(t, "true", again.header.Get("Idempotent-Replayed"))
}

// With the store down, keyed writes answer 503 (fail closed) while unkeyed
// traffic is unaffected; fail-open runs them and the pipeline still keeps
// them from applying twice.
func TestIdempotencyStoreDown(t *testing.T) {
	t.Parallel()
	alice := token(t, "alice", tenantA, "User")

	closed := newEnv(t)
	closed.idem.down.Store(true)
	r := closed.post("/api/write", alice, keyedCreate, "Idempotency-Key", "down")
	requireProblem(t, r, 503, "unavailable", "idempotency_unavailable")
	require.Equal(t, "1", r.header.Get("Retry-After"))
	require.Equal(t, 200, closed.post("/api/write", alice, keyedCreate).status, "unkeyed writes still run")
	require.Equal(t, 200, closed.post("/api/query", alice, `{"type":"task.list"}`, "Idempotency-Key", "down").status, "queries ignore keys")
	require.Equal(t, 1, closed.events())

	open := newEnv(t, func(c *khttp.Config) { c.IdempotencyFailOpen = true })
	open.idem.down.Store(true)
	require.Equal(t, 200, open.post("/api/write", alice, keyedCreate, "Idempotency-Key", "down").status)
	require.NotEmpty(t, open.logs.lines(map[string]any{"level": "WARN", "msg": "idempotency store unavailable; running the keyed request without replay"}))
	r = open.post("/api/write", alice, keyedCreate, "Idempotency-Key", "down")
	requireProblem(t, r, 409, "idempotency_conflict", "already_applied")
	require.Equal(t, 1, open.events())
}

// Without a store there is no replay, but the key still reaches the
// pipeline: a retry is refused instead of applied twice.
func TestIdempotencyWithoutStore(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *khttp.Config) { c.Idempotency = nil })
	alice := token(t, "alice", tenantA, "User")
	require.Equal(t, 200, e.post("/api/write", alice, keyedCreate, "Idempotency-Key", "nostore").status)
	requireProblem(t, e.post("/api/write", alice, keyedCreate, "Idempotency-Key", "nostore"), 409, "idempotency_conflict", "already_applied")
	require.Equal(t, 1, e.events())
	var key string
	require.NoError(t, e.app.Pool.QueryRow(context.Background(), "SELECT metadata->>'idempotencyKey' FROM kumiko_events").Scan(&key))
	require.Equal(t, "nostore", key)
}

// sendReply is send for a goroutine: a failure is a reply with status -1.
func sendReply(srv *httptest.Server, r request) reply {
	rep, err := send(srv, r)
	if err != nil {
		return reply{status: -1, body: []byte(err.Error())}
	}
	return rep
}

// WaitRecords with nothing being recorded returns nil even when its
// context has ended: a stop that used up its deadline on requests still
// closes the store cleanly; after a keyed write it returns once the record
// is written.
func TestWaitRecordsWithNothingPending(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	done, cancel := context.WithCancel(t.Context())
	cancel()
	for range 200 { // the two select branches were both ready: a coin toss each time
		require.NoError(t, e.s.WaitRecords(done))
	}
	alice := token(t, "alice", tenantA, "User")
	r := e.post("/api/write", alice, keyedCreate, "Idempotency-Key", "wait-1")
	require.Equal(t, 200, r.status, r.String())
	ctx, stop := context.WithTimeout(t.Context(), 10*time.Second)
	defer stop()
	require.NoError(t, e.s.WaitRecords(ctx))
}

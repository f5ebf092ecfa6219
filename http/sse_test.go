package http_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/consumer"
	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/feature"
	khttp "github.com/kumiko-go/kumiko/http"
)

// sseWait bounds every wait for a frame.
const sseWait = 10 * time.Second

// sseMsg is one parsed SSE frame; a comment line (a heartbeat) is a frame of
// its own with only comment set.
type sseMsg struct {
	id, event, data string
	comment         string
	isComment       bool
}

// obj decodes the frame's data.
func (m sseMsg) obj(t *testing.T) map[string]any {
	t.Helper()
	var v map[string]any
	require.NoError(t, json.Unmarshal([]byte(m.data), &v), "data: %s", m.data)
	return v
}

// title is the title of a task event's payload.
func (m sseMsg) title(t *testing.T) string {
	t.Helper()
	p, _ := m.obj(t)["payload"].(map[string]any)
	s, _ := p["title"].(string)
	return s
}

func (m sseMsg) eventID(t *testing.T) int64 {
	t.Helper()
	id, err := strconv.ParseInt(m.id, 10, 64)
	require.NoError(t, err, "frame id %q", m.id)
	return id
}

// sseStream is an open GET /api/events response read by a goroutine of its
// own into frames; the frames channel closes when the body ends.
type sseStream struct {
	t      *testing.T
	res    *http.Response
	frames chan sseMsg
	quit   chan struct{}
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
}

// openStream opens path on srv with token and headers (key, value, …) and
// fails the test unless it answers 200 text/event-stream.
func openStream(t *testing.T, srv *httptest.Server, path, tok string, header ...string) *sseStream {
	t.Helper()
	return openStreamWith(t, srv.Client(), srv.URL+path, tok, header...)
}

// openStreamWith is openStream with a client of the test's own, on url.
func openStreamWith(t *testing.T, client *http.Client, url, tok string, header ...string) *sseStream {
	t.Helper()
	return streamOf(t, requestStream(client, url, tok, header...))
}

// streamOpening is what requestStream got: the response, or the error.
type streamOpening struct {
	res    *http.Response
	cancel context.CancelFunc
	err    error
}

// requestStream sends the request of a stream and waits for its answer's
// headers; it may run on a goroutine of its own.
func requestStream(client *http.Client, url, tok string, header ...string) streamOpening {
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		cancel()
		return streamOpening{err: err}
	}
	req.Header.Set("Accept", "text/event-stream")
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := client.Do(req) //nolint:bodyclose // streamOf's cleanup closes it
	if err != nil {
		cancel()
	}
	return streamOpening{res: res, cancel: cancel, err: err}
}

// streamOf is the stream of o; it fails the test unless o answered 200
// text/event-stream.
func streamOf(t *testing.T, o streamOpening) *sseStream {
	t.Helper()
	require.NoError(t, o.err)
	res, cancel := o.res, o.cancel
	s := &sseStream{t: t, res: res, frames: make(chan sseMsg), quit: make(chan struct{}), cancel: cancel}
	t.Cleanup(func() {
		s.stop()
		res.Body.Close()
		s.wg.Wait()
	})
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Equal(t, "text/event-stream", res.Header.Get("Content-Type"))
	require.Equal(t, "no-cache", res.Header.Get("Cache-Control"))
	return s
}

// read starts the reader goroutine: a small SSE parser (id, event, data and
// comment lines; a blank line ends a frame).
func (s *sseStream) read() *sseStream {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer close(s.frames)
		br := bufio.NewReader(s.res.Body)
		var cur sseMsg
		var has bool
		emit := func(m sseMsg) bool {
			select {
			case s.frames <- m:
				return true
			case <-s.quit:
				return false
			}
		}
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				return
			}
			line = strings.TrimSuffix(line, "\n")
			field, value, _ := strings.Cut(line, ":")
			value = strings.TrimPrefix(value, " ")
			switch {
			case line == "":
				if has && !emit(cur) {
					return
				}
				cur, has = sseMsg{}, false
			case field == "":
				if !emit(sseMsg{comment: value, isComment: true}) {
					return
				}
			case field == "id":
				cur.id, has = value, true
			case field == "event":
				cur.event, has = value, true
			case field == "data":
				if cur.data != "" {
					cur.data += "\n"
				}
				cur.data, has = cur.data+value, true
			}
		}
	}()
	return s
}

// stop ends the request; the reader ends with it.
func (s *sseStream) stop() {
	s.once.Do(func() {
		close(s.quit)
		s.cancel()
	})
}

// close ends the request and waits for the reader.
func (s *sseStream) close() {
	s.stop()
	_ = s.res.Body.Close()
	s.wg.Wait()
}

// next is the next frame, comments included; it fails the test when none
// arrives in time or the stream ends.
func (s *sseStream) next() sseMsg {
	s.t.Helper()
	timer := time.NewTimer(sseWait)
	defer timer.Stop()
	select {
	case m, ok := <-s.frames:
		require.True(s.t, ok, "the stream ended")
		return m
	case <-timer.C:
		s.t.Fatalf("no frame within %s", sseWait)
		return sseMsg{}
	}
}

// nextEvent is the next event frame, skipping heartbeats.
func (s *sseStream) nextEvent() sseMsg {
	s.t.Helper()
	for {
		if m := s.next(); !m.isComment {
			return m
		}
	}
}

// titles reads n event frames and returns their titles, checking that ids
// ascend.
func (s *sseStream) titles(n int) []string {
	s.t.Helper()
	var out []string
	last := int64(-1)
	for range n {
		m := s.nextEvent()
		id := m.eventID(s.t)
		require.Greater(s.t, id, last, "frame ids ascend")
		last = id
		out = append(out, m.title(s.t))
	}
	return out
}

// ended reads the event frames left until the stream ends, failing the test
// if it does not end in time.
func (s *sseStream) ended() []sseMsg {
	s.t.Helper()
	timer := time.NewTimer(sseWait)
	defer timer.Stop()
	var out []sseMsg
	for {
		select {
		case m, ok := <-s.frames:
			if !ok {
				return out
			}
			if !m.isComment {
				out = append(out, m)
			}
		case <-timer.C:
			s.t.Fatalf("the stream did not end within %s", sseWait)
		}
	}
}

// newSSEEnv is newEnv with a heartbeat of hb (0: the default); the server's
// streams are closed before the test server.
func newSSEEnv(t *testing.T, hb time.Duration) *env {
	t.Helper()
	e := newEnv(t, func(c *khttp.Config) { c.SSEHeartbeat = hb })
	t.Cleanup(e.s.CloseStreams)
	return e
}

// feed is an event dispatcher that feeds the server's streams, registered
// but not started: passes run with pass, or with start.
func feed(t *testing.T, e *env) *consumer.Dispatcher {
	t.Helper()
	d, err := consumer.New(e.app.Store, consumer.Config{InstanceID: "t", PollInterval: 20 * time.Millisecond}, e.s.EventsConsumer())
	require.NoError(t, err)
	require.NoError(t, d.Register(context.Background()))
	return d
}

// start runs d until the test ends.
func start(t *testing.T, d *consumer.Dispatcher) {
	t.Helper()
	require.NoError(t, d.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, d.Stop(ctx))
	})
}

// pass runs one pass of the events consumer.
func pass(t *testing.T, d *consumer.Dispatcher) {
	t.Helper()
	_, err := d.RunPass(context.Background(), khttp.EventsConsumerName)
	require.NoError(t, err)
}

func update(t *testing.T, e *env, tok, id, title string) {
	t.Helper()
	r := e.post("/api/write", tok, fmt.Sprintf(`{"type":"task.update","payload":{"id":%q,"version":1,"changes":{"title":%q}}}`, id, title))
	require.Equal(t, http.StatusOK, r.status, r.String())
}

func TestEventsConsumer(t *testing.T) {
	t.Parallel()
	e := newSSEEnv(t, 0)
	c := e.s.EventsConsumer()
	require.Equal(t, "kumiko.sse", c.Name)
	require.Equal(t, "per-instance", c.Delivery.String())
	require.Equal(t, "now", c.StartFrom.String())
	require.NotNil(t, c.Handle)
	require.Nil(t, c.HandleBatch)
}

// A client receives the live events of its own tenant, and nothing of
// another's; each frame carries the event id, type and the event as JSON.
func TestEventsLiveTenantScoped(t *testing.T) {
	t.Parallel()
	e := newSSEEnv(t, 0)
	start(t, feed(t, e))
	alice := token(t, "alice", tenantA, "User")
	bob := token(t, "bob", tenantB, "User")
	sa := openStream(t, e.srv, "/api/events", alice).read()
	sb := openStream(t, e.srv, "/api/events", bob).read()

	e.create(bob, "b1")
	r := e.post("/api/write", alice, `{"type":"task.create","payload":{"title":"a1"}}`, "X-Correlation-ID", "corr-a1")
	require.Equal(t, http.StatusOK, r.status, r.String())
	a1 := r.data(t)
	e.create(alice, "a2")

	f := sa.nextEvent()
	require.Equal(t, "task.created", f.event)
	d := f.obj(t)
	require.Equal(t, float64(f.eventID(t)), d["id"])
	require.Equal(t, a1["id"], d["aggregateId"])
	require.Equal(t, "task", d["aggregateType"])
	require.Equal(t, float64(1), d["version"])
	require.Equal(t, "task.created", d["type"])
	require.Equal(t, float64(1), d["eventVersion"])
	require.Equal(t, "a1", d["payload"].(map[string]any)["title"])
	meta := d["metadata"].(map[string]any)
	require.Equal(t, "corr-a1", meta["correlationId"])
	require.Contains(t, meta, "causationId")
	require.Equal(t, "alice", meta["userId"])
	require.NotContains(t, meta, "idempotencyKey")
	_, err := time.Parse(time.RFC3339Nano, d["createdAt"].(string))
	require.NoError(t, err)
	require.Subset(t, []string{"id", "aggregateId", "aggregateType", "version", "type", "eventVersion", "payload", "metadata", "createdAt"}, keys(d))
	require.NotContains(t, d, "tenantId")

	// b1 was written first: had it leaked, it would have come first.
	require.Equal(t, []string{"a2"}, sa.titles(1))
	require.Equal(t, []string{"b1"}, sb.titles(1))
	e.create(bob, "b2")
	e.create(alice, "a3")
	require.Equal(t, []string{"a3"}, sa.titles(1), "b2 (written before a3) did not reach alice")
	require.Equal(t, []string{"b2"}, sb.titles(1), "a1–a3 did not reach bob")
}

func keys(m map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// ?types= limits a stream to the named event types.
func TestEventsTypesFilter(t *testing.T) {
	t.Parallel()
	e := newSSEEnv(t, 0)
	start(t, feed(t, e))
	alice := token(t, "alice", tenantA, "User")
	only := openStream(t, e.srv, "/api/events?types=task.updated,%20task.restored", alice).read()
	all := openStream(t, e.srv, "/api/events", alice).read()

	id1 := e.create(alice, "one")["id"].(string)
	update(t, e, alice, id1, "one'")
	id2 := e.create(alice, "two")["id"].(string)
	update(t, e, alice, id2, "two'")

	for _, want := range []string{"task.updated", "task.updated"} {
		require.Equal(t, want, only.nextEvent().event)
	}
	var got []string
	for range 4 {
		got = append(got, all.nextEvent().event)
	}
	require.Equal(t, []string{"task.created", "task.updated", "task.created", "task.updated"}, got)

	// The filter applies to the replay too.
	first := openStream(t, e.srv, "/api/events?after=0&types=task.created", alice).read()
	require.Equal(t, []string{"one", "two"}, first.titles(2))
	e.create(alice, "three")
	require.Equal(t, []string{"three"}, first.titles(1))
}

// A pattern "task.*" follows every event type of the prefix, live and in
// the replay, and no other (the probe feature's member.created).
func TestEventsTypePatterns(t *testing.T) {
	t.Parallel()
	e := newSSEEnv(t, 0)
	start(t, feed(t, e))
	alice := token(t, "alice", tenantA, "User")
	tasksOnly := openStream(t, e.srv, "/api/events?types=task.*", alice).read()

	e.post("/api/write", alice, `{"type":"member.create","payload":{"email":"m@example.com"}}`)
	id := e.create(alice, "one")["id"].(string)
	update(t, e, alice, id, "one'")
	require.Equal(t, "task.created", tasksOnly.nextEvent().event, "member.created is not a task.* event")
	require.Equal(t, "task.updated", tasksOnly.nextEvent().event)

	replayed := openStream(t, e.srv, "/api/events?after=0&types=member.created,task.*", alice).read()
	var got []string
	for range 3 {
		got = append(got, replayed.nextEvent().event)
	}
	require.Equal(t, []string{"member.created", "task.created", "task.updated"}, got)

	for _, bad := range []string{"*", "task*", "*.created", "task.*.x"} {
		requireProblem(t, e.do(get("/api/events?types="+bad, alice)), http.StatusBadRequest, "validation_error", "invalid_types")
	}
}

// staff has a field only HR may read.
var staff = feature.Define("staff", func(r *feature.Registrar) {
	r.Entity("employee", feature.Fields{
		"name":   feature.Text().Required(),
		"salary": feature.Number().ReadRoles("HR"),
	})
	r.Crud("employee", feature.Access{Write: feature.Roles("HR"), Read: feature.AnyUser()})
})

// Event frames apply the fields' read rules like detail and list: a caller
// without the role gets the event without the field, live and in the
// replay; a caller with it gets the whole payload.
func TestEventsHideUnreadableFields(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, 8, []*feature.Feature{staff})
	t.Cleanup(e.s.CloseStreams)
	start(t, feed(t, e))
	alice, hr := token(t, "alice", tenantA, "User"), token(t, "hanna", tenantA, "User", "HR")
	plain := openStream(t, e.srv, "/api/events?types=employee.*", alice).read()
	full := openStream(t, e.srv, "/api/events?types=employee.*", hr).read()

	r := e.post("/api/write", hr, `{"type":"employee.create","payload":{"name":"Bo","salary":5000}}`)
	require.Equal(t, http.StatusOK, r.status, r.String())

	payload := func(m sseMsg) map[string]any { return m.obj(t)["payload"].(map[string]any) }
	require.Equal(t, map[string]any{"name": "Bo"}, payload(plain.nextEvent()), "no salary for a user without HR")
	require.Equal(t, map[string]any{"name": "Bo", "salary": float64(5000)}, payload(full.nextEvent()))

	replayed := openStream(t, e.srv, "/api/events?after=0", alice).read()
	require.Equal(t, map[string]any{"name": "Bo"}, payload(replayed.nextEvent()), "the replay hides it too")
}

// A client that reconnects with Last-Event-ID (or ?after=) gets exactly the
// events of its tenant it missed, then the live ones, with no duplicates.
func TestEventsResume(t *testing.T) {
	t.Parallel()
	e := newSSEEnv(t, 0)
	start(t, feed(t, e))
	alice := token(t, "alice", tenantA, "User")
	bob := token(t, "bob", tenantB, "User")

	s := openStream(t, e.srv, "/api/events", alice).read()
	e.create(alice, "a1")
	f1 := s.nextEvent()
	require.Equal(t, "a1", f1.title(t))
	s.close()

	e.create(alice, "a2")
	e.create(bob, "b1")
	e.create(alice, "a3")

	s = openStream(t, e.srv, "/api/events", alice, "Last-Event-ID", f1.id).read()
	require.Equal(t, []string{"a2", "a3"}, s.titles(2))
	e.create(bob, "b2")
	e.create(alice, "a4")
	e.create(alice, "a5")
	require.Equal(t, []string{"a4", "a5"}, s.titles(2), "live after the replay: no duplicate, nothing of bob's")

	q := openStream(t, e.srv, "/api/events?after="+f1.id, alice).read()
	require.Equal(t, []string{"a2", "a3", "a4", "a5"}, q.titles(4))
	// Last-Event-ID wins over ?after= (an EventSource reconnects to the URL
	// it opened).
	h := openStream(t, e.srv, "/api/events?after=0", alice, "Last-Event-ID", f1.id).read()
	require.Equal(t, []string{"a2", "a3", "a4", "a5"}, h.titles(4))
	e.create(alice, "a6")
	for _, st := range []*sseStream{s, q, h} {
		require.Equal(t, []string{"a6"}, st.titles(1))
	}
}

// The switch from replay to live has neither gaps nor duplicates, however
// far the live feed is behind the store: before the feed brought its first
// event (the replay reads the whole store, and the feed brings the same
// events again), and when it lags (the replay stops where the feed is).
func TestEventsResumeSwitchOver(t *testing.T) {
	t.Parallel()
	e := newSSEEnv(t, 0)
	d := feed(t, e)
	alice := token(t, "alice", tenantA, "User")
	bob := token(t, "bob", tenantB, "User")

	// The feed has brought nothing yet.
	e.create(alice, "a1")
	e.create(bob, "b1")
	e.create(alice, "a2")
	e.create(alice, "a3")
	s1 := openStream(t, e.srv, "/api/events?after=0", alice).read()
	require.Equal(t, []string{"a1", "a2", "a3"}, s1.titles(3))
	pass(t, d) // brings a1, b1, a2, a3 live: all replayed already
	e.create(alice, "a4")
	pass(t, d)
	require.Equal(t, []string{"a4"}, s1.titles(1), "no duplicate of a1–a3")

	// The feed lags: a5 and a6 are in the store, not yet in the feed.
	e.create(alice, "a5")
	e.create(bob, "b2")
	e.create(alice, "a6")
	all, err := e.app.Pool.Query(context.Background(), "SELECT id FROM kumiko_events WHERE tenant_id = $1 ORDER BY id", tenantA)
	require.NoError(t, err)
	var ids []int64
	for all.Next() {
		var id int64
		require.NoError(t, all.Scan(&id))
		ids = append(ids, id)
	}
	require.NoError(t, all.Err())
	require.Len(t, ids, 6)
	s2 := openStream(t, e.srv, "/api/events", alice, "Last-Event-ID", strconv.FormatInt(ids[0], 10)).read()
	require.Equal(t, []string{"a2", "a3", "a4"}, s2.titles(3))
	pass(t, d)
	require.Equal(t, []string{"a5", "a6"}, s2.titles(2))
	require.Equal(t, []string{"a5", "a6"}, s1.titles(2))

	// A resume point ahead of the feed (the client was served by a process
	// whose feed is further on): nothing up to it comes again.
	e.create(alice, "a7")
	e.create(alice, "a8")
	var a7 int64
	require.NoError(t, e.app.Pool.QueryRow(context.Background(), "SELECT max(id) - 1 FROM kumiko_events").Scan(&a7))
	s3 := openStream(t, e.srv, "/api/events", alice, "Last-Event-ID", strconv.FormatInt(a7, 10)).read()
	pass(t, d)
	require.Equal(t, []string{"a8"}, s3.titles(1))
	for _, s := range []*sseStream{s1, s2} {
		require.Equal(t, []string{"a7", "a8"}, s.titles(2))
	}
	e.create(alice, "a9")
	pass(t, d)
	for _, s := range []*sseStream{s1, s2, s3} {
		require.Equal(t, []string{"a9"}, s.titles(1))
	}
}

// The feed stands by while no client listens, and the first client starts
// where the log has settled: a stream with a resume point gets every event
// once — also one whose transaction was open when the stream was asked
// for — and one without gets nothing written before it opened.
func TestEventsFirstClientAfterStandby(t *testing.T) {
	t.Parallel()
	e := newSSEEnv(t, 0)
	ctx := context.Background()
	// The poll would not come during the test: only wake-ups start passes.
	d, err := consumer.New(e.app.Store, consumer.Config{InstanceID: "t", PollInterval: time.Hour}, e.s.EventsConsumer())
	require.NoError(t, err)
	start(t, d)
	alice := token(t, "alice", tenantA, "User")
	standby := e.s.EventsConsumer().Standby
	require.True(t, standby(), "nobody listens")

	e.create(alice, "before")
	writer, err := e.app.Pool.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = writer.Rollback(context.Background()) })
	_, err = e.app.Store.AppendTx(ctx, writer, eventstore.Stream{TenantID: tenantA, AggregateType: "task"}, 0,
		eventstore.NewEvent{Type: "task.created", Payload: json.RawMessage(`{"title":"in flight"}`)})
	require.NoError(t, err)

	opening := make(chan streamOpening, 1)
	go func() { opening <- requestStream(e.srv.Client(), e.srv.URL+"/api/events?after=0", alice) }()
	select {
	case o := <-opening:
		if o.res != nil {
			o.res.Body.Close()
		}
		t.Fatal("the first stream opened while a transaction writing an event was open")
	case <-time.After(200 * time.Millisecond):
	}
	require.NoError(t, writer.Commit(ctx))
	resumed := streamOf(t, <-opening).read()
	require.False(t, standby(), "a client listens")
	live := openStream(t, e.srv, "/api/events", alice).read()

	e.create(alice, "after")
	require.Equal(t, []string{"before", "in flight", "after"}, resumed.titles(3))
	require.Equal(t, []string{"after"}, live.titles(1), "nothing written before the stream opened")

	resumed.close()
	live.close()
	require.Eventually(t, standby, sseWait, 5*time.Millisecond, "nobody listens again")
}

// Idle streams get a `: ping` comment every SSEHeartbeat.
func TestEventsHeartbeat(t *testing.T) {
	t.Parallel()
	e := newSSEEnv(t, 20*time.Millisecond)
	s := openStream(t, e.srv, "/api/events", token(t, "alice", tenantA, "User")).read()
	for range 3 {
		m := s.next()
		require.True(t, m.isComment, "frame: %+v", m)
		require.Equal(t, "ping", m.comment)
	}
}

// A client that never reads fills its buffer and is disconnected; a fast
// client still gets every event, and the consumer's Handle never waits.
func TestEventsSlowClient(t *testing.T) {
	t.Parallel()
	e := newSSEEnv(t, 0)
	srv, slowClient := smallBuffers(t, e)
	alice := token(t, "alice", tenantA, "User")
	slow := openStreamWith(t, slowClient, srv.URL+"/api/events", alice) // never read until the end
	fast := openStream(t, srv, "/api/events", alice).read()

	handle := e.s.EventsConsumer().Handle
	payload := json.RawMessage(fmt.Sprintf(`{"title":"x","blob":%q}`, strings.Repeat("x", 4000)))
	agg := uuid.New()
	const n, step = 1200, 64
	var slowest time.Duration
	for i := 1; i <= n; i++ {
		ev := eventstore.Event{ID: int64(i), TenantID: tenantA, AggregateID: agg, AggregateType: "thing", Version: i,
			Type: "thing.made", EventVersion: 1, Payload: payload, CreatedAt: time.Now()}
		began := time.Now()
		done := make(chan error, 1)
		go func() { done <- handle(context.Background(), nil, ev) }()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(sseWait):
			t.Fatalf("Handle of event %d blocked", i)
		}
		slowest = max(slowest, time.Since(began))
		if i%step == 0 || i == n {
			for j := i - (i-1)%step; j <= i; j++ {
				m := fast.nextEvent()
				require.Equal(t, int64(j), m.eventID(t), "the fast client gets every event, in order")
			}
		}
	}
	require.Less(t, slowest, 500*time.Millisecond, "Handle returns at once")

	// The slow client was disconnected: it reads what was sent before, in
	// order and without a gap, then the overflow frame, and then the
	// stream ends.
	got := overflowed(t, slow)
	require.NotEmpty(t, got)
	require.Less(t, len(got), n, "the slow client was dropped")
	t.Logf("the slow client got %d events before it was dropped; the slowest Handle took %s", len(got), slowest)
	for i, m := range got {
		require.Equal(t, int64(i+1), m.eventID(t))
	}

	// A repeated event (a pass retried after its handler ran) is not sent
	// again.
	require.NoError(t, handle(context.Background(), nil, eventstore.Event{ID: n, TenantID: tenantA, Type: "thing.made", Payload: payload}))
	require.NoError(t, handle(context.Background(), nil, eventstore.Event{ID: n + 1, TenantID: tenantA, Type: "thing.made", Payload: payload}))
	require.Equal(t, int64(n+1), fast.nextEvent().eventID(t))
}

// smallBuffers serves e's handler with small socket buffers, and returns a
// client with small ones too, so that a stream's buffer in the server
// fills after a few hundred kilobytes rather than many megabytes.
func smallBuffers(t *testing.T, e *env) (*httptest.Server, *http.Client) {
	t.Helper()
	srv := httptest.NewUnstartedServer(e.s.Handler())
	srv.Config.ConnState = func(c net.Conn, st http.ConnState) {
		if tc, ok := c.(*net.TCPConn); ok && st == http.StateNew {
			_ = tc.SetWriteBuffer(4096)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	slowTransport := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetReadBuffer(4096)
		}
		return c, err
	}}
	t.Cleanup(slowTransport.CloseIdleConnections)
	return srv, &http.Client{Transport: slowTransport}
}

// overflowed reads s to its end and returns its event frames but the last,
// which must be the overflow frame, without an id.
func overflowed(t *testing.T, s *sseStream) []sseMsg {
	t.Helper()
	got := s.read().ended()
	require.NotEmpty(t, got, "the stream ends with a frame")
	last := got[len(got)-1]
	require.Equal(t, "overflow", last.event, "the last frame says why the stream ends: %+v", last)
	require.Empty(t, last.id, "the overflow frame leaves Last-Event-ID at the last event")
	require.Equal(t, "overflow", last.obj(t)["code"])
	return got[:len(got)-1]
}

// Without a valid token the stream answers 401 problem+json; a bad resume
// point or type list 400.
func TestEventsRefusals(t *testing.T) {
	t.Parallel()
	e := newSSEEnv(t, 0)
	alice := token(t, "alice", tenantA, "User")
	r := e.do(get("/api/events", ""))
	requireProblem(t, r, http.StatusUnauthorized, "unauthenticated", "")
	require.NotEmpty(t, r.header.Get("WWW-Authenticate"))
	requireProblem(t, e.do(get("/api/events", "not-a-token")), http.StatusUnauthorized, "unauthenticated", "invalid_token")
	expired, err := khttp.IssueToken(secret, "alice", tenantA.String(), nil, time.Nanosecond)
	require.NoError(t, err)
	requireProblem(t, e.do(get("/api/events", expired)), http.StatusUnauthorized, "unauthenticated", "")

	for _, path := range []string{"/api/events?after=x", "/api/events?after=-1"} {
		requireProblem(t, e.do(get(path, alice)), http.StatusBadRequest, "validation_error", "invalid_resume_point")
	}
	requireProblem(t, e.do(with(get("/api/events", alice), "Last-Event-ID", "abc")), http.StatusBadRequest, "validation_error", "invalid_resume_point")
	many := make([]string, 101)
	for i := range many {
		many[i] = fmt.Sprintf("t.%d", i)
	}
	requireProblem(t, e.do(get("/api/events?types="+strings.Join(many, ","), alice)), http.StatusBadRequest, "validation_error", "invalid_types")
	requireProblem(t, e.do(request{method: http.MethodPost, path: "/api/events", token: alice}), http.StatusMethodNotAllowed, "method_not_allowed", "")
}

// CloseStreams ends every open stream (http.Server.Shutdown would wait for
// them) and refuses new ones.
func TestEventsCloseStreams(t *testing.T) {
	t.Parallel()
	e := newSSEEnv(t, 0)
	alice := token(t, "alice", tenantA, "User")
	s1 := openStream(t, e.srv, "/api/events", alice).read()
	s2 := openStream(t, e.srv, "/api/events?after=0", alice).read()
	e.s.CloseStreams()
	require.Empty(t, s1.ended())
	require.Empty(t, s2.ended())
	requireProblem(t, e.do(get("/api/events", alice)), http.StatusServiceUnavailable, "unavailable", "shutting_down")
}

// A stream ends by itself when its token expires, live or replaying, with a
// last token_expired frame that tells the client to reconnect with a fresh
// token; the stale token is then refused.
func TestEventsEndWhenTokenExpires(t *testing.T) {
	t.Parallel()
	e := newSSEEnv(t, 0)
	start(t, feed(t, e))
	alice := token(t, "alice", tenantA, "User")
	short, err := khttp.IssueToken(secret, "alice", tenantA.String(), nil, 3*time.Second)
	require.NoError(t, err)
	var cl jwt.RegisteredClaims
	_, _, err = jwt.NewParser().ParseUnverified(short, &cl)
	require.NoError(t, err)

	live := openStream(t, e.srv, "/api/events", short).read()
	replay := openStream(t, e.srv, "/api/events?after=0", short).read()
	e.create(alice, "before expiry")
	require.Equal(t, []string{"before expiry"}, live.titles(1), "the stream serves until the token expires")
	require.Equal(t, []string{"before expiry"}, replay.titles(1))

	for _, s := range []*sseStream{live, replay} {
		rest := s.ended()
		require.NotEmpty(t, rest, "the stream ended without a last frame")
		last := rest[len(rest)-1]
		require.Equal(t, "token_expired", last.event)
		require.Empty(t, last.id, "the last frame leaves Last-Event-ID alone")
		d := last.obj(t)
		require.Equal(t, "unauthenticated", d["code"])
		require.Equal(t, "token_expired", d["reason"])
		require.Contains(t, d["detail"], "reconnect")
	}
	require.False(t, time.Now().Before(cl.ExpiresAt.Time), "the streams ended at expiry, not before")
	requireProblem(t, e.do(get("/api/events", short)), http.StatusUnauthorized, "unauthenticated", "token_expired")
}

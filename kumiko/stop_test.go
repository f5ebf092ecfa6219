package kumiko_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/integration"
	"github.com/kumiko-go/kumiko/jobs"
	"github.com/kumiko-go/kumiko/kumiko"
	"github.com/kumiko-go/kumiko/kumikotest"
	"github.com/kumiko-go/kumiko/samples/tasks"
)

// shutdownTimeout is the stopping apps' Config.ShutdownTimeout: short, so
// that the bound the tests check, ShutdownTimeout + StopMargin, is the
// feature and not the wait.
const shutdownTimeout = time.Second

// stuck blocks the probe's handlers named in parts — ignoring their
// contexts, as an external call without a deadline would — until the test
// ends or unblock is called; it records what the probe's handlers saw.
type stuck struct {
	parts    []string
	blocking atomic.Bool
	entered  chan string
	release  chan struct{}

	mu   sync.Mutex
	seen map[string][]int64 // event ids by part, of the side-effect consumer
}

func newStuck(t *testing.T, parts ...string) *stuck {
	s := &stuck{parts: parts, entered: make(chan string, 10), release: make(chan struct{}), seen: map[string][]int64{}}
	s.blocking.Store(true)
	t.Cleanup(s.unblock)
	return s
}

// hold blocks the handler of part while it is to block.
func (s *stuck) hold(part string) {
	if !slices.Contains(s.parts, part) || !s.blocking.Load() {
		return
	}
	s.entered <- part
	<-s.release
}

func (s *stuck) unblock() {
	if s.blocking.CompareAndSwap(true, false) {
		close(s.release)
	}
}

// waitEntered waits until a handler blocks.
func (s *stuck) waitEntered(t *testing.T, part string) {
	t.Helper()
	select {
	case got := <-s.entered:
		require.Equal(t, part, got)
	case <-time.After(30 * time.Second):
		t.Fatalf("the %s handler was not reached", part)
	}
}

// waitAll waits until the handlers of parts block, in any order.
func (s *stuck) waitAll(t *testing.T, parts ...string) {
	t.Helper()
	var got []string
	for range parts {
		select {
		case part := <-s.entered:
			got = append(got, part)
		case <-time.After(30 * time.Second):
			t.Fatalf("reached only %v of %v", got, parts)
		}
	}
	require.ElementsMatch(t, parts, got)
}

func (s *stuck) saw(part string, id int64) {
	s.mu.Lock()
	s.seen[part] = append(s.seen[part], id)
	s.mu.Unlock()
}

func (s *stuck) seenBy(part string) []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.seen[part])
}

// Sent is the probe's integration event.
type Sent struct {
	Key string `json:"key" validate:"required"`
}

// probeKey is the input of the probe's commands.
type probeKey struct {
	Key string `json:"key" validate:"required"`
}

// probe is a feature with one of each kind of user code a stop may find
// running, each writing in its transaction before it holds: a table-backed
// multi-stream projection and a side-effect consumer of task.created, a
// command, an integration handler (of what probe.publish publishes) and a
// job.
func probe(s *stuck) *feature.Feature {
	return feature.Define("probe", func(r *feature.Registrar) {
		r.MultiStreamProjection(feature.MultiStreamProjection{
			Name: "probe-table",
			Table: &feature.TableDef{Name: "probe_seen", Columns: []feature.Column{
				{Name: "event_id", Type: "bigint", NotNull: true},
			}, PrimaryKey: []string{"event_id"}},
			Apply: map[string]feature.ApplyFunc{"task.created": func(ctx feature.ApplyContext, e feature.Event) error {
				if _, err := ctx.DB().Exec(ctx.Context(), "INSERT INTO "+ctx.Table()+" (event_id) VALUES ($1)", e.ID); err != nil {
					return err
				}
				s.hold("projection")
				return nil
			}},
		})
		r.MultiStreamProjection(feature.MultiStreamProjection{
			Name: "probe-mailer",
			Apply: map[string]feature.ApplyFunc{"task.created": func(_ feature.ApplyContext, e feature.Event) error {
				s.hold("side-effect")
				s.saw("side-effect", e.ID)
				return nil
			}},
		})
		feature.HandleCommand(r, "probe.block", feature.AnyUser(), func(ctx feature.CommandContext, in probeKey) (any, error) {
			if _, err := ctx.DB().Exec(ctx.Context(), "INSERT INTO probe_writes (k) VALUES ($1)", in.Key); err != nil {
				return nil, err
			}
			s.hold("command")
			return nil, nil
		})
		r.IntegrationEvent("probe.sent", Sent{})
		feature.HandleCommand(r, "probe.publish", feature.AnyUser(), func(ctx feature.CommandContext, in probeKey) (any, error) {
			return nil, ctx.Publish("probe.sent", Sent(in))
		})
		r.OnIntegrationEvent("probe.sent", "probe-receive", func(ctx feature.CommandContext, m feature.Message) error {
			var p Sent
			if err := m.Decode(&p); err != nil {
				return err
			}
			if _, err := ctx.DB().Exec(ctx.Context(), "INSERT INTO probe_writes (k) VALUES ($1)", p.Key); err != nil {
				return err
			}
			s.hold("integration")
			return nil
		})
		r.Job("probe.hang", probeKey{}, func(ctx feature.JobContext, in probeKey) error {
			if _, err := ctx.DB().Exec(ctx.Context(), "INSERT INTO probe_writes (k) VALUES ($1)", in.Key); err != nil {
				return err
			}
			s.hold("job")
			return nil
		})
	})
}

// startProbe starts an app of the sample's tasks and the probe on db, as
// instance, logging JSON to logs.
func startProbe(t *testing.T, db *kumikotest.DB, s *stuck, instance string, logs *lockedBuffer) *kumiko.App {
	t.Helper()
	db.Exec(t, "CREATE TABLE IF NOT EXISTS probe_writes (k text PRIMARY KEY)")
	app, err := kumiko.New(context.Background(), kumiko.Config{DatabaseURL: db.URL, Schema: db.Schema, JWTSecret: secret,
		Addr: "127.0.0.1:0", InstanceID: instance, ShutdownTimeout: shutdownTimeout,
		Logger: slog.New(slog.NewJSONHandler(logs, nil))}, tasks.Feature, probe(s))
	require.NoError(t, err)
	require.NoError(t, app.Start(context.Background()))
	t.Cleanup(func() { _ = app.Stop(context.Background()) })
	return app
}

// stopAbandoning stops app and checks that the stop is bounded, fails with
// ErrAbandoned naming each of names, and logs one line that names them.
func stopAbandoning(t *testing.T, app *kumiko.App, logs *lockedBuffer, names ...string) {
	t.Helper()
	began := time.Now()
	err := app.Stop(context.Background())
	took := time.Since(began)
	t.Logf("stopped in %s: %v", took, err)
	require.Less(t, took, shutdownTimeout+kumiko.StopMargin, "the stop is bounded")
	require.ErrorIs(t, err, kumiko.ErrAbandoned)
	lines := logs.prefixed(t, "kumiko: stopped, abandoned ")
	require.Len(t, lines, 1, "one line names what the stop abandoned")
	require.Equal(t, "ERROR", lines[0]["level"])
	for _, name := range names {
		require.ErrorContains(t, err, name)
		require.Contains(t, lines[0]["msg"], name)
	}
}

// prefixed are the records whose message starts with prefix.
func (l *lockedBuffer) prefixed(t *testing.T, prefix string) []map[string]any {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for line := range strings.SplitSeq(strings.TrimSpace(l.b.String()), "\n") {
		var r map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &r), line)
		if msg, _ := r["msg"].(string); strings.HasPrefix(msg, prefix) {
			out = append(out, r)
		}
	}
	return out
}

// cursor is the shared shard's cursor of consumer.
func cursor(t *testing.T, db *kumikotest.DB, consumer string) int64 {
	t.Helper()
	return int64(db.Count(t, "SELECT last_processed_event_id FROM kumiko_event_consumers WHERE name = $1 AND instance_id = '__shared__'", consumer))
}

// lockFree reports whether the row of key in probe_writes can be written
// now: an open transaction that inserted it makes the insert wait, which
// the lock timeout ends.
func lockFree(t *testing.T, db *kumikotest.DB, key string) bool {
	t.Helper()
	tx, err := db.Pool.Begin(context.Background())
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	_, err = tx.Exec(context.Background(), "SET LOCAL lock_timeout = '2s'")
	require.NoError(t, err)
	_, err = tx.Exec(context.Background(), "INSERT INTO probe_writes (k) VALUES ($1)", key)
	return err == nil
}

// A consumer handler that never returns — a multi-stream projection writing
// its table in the pass, and a side-effect consumer — makes Stop give up on
// its pass at the deadline: Stop returns within ShutdownTimeout +
// StopMargin, fails with ErrAbandoned naming the consumer, the cursor is
// still before the event, and, while the handler is still blocked, a second
// app on the same schema delivers the event — the closed connection rolled
// the pass back and freed its shard.
func TestStopAbandonsABlockedConsumer(t *testing.T) {
	t.Parallel()
	for part, consumer := range map[string]string{"projection": "probe-table", "side-effect": "probe-mailer"} {
		t.Run(part, func(t *testing.T) {
			t.Parallel()
			db := kumikotest.NewDB(t)
			s := newStuck(t, part)
			logs := &lockedBuffer{}
			first := startProbe(t, db, s, "first", logs)
			post(t, "http://"+first.Addr()+"/api/write", issue(t, []string{"User"}), `{"type":"task.create","payload":{"title":"t"}}`, http.StatusOK)
			s.waitEntered(t, part)
			id := int64(db.Count(t, "SELECT max(id) FROM kumiko_events WHERE type = 'task.created'"))

			stopAbandoning(t, first, logs, "event dispatcher: abandoned the running passes of consumers "+consumer)
			require.Less(t, cursor(t, db, consumer), id, "the cursor did not move past the abandoned event")

			next := newStuck(t)
			second := startProbe(t, db, next, "second", &lockedBuffer{})
			require.Eventually(t, func() bool { return cursor(t, db, consumer) >= id }, 30*time.Second, 10*time.Millisecond,
				"the next start delivers the event")
			require.NoError(t, second.Stop(context.Background()))
			if part == "projection" {
				require.Equal(t, 1, db.Count(t, "SELECT count(*) FROM probe_seen WHERE event_id = $1", id))
			} else {
				require.Equal(t, []int64{id}, next.seenBy("side-effect"))
			}
		})
	}
}

// An HTTP command handler that never returns: Stop gives up on the request
// at the deadline, within ShutdownTimeout + StopMargin, naming it; the
// caller's connection is closed; the command's transaction rolled back
// while the handler still blocks.
func TestStopAbandonsABlockedRequest(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	s := newStuck(t, "command")
	logs := &lockedBuffer{}
	app := startProbe(t, db, s, "http-1", logs)
	answered := make(chan error, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, "http://"+app.Addr()+"/api/command", strings.NewReader(`{"type":"probe.block","payload":{"key":"blocked"}}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+issue(t, []string{"User"}))
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		answered <- err
	}()
	s.waitEntered(t, "command")
	require.False(t, lockFree(t, db, "blocked"), "the command holds its uncommitted row")

	stopAbandoning(t, app, logs, "http server: abandoned the requests POST /api/command", "database connection")
	require.Error(t, <-answered, "the caller's connection was closed, without an answer")
	require.True(t, lockFree(t, db, "blocked"), "the command's transaction rolled back")
}

// An integration handler (in process: the relay's pass runs it) that never
// returns: Stop names the relay and the handler, within ShutdownTimeout +
// StopMargin; the handler's transaction rolled back with its inbox row, and
// the next start delivers the message to it.
func TestStopAbandonsABlockedIntegrationHandler(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	s := newStuck(t, "integration")
	logs := &lockedBuffer{}
	first := startProbe(t, db, s, "int-1", logs)
	post(t, "http://"+first.Addr()+"/api/command", issue(t, []string{"User"}), `{"type":"probe.publish","payload":{"key":"sent"}}`, http.StatusOK)
	s.waitEntered(t, "integration")

	stopAbandoning(t, first, logs, integration.RelayName, "integration: abandoned the running handlers probe-receive (message ")
	require.True(t, lockFree(t, db, "sent"), "the handler's transaction rolled back")

	second := startProbe(t, db, newStuck(t), "int-2", &lockedBuffer{})
	require.Eventually(t, func() bool { return db.Count(t, "SELECT count(*) FROM kumiko_inbox") == 1 }, 30*time.Second, 10*time.Millisecond,
		"the next start delivers the message")
	require.NoError(t, second.Stop(context.Background()))
	require.Equal(t, 1, db.Count(t, "SELECT count(*) FROM probe_writes WHERE k = 'sent'"))
}

// A job that never returns: Stop names it, within ShutdownTimeout +
// StopMargin, and its transaction rolled back.
func TestStopAbandonsABlockedJob(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	s := newStuck(t, "job")
	logs := &lockedBuffer{}
	app := startProbe(t, db, s, "job-1", logs)
	_, err := app.Parts().Executor.Jobs().Enqueue(context.Background(), "probe.hang", probeKey{Key: "job"}, jobs.Options{})
	require.NoError(t, err)
	s.waitEntered(t, "job")

	stopAbandoning(t, app, logs, "probe.hang")
	require.True(t, lockFree(t, db, "job"), "the job's transaction rolled back")
}

// Everything blocks at once — two consumers, a request, an integration
// handler and a job: the parts give up on them side by side, and the stop
// still returns within ShutdownTimeout + StopMargin, naming each.
func TestStopIsBoundedWhenEverythingBlocks(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	s := newStuck(t, "projection", "side-effect", "command", "integration", "job")
	logs := &lockedBuffer{}
	app := startProbe(t, db, s, "all-1", logs)
	token := issue(t, []string{"User"})
	go func() {
		req, _ := http.NewRequest(http.MethodPost, "http://"+app.Addr()+"/api/command", strings.NewReader(`{"type":"probe.block","payload":{"key":"blocked"}}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+token)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	post(t, "http://"+app.Addr()+"/api/write", token, `{"type":"task.create","payload":{"title":"t"}}`, http.StatusOK)
	post(t, "http://"+app.Addr()+"/api/command", token, `{"type":"probe.publish","payload":{"key":"sent"}}`, http.StatusOK)
	_, err := app.Parts().Executor.Jobs().Enqueue(context.Background(), "probe.hang", probeKey{Key: "job"}, jobs.Options{})
	require.NoError(t, err)
	s.waitAll(t, "projection", "side-effect", "command", "integration", "job")

	stopAbandoning(t, app, logs, "probe-table", "probe-mailer", "POST /api/command", "probe-receive", "probe.hang")
	for _, key := range []string{"blocked", "sent", "job"} {
		require.True(t, lockFree(t, db, key), "%s rolled back", key)
	}
}

// A stop with nothing running returns nil well before the deadline, and
// logs "kumiko: stopped" only.
func TestCleanStopIsFast(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	logs := &lockedBuffer{}
	db.Exec(t, "CREATE TABLE IF NOT EXISTS probe_writes (k text PRIMARY KEY)")
	const timeout = 30 * time.Second
	app, err := kumiko.New(context.Background(), kumiko.Config{DatabaseURL: db.URL, Schema: db.Schema, JWTSecret: secret,
		Addr: "127.0.0.1:0", InstanceID: "clean", ShutdownTimeout: timeout, Logger: slog.New(slog.NewJSONHandler(logs, nil))},
		tasks.Feature, probe(newStuck(t)))
	require.NoError(t, err)
	require.NoError(t, app.Start(context.Background()))
	post(t, "http://"+app.Addr()+"/api/write", issue(t, []string{"User"}), `{"type":"task.create","payload":{"title":"t"}}`, http.StatusOK)
	post(t, "http://"+app.Addr()+"/api/command", issue(t, []string{"User"}), `{"type":"probe.publish","payload":{"key":"k"}}`, http.StatusOK)
	require.Eventually(t, func() bool {
		return db.Count(t, "SELECT count(*) FROM probe_seen") == 1 && db.Count(t, "SELECT count(*) FROM kumiko_inbox") == 1
	}, 30*time.Second, 10*time.Millisecond)
	// An operator's console page is open: its event stream never ends by
	// itself.
	req, err := http.NewRequest(http.MethodGet, "http://"+app.Addr()+"/ops/events/live", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+issue(t, []string{"Operator"}))
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req) //nolint:bodyclose // the reader goroutine closes it
	require.NoError(t, err)
	streamed := make(chan error, 1)
	go func() {
		defer resp.Body.Close()
		_, err := io.Copy(io.Discard, resp.Body)
		streamed <- err
	}()
	require.Equal(t, http.StatusOK, resp.StatusCode)

	began := time.Now()
	require.NoError(t, app.Stop(context.Background()))
	require.Less(t, time.Since(began), timeout/2, "a clean stop does not wait for its deadline, nor for the open stream")
	require.NoError(t, <-streamed, "the stream ended")
	require.Len(t, logs.records(t, "kumiko: stopped"), 1)
	require.Empty(t, logs.prefixed(t, "kumiko: stopped, abandoned"))
}

package http_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/feature"
	khttp "github.com/kumiko-go/kumiko/http"
)

// The open event streams are bounded per user (GET /api/events and the
// projection channels together) and per server: one more answers 429
// rate_limited with Retry-After; another user still connects, and a stream
// that ends frees its place.
func TestEventStreamsCapped(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, 8, []*feature.Feature{tally, staff}, func(c *khttp.Config) {
		c.MaxStreamsPerUser, c.MaxStreams = 2, 4
	})
	t.Cleanup(e.s.CloseStreams)
	alice := token(t, "alice", tenantA, "User")
	paths := []string{"/api/events", "/api/projections/vote/events"}

	first := openStream(t, e.srv, paths[0], alice)
	openStream(t, e.srv, paths[1], alice)
	for _, path := range paths {
		requireStreamRefused(t, e, path, alice, "too_many_streams")
	}

	// Another user of the tenant, and a user of another tenant with the
	// same id, have places of their own, up to the server's bound.
	openStream(t, e.srv, paths[0], token(t, "bob", tenantA, "User"))
	openStream(t, e.srv, paths[1], token(t, "alice", tenantB, "User"))
	requireStreamRefused(t, e, paths[0], token(t, "carol", tenantA, "User"), "streams_exhausted")

	// A stream that ends frees its place (once its handler has noticed).
	first.close()
	deadline := time.Now().Add(sseWait)
	for {
		o := requestStream(e.srv.Client(), e.srv.URL+paths[1], alice)
		require.NoError(t, o.err)
		if o.res.StatusCode != http.StatusTooManyRequests {
			streamOf(t, o)
			break
		}
		_ = o.res.Body.Close()
		o.cancel()
		require.True(t, time.Now().Before(deadline), "the ended stream's place was not freed")
		time.Sleep(10 * time.Millisecond)
	}
	requireStreamRefused(t, e, paths[0], alice, "too_many_streams")
}

// requireStreamRefused opens a stream on path and requires 429
// rate_limited (reason) with Retry-After; a stream that opens instead fails
// the test at once.
func requireStreamRefused(t *testing.T, e *env, path, tok, reason string) {
	t.Helper()
	o := requestStream(e.srv.Client(), e.srv.URL+path, tok)
	require.NoError(t, o.err)
	defer o.cancel()
	defer o.res.Body.Close()
	require.Equal(t, http.StatusTooManyRequests, o.res.StatusCode, "%s opened one stream too many", path)
	body, err := io.ReadAll(o.res.Body)
	require.NoError(t, err)
	requireProblem(t, reply{status: o.res.StatusCode, header: o.res.Header, body: body}, http.StatusTooManyRequests, "rate_limited", reason)
	require.Equal(t, "1", o.res.Header.Get("Retry-After"))
}

// A stream whose client stops reading holds up no writer: every write
// completes while it is stuck. It falls behind by its buffer, gets a last
// overflow frame after the events it was sent, and ends; resumed with
// Last-Event-ID it gets every event it missed, in order, and then live ones.
func TestEventsSlowStreamOverflowsAndResumes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *khttp.Config) { c.SSEBuffer = 4 })
	t.Cleanup(e.s.CloseStreams)
	start(t, feed(t, e))
	srv, slowClient := smallBuffers(t, e)
	alice := token(t, "alice", tenantA, "User")
	slow := openStreamWith(t, slowClient, srv.URL+"/api/events", alice) // not read while the writes run
	fast := openStream(t, srv, "/api/events", alice).read()

	notes := strings.Repeat("n", 2000)
	const n = 80
	want := make([]string, n)
	var slowest time.Duration
	for i := range n {
		want[i] = fmt.Sprint("t", i)
		began := time.Now()
		r := e.post("/api/write", alice, fmt.Sprintf(`{"type":"task.create","payload":{"title":%q,"notes":%q}}`, want[i], notes))
		require.Equal(t, http.StatusOK, r.status, r.String())
		slowest = max(slowest, time.Since(began))
		require.Equal(t, want[i], fast.nextEvent().title(t), "a stream that reads gets every event")
	}

	got := overflowed(t, slow)
	require.NotEmpty(t, got)
	require.Less(t, len(got), n, "the slow stream was ended before the last event")
	for i, m := range got {
		require.Equal(t, want[i], m.title(t), "the slow stream got a prefix of the events, in order")
	}
	t.Logf("the slow stream got %d of %d events; the slowest write took %s", len(got), n, slowest)
	require.NotEmpty(t, e.logs.lines(map[string]any{"msg": "event stream: client too slow; disconnected (it resumes with Last-Event-ID)"}))

	resumed := openStream(t, srv, "/api/events", alice, "Last-Event-ID", got[len(got)-1].id).read()
	require.Equal(t, want[len(got):], resumed.titles(n-len(got)), "the resumed stream gets what it missed")
	e.create(alice, "live")
	require.Equal(t, []string{"live"}, resumed.titles(1))
}

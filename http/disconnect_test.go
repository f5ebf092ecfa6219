package http_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	khttp "github.com/kumiko-go/kumiko/http"
)

// A client that closes its connection while its write waits in the
// database is no server error: the request is logged at info as
// client_closed with status 499, and counted under 499, not as a 5xx, in
// kumiko_http_requests_total — while the request's own RequestTimeout stays
// a 503 timeout (TestRequestTimeoutEndsAStuckRequest), and a cancel once
// the server is stopping is not taken for the client's.
func TestClientDisconnectIsNoServerError(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	e := newEnv(t, func(c *khttp.Config) {
		c.Metrics = reg
		c.RequestTimeout = time.Minute // active, and far from ending
	})
	alice := token(t, "alice", tenantA, "User")
	e.create(alice, "before the lock")

	bg := context.Background()
	tx, err := e.app.Pool.Begin(bg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(bg) })
	var holder int
	require.NoError(t, tx.QueryRow(bg, `SELECT pg_backend_pid()`).Scan(&holder))
	_, err = tx.Exec(bg, `LOCK TABLE read_task IN ACCESS EXCLUSIVE MODE`)
	require.NoError(t, err)
	blocked := func() int {
		return e.app.Count(t, `SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))`, holder)
	}

	// abandon sends a write, with the request id and extra header lines,
	// on a raw connection, waits until it is stuck behind the lock, closes
	// the connection and waits for the request's log line.
	abandon := func(id, header string) {
		t.Helper()
		conn, err := net.Dial("tcp", e.srv.Listener.Addr().String())
		require.NoError(t, err)
		body := `{"type":"task.create","payload":{"title":"abandoned"}}`
		_, err = fmt.Fprintf(conn, "POST /api/write HTTP/1.1\r\nHost: kumiko\r\nAuthorization: Bearer %s\r\n"+
			"X-Request-ID: %s\r\n%sContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", alice, id, header, len(body), body)
		require.NoError(t, err)
		require.Eventually(t, func() bool { return blocked() == 1 }, 10*time.Second, 10*time.Millisecond, "the write waits for the lock")
		require.NoError(t, conn.Close())
		require.Eventually(t, func() bool {
			return len(e.logs.lines(map[string]any{"requestId": id, "msg": "request"})) == 1
		}, 10*time.Second, 10*time.Millisecond, "the request ends when its client goes")
		require.Eventually(t, func() bool { return blocked() == 0 }, 10*time.Second, 10*time.Millisecond, "its statement is cancelled")
	}

	abandon("gone-1", "Idempotency-Key: k-gone\r\n")
	require.Empty(t, e.logs.lines(map[string]any{"requestId": "gone-1", "level": "ERROR"}), "a client that went away is no error")
	rec := e.logs.lines(map[string]any{"requestId": "gone-1", "msg": "request abandoned by the client"})
	require.Len(t, rec, 1)
	require.Equal(t, "INFO", rec[0]["level"])
	require.Equal(t, "client_closed", rec[0]["code"])
	require.Equal(t, float64(499), rec[0]["status"])
	line := e.logs.lines(map[string]any{"requestId": "gone-1", "msg": "request"})[0]
	require.Equal(t, "INFO", line["level"])
	require.Equal(t, float64(499), line["status"])
	require.Equal(t, map[string]float64{"200": 1, "499": 1}, writesByStatus(t, reg), "no 5xx counted")

	// Once the server is stopping, a cancelled request may be the stop's
	// doing: it stays a 503, logged as an error.
	e.s.CloseStreams()
	abandon("gone-2", "")
	require.Len(t, e.logs.lines(map[string]any{"requestId": "gone-2", "level": "ERROR", "status": float64(503)}), 1)
	require.Empty(t, e.logs.lines(map[string]any{"requestId": "gone-2", "code": "client_closed"}))
	require.Equal(t, map[string]float64{"200": 1, "499": 1, "503": 1}, writesByStatus(t, reg))

	require.NoError(t, tx.Rollback(bg))
	require.Equal(t, 1, e.app.Count(t, `SELECT count(*) FROM kumiko_events`), "nothing abandoned was written")
	// The abandoned keyed write released its key: its retry runs.
	r := e.post("/api/write", alice, `{"type":"task.create","payload":{"title":"abandoned"}}`, "Idempotency-Key", "k-gone")
	require.Equal(t, 200, r.status, r.String())
	require.Empty(t, r.header.Get("Idempotent-Replayed"))
	require.Equal(t, 2, e.app.Count(t, `SELECT count(*) FROM kumiko_events`))
}

// writesByStatus is kumiko_http_requests_total of POST /api/write by status.
func writesByStatus(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]float64{}
	for _, f := range families {
		if f.GetName() != "kumiko_http_requests_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["route"] == "/api/write" && strings.EqualFold(labels["method"], "POST") {
				out[labels["status"]] += m.GetCounter().GetValue()
			}
		}
	}
	return out
}

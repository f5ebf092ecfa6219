package kumiko_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	khttp "github.com/kumiko-go/kumiko/http"
	"github.com/kumiko-go/kumiko/kumiko"
)

// The API listener refuses a request with both Content-Length and
// Transfer-Encoding: 400, the connection closed, and neither that request
// nor the one pipelined after it runs.
func TestServerRefusesAmbiguousFraming(t *testing.T) {
	t.Parallel()
	app, db := startLimited(t, kumiko.Config{})
	token, err := khttp.IssueToken([]byte(secret), "u-1", "01900000-0000-7000-8000-000000000001", []string{"User"}, time.Hour)
	require.NoError(t, err)
	head := "POST /api/write HTTP/1.1\r\nHost: kumiko\r\nContent-Type: application/json\r\nAuthorization: Bearer " + token + "\r\n"
	body := `{"type":"task.create","payload":{"title":"smuggled"}}`
	chunk := fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(body), body)
	smuggle := head + fmt.Sprintf("Content-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n", len(chunk)) + chunk
	next := head + fmt.Sprintf("Content-Length: %d\r\n\r\n", len(body)) + body

	conn := dial(t, app)
	_, err = conn.Write([]byte(smuggle + next))
	require.NoError(t, err)
	got := requireClosedByServer(t, conn, "content-length with transfer-encoding")
	require.True(t, strings.HasPrefix(got, "HTTP/1.1 400 "), got)
	require.Equal(t, 1, strings.Count(got, "HTTP/1.1 "), "one answer: %s", got)
	require.Zero(t, db.Count(t, "SELECT count(*) FROM kumiko_events"), "nothing ran")

	// The same requests one at a time, each framed once, run.
	conn = dial(t, app)
	_, err = conn.Write([]byte(next + strings.Replace(next, "\r\n\r\n", "\r\nConnection: close\r\n\r\n", 1)))
	require.NoError(t, err)
	got = requireClosedByServer(t, conn, "two writes")
	require.Equal(t, 2, strings.Count(got, "HTTP/1.1 200 "), got)
	require.Equal(t, 2, db.Count(t, "SELECT count(*) FROM kumiko_events"))
}

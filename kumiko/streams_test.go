package kumiko_test

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	khttp "github.com/kumiko-go/kumiko/http"
	"github.com/kumiko-go/kumiko/kumiko"
)

// Config.MaxStreamsPerUser reaches the API: one stream past it answers 429
// rate_limited with Retry-After.
func TestServerCapsEventStreams(t *testing.T) {
	t.Parallel()
	app, _ := startLimited(t, kumiko.Config{MaxStreamsPerUser: 1})
	token, err := khttp.IssueToken([]byte(secret), "u-1", "01900000-0000-7000-8000-000000000001", []string{"User"}, time.Hour)
	require.NoError(t, err)
	open := func() *http.Response {
		ctx, cancel := context.WithTimeout(context.Background(), generous)
		t.Cleanup(cancel)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+app.Addr()+"/api/events", nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Accept", "text/event-stream")
		res, err := http.DefaultClient.Do(req) //nolint:bodyclose // the cleanup closes it
		require.NoError(t, err)
		t.Cleanup(func() { _ = res.Body.Close() })
		return res
	}
	require.Equal(t, http.StatusOK, open().StatusCode) //nolint:bodyclose // open's cleanup closes it
	res := open()                                      //nolint:bodyclose // open's cleanup closes it
	body, _ := io.ReadAll(res.Body)
	require.Equal(t, http.StatusTooManyRequests, res.StatusCode, string(body))
	require.Equal(t, "1", res.Header.Get("Retry-After"))
	require.Contains(t, string(body), `"code":"rate_limited"`)
}

package kumiko_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/jobs"
	"github.com/kumiko-go/kumiko/kumiko"
	"github.com/kumiko-go/kumiko/kumikotest"
	"github.com/kumiko-go/kumiko/samples/tasks"
)

// Every serving process has the ops console under /ops; an operator signed
// in there opens River's UI with the session cookie, and the UI's writes
// with that cookie must come from the console's origin.
func TestConsoleServesJobsUIWithCookie(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	ctx := context.Background()
	server, err := kumiko.New(ctx, kumiko.Config{DatabaseURL: db.URL, Schema: db.Schema, JWTSecret: secret,
		Addr: "127.0.0.1:0", InstanceID: "console-1"}, tasks.Feature, tasks.Reminders)
	require.NoError(t, err)
	require.NoError(t, server.Start(ctx))
	t.Cleanup(func() { _ = server.Stop(context.Background()) })
	origin := "http://" + server.Addr()
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	do := func(method, path, from string, body url.Values, cookies []*http.Cookie) (int, []*http.Cookie) {
		req, err := http.NewRequestWithContext(ctx, method, origin+path, strings.NewReader(body.Encode()))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if from != "" {
			req.Header.Set("Origin", from)
		}
		for _, c := range cookies {
			req.AddCookie(c)
		}
		res, err := client.Do(req)
		require.NoError(t, err)
		require.NoError(t, res.Body.Close())
		return res.StatusCode, res.Cookies()
	}

	status, cookies := do(http.MethodPost, "/ops/login", origin, url.Values{"token": {issue(t, []string{"Operator"})}}, nil)
	require.Equal(t, http.StatusSeeOther, status)
	require.Len(t, cookies, 2)
	status, _ = do(http.MethodGet, "/ops/consumers", "", nil, cookies)
	require.Equal(t, http.StatusOK, status)
	status, _ = do(http.MethodGet, jobs.UIPath+"/", "", nil, cookies)
	require.Equal(t, http.StatusOK, status, "River's UI opens with the console's cookie")
	status, _ = do(http.MethodPost, jobs.UIPath+"/api/jobs/cancel", "https://evil.example", nil, cookies)
	require.Equal(t, http.StatusForbidden, status, "a write with the cookie from another origin")
	status, _ = do(http.MethodGet, "/api/consumers", "", nil, cookies)
	require.Equal(t, http.StatusUnauthorized, status, "the API does not read the console's cookie")
}

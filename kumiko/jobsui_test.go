package kumiko_test

import (
	"context"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/jobs"
	"github.com/kumiko-go/kumiko/kumiko"
	"github.com/kumiko-go/kumiko/kumikotest"
	"github.com/kumiko-go/kumiko/samples/tasks"
)

// A server with jobs serves River's UI under /ops/jobs to the operator
// role: its page, the script the page loads (built into the binary), and
// its API, which lists a job enqueued here. Anonymous callers and users
// without the role are refused, on the page and on the API; a server
// whose app has no jobs has no UI.
func TestJobsUIForOperators(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	ctx := context.Background()
	server, err := kumiko.New(ctx, kumiko.Config{DatabaseURL: db.URL, Schema: db.Schema, JWTSecret: secret,
		Addr: "127.0.0.1:0", InstanceID: "ui-1"}, tasks.Feature, tasks.Reminders)
	require.NoError(t, err)
	require.NoError(t, server.Start(ctx))
	t.Cleanup(func() { _ = server.Stop(context.Background()) })

	// Due tomorrow: it stays scheduled while the test looks at it.
	job, err := server.Parts().Executor.Jobs().Enqueue(ctx, "task.daily-digest", nil, jobs.Options{RunAt: time.Now().Add(24 * time.Hour)})
	require.NoError(t, err)

	base := "http://" + server.Addr() + jobs.UIPath
	operator := issue(t, []string{"Operator"})
	status, page := get(t, base+"/", operator)
	require.Equal(t, http.StatusOK, status, page)
	require.Contains(t, page, "<title>River</title>")
	script := regexp.MustCompile(`src="(` + jobs.UIPath + `/assets/[^"]+\.js)"`).FindStringSubmatch(page)
	require.NotNil(t, script, "the page loads its script from under the mount: %s", page)
	status, _ = get(t, "http://"+server.Addr()+script[1], operator)
	require.Equal(t, http.StatusOK, status, "the script is served from the binary")

	status, list := get(t, base+"/api/jobs?state=scheduled", operator)
	require.Equal(t, http.StatusOK, status, list)
	require.Contains(t, list, `"kind":"task.daily-digest"`)
	require.Regexp(t, `"id":"?`+strconv.FormatInt(job.ID, 10)+`\b`, list)

	for _, path := range []string{"/", "/api/jobs?state=scheduled", ""} {
		status, body := get(t, base+path, "")
		require.Equal(t, http.StatusUnauthorized, status, "anonymous %s: %s", path, body)
		status, body = get(t, base+path, issue(t, []string{"Admin", "User"}))
		require.Equal(t, http.StatusForbidden, status, "non-operator %s: %s", path, body)
		require.Contains(t, body, "access_denied")
	}
	req, err := http.NewRequest(http.MethodPost, base+"/api/jobs/cancel", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+issue(t, []string{"User"}))
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "a user cannot cancel jobs through the UI's API")

	// An app without jobs has no UI.
	plain, err := kumiko.New(ctx, kumiko.Config{DatabaseURL: db.URL, Schema: db.Schema, JWTSecret: secret,
		Addr: "127.0.0.1:0", InstanceID: "ui-2"}, tasks.Feature)
	require.NoError(t, err)
	require.NoError(t, plain.Start(ctx))
	t.Cleanup(func() { _ = plain.Stop(context.Background()) })
	status, _ = get(t, "http://"+plain.Addr()+jobs.UIPath+"/", operator)
	require.Equal(t, http.StatusNotFound, status)
}

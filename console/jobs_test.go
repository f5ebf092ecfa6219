package console_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/console"
	"github.com/kumiko-go/kumiko/feature"
	khttp "github.com/kumiko-go/kumiko/http"
	"github.com/kumiko-go/kumiko/jobs"
	"github.com/kumiko-go/kumiko/kumiko"
	"github.com/kumiko-go/kumiko/kumikotest"
	"github.com/kumiko-go/kumiko/samples/tasks"
)

// In a serve process of an app with jobs, an operator signed in to the
// console follows the link to the jobs page, which says that the process
// works the jobs and frames River's UI; River's UI opens on its own too,
// with the console's cookie, without errors, and lists a scheduled job.
func TestJobsViewOpensWithCookie(t *testing.T) {
	db := kumikotest.NewDB(t)
	ctx := context.Background()
	app, err := kumiko.New(ctx, kumiko.Config{DatabaseURL: db.URL, Schema: db.Schema, JWTSecret: kumikotest.Secret,
		Addr: "127.0.0.1:0", InstanceID: "console-jobs", Logger: slog.New(slog.DiscardHandler)}, tasks.Feature, tasks.Reminders)
	require.NoError(t, err)
	require.NoError(t, app.Start(ctx))
	t.Cleanup(func() { require.NoError(t, app.Stop(context.Background())) })
	e := &env{App: &kumikotest.App{DB: db}, url: "http://" + app.Addr()}

	// Due tomorrow: it stays scheduled while the test looks at it.
	_, err = app.Parts().Executor.Jobs().Enqueue(ctx, "task.daily-digest", nil, jobs.Options{RunAt: time.Now().Add(24 * time.Hour)})
	require.NoError(t, err)

	tb := newTab(t)
	tb.login(t, e, "/ops/integration", token(t, "olga", "Operator"))
	tb.run(t, visible(`#jobs-link`), chromedp.Click(chromedp.CSS(`#jobs-link`)), visible(`#jobs-status[data-level="worked"]`))
	require.Contains(t, tb.text(t, `#jobs-line`), "Jobs are being worked (leader ")
	tb.run(t, chromedp.Poll[chromedp.Void](`(function () {
		var d = document.querySelector("#jobs-ui").contentDocument;
		return d && d.title === "River" && d.querySelector("#root") && d.querySelector("#root").innerText.includes("Running");
	})()`))

	tb.run(t, chromedp.Click(chromedp.CSS(`#jobs-ui-link`)), chromedp.WaitReady(chromedp.CSS(`#root`)))
	tb.run(t, chromedp.Poll[chromedp.Void](`document.querySelector("#root").innerText.includes("Running")`))
	title, err := chromedp.Run(tb.ctx, chromedp.Title())
	require.NoError(t, err)
	require.Equal(t, "River", title)

	tb.run(t, chromedp.Navigate(e.url+jobs.UIPath+"/jobs?state=scheduled"), chromedp.WaitReady(chromedp.CSS(`#root`)))
	tb.run(t, chromedp.Poll[chromedp.Void](`document.querySelector("#root").innerText.includes("task.daily-digest")`))
}

// chores has one job, which a test's runner works once it starts.
var chores = feature.Define("chores", func(r *feature.Registrar) {
	r.Job("chore.sweep", struct{}{}, func(feature.JobContext, struct{}) error { return nil })
})

// While no process works jobs, the jobs page warns so, and warns of a job
// that has waited past its time with nobody working it, naming it; once a
// runner starts, the page says, without a reload, that jobs are being
// worked and the warning leaves. The status's JSON form says the same, to
// operators only.
func TestJobsPageWarnsWhenNobodyWorks(t *testing.T) {
	app := kumikotest.NewApp(t, []*feature.Feature{chores})
	runner := app.Executor.Jobs()
	ui, err := runner.UI(jobs.UIPath)
	require.NoError(t, err)
	require.NoError(t, ui.Start(t.Context()))
	s, err := khttp.NewServer(khttp.Config{JWTSecret: []byte(kumikotest.Secret), Logger: slog.New(slog.DiscardHandler)},
		app.Executor, app.Store)
	require.NoError(t, err)
	c, err := console.New(console.Config{
		Store: app.Store, Executor: app.Executor, Authenticate: s.TokenUser, JobsRunner: runner, JobsUI: ui,
		Interval: 100 * time.Millisecond, Logger: slog.New(slog.DiscardHandler),
	})
	require.NoError(t, err)
	s.MountConsole(c.Prefix(), c)
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		c.Close()
		require.NoError(t, ui.Stop(context.Background()))
	})
	e := &env{App: app, url: srv.URL}
	status := func(tok string) (int, map[string]any) {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, e.url+"/ops/jobs-status/data", nil)
		require.NoError(t, err)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer func() { require.NoError(t, res.Body.Close()) }()
		var body struct {
			Data map[string]any `json:"data"`
		}
		if res.StatusCode == http.StatusOK {
			require.NoError(t, json.NewDecoder(res.Body).Decode(&body))
		}
		return res.StatusCode, body.Data
	}

	// Due three minutes ago, while no process ran.
	late, err := runner.Enqueue(t.Context(), "chore.sweep", nil, jobs.Options{RunAt: time.Now().Add(-3 * time.Minute)})
	require.NoError(t, err)

	tb := newTab(t)
	tb.login(t, e, "/ops/jobs-status", token(t, "olga", "Operator"))
	tb.run(t, visible(`#jobs-status[data-level="unworked"] #jobs-overdue.warning`))
	require.Contains(t, tb.text(t, `#jobs-line`), "No process is working jobs.")
	require.Contains(t, tb.text(t, `#jobs-line`), "Start one and check its log.")
	require.Equal(t, "1 job has waited past its time with nobody working them (oldest: chore.sweep, 3 min).",
		tb.text(t, `#jobs-overdue`))
	code, data := status(token(t, "olga", "Operator"))
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, false, data["live"])
	require.Equal(t, "unworked", data["level"])
	require.InDelta(t, 1, data["overdue"], 0)
	require.Equal(t, "chore.sweep", data["oldest"].(map[string]any)["name"])
	require.InDelta(t, late.ID, data["oldest"].(map[string]any)["id"], 0)
	require.Equal(t, http.StatusUnauthorized, first(status("")))
	require.Equal(t, http.StatusForbidden, first(status(token(t, "ada", "Admin"))))

	require.NoError(t, runner.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, runner.Stop(context.Background())) })
	tb.run(t, visible(`#jobs-status[data-level="worked"]`), chromedp.WaitNotVisible(chromedp.CSS(`#jobs-overdue`)))
	require.Contains(t, tb.text(t, `#jobs-line`), "Jobs are being worked (leader ")
	code, data = status(token(t, "olga", "Operator"))
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, true, data["live"])
	require.InDelta(t, 0, data["overdue"], 0)
	require.Eventually(t, func() bool { return e.Count(t, "SELECT count(*) FROM river_job WHERE state = 'completed'") == 1 },
		30*time.Second, 50*time.Millisecond, "the late job is worked")

	// The page fits a 360 px wide screen.
	tb.run(t, chromedp.EmulateViewport(360, 740), chromedp.Reload(), visible(`#jobs-status[data-level="worked"]`))
	width, err := chromedp.Run(tb.ctx, chromedp.Evaluate[int](`document.documentElement.scrollWidth`))
	require.NoError(t, err)
	require.LessOrEqual(t, width, 360)
}

package console_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/jobs"
	"github.com/kumiko-go/kumiko/kumiko"
	"github.com/kumiko-go/kumiko/kumikotest"
	"github.com/kumiko-go/kumiko/samples/tasks"
)

// In a serve process of an app with jobs, an operator signed in to the
// console follows the link to the jobs view and River's UI opens in the
// browser with the console's cookie, without errors, and lists a
// scheduled job.
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
	tb.run(t, visible(`#jobs-link`), chromedp.Click(chromedp.CSS(`#jobs-link`)), chromedp.WaitReady(chromedp.CSS(`#root`)))
	tb.run(t, chromedp.Poll[chromedp.Void](`document.querySelector("#root").innerText.includes("Running")`))
	title, err := chromedp.Run(tb.ctx, chromedp.Title())
	require.NoError(t, err)
	require.Equal(t, "River", title)

	tb.run(t, chromedp.Navigate(e.url+jobs.UIPath+"/jobs?state=scheduled"), chromedp.WaitReady(chromedp.CSS(`#root`)))
	tb.run(t, chromedp.Poll[chromedp.Void](`document.querySelector("#root").innerText.includes("task.daily-digest")`))
}

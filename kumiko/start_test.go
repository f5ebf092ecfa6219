package kumiko_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/fx"

	"github.com/kumiko-go/kumiko/jobs"
	"github.com/kumiko-go/kumiko/kumiko"
	"github.com/kumiko-go/kumiko/kumikotest"
	"github.com/kumiko-go/kumiko/samples/tasks"
)

// works checks that a started app whose start context was cancelled after
// Start still does everything: it serves, delivers events to a consumer,
// delivers integration events, and works a job enqueued now.
func works(t *testing.T, db *kumikotest.DB, app *kumiko.App) {
	t.Helper()
	token := issue(t, []string{"User"})
	post(t, "http://"+app.Addr()+"/api/write", token, `{"type":"task.create","payload":{"title":"t"}}`, http.StatusOK)
	post(t, "http://"+app.Addr()+"/api/command", token, `{"type":"probe.publish","payload":{"key":"published"}}`, http.StatusOK)
	_, err := app.Parts().Executor.Jobs().Enqueue(context.Background(), "probe.hang", probeKey{Key: "job"}, jobs.Options{})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return db.Count(t, "SELECT count(*) FROM probe_seen") == 1 }, 30*time.Second, 10*time.Millisecond,
		"the event reached the consumer")
	require.Eventually(t, func() bool { return db.Count(t, "SELECT count(*) FROM probe_writes WHERE k = 'published'") == 1 },
		30*time.Second, 10*time.Millisecond, "the integration event reached its handler")
	require.Eventually(t, func() bool { return db.Count(t, "SELECT count(*) FROM probe_writes WHERE k = 'job'") == 1 },
		30*time.Second, 10*time.Millisecond, "the job was worked")
}

// kumiko.New + Start with a context the caller cancels right after Start:
// no part keeps it, so the app goes on working until Stop.
func TestStartContextCancelledAfterStart(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	db.Exec(t, "CREATE TABLE probe_writes (k text PRIMARY KEY)")
	ctx, cancel := context.WithCancel(context.Background())
	app, err := kumiko.New(ctx, kumiko.Config{DatabaseURL: db.URL, Schema: db.Schema, JWTSecret: secret,
		Addr: "127.0.0.1:0", InstanceID: "cancelled-start"}, tasks.Feature, probe(newStuck(t)))
	require.NoError(t, err)
	require.NoError(t, app.Start(ctx))
	cancel()
	works(t, db, app)
	require.NoError(t, app.Stop(context.Background()))
}

// The same through the fx module: fx cancels its start context once the
// start hooks ran.
func TestModuleStartContextCancelledAfterStart(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	db.Exec(t, "CREATE TABLE probe_writes (k text PRIMARY KEY)")
	var app *kumiko.App
	fxApp := fx.New(fx.NopLogger,
		kumiko.Module(context.Background(), kumiko.Config{DatabaseURL: db.URL, Schema: db.Schema, JWTSecret: secret,
			Addr: "127.0.0.1:0", InstanceID: "fx-cancelled-start"}, tasks.Feature, probe(newStuck(t))),
		fx.Populate(&app))
	require.NoError(t, fxApp.Err())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	require.NoError(t, fxApp.Start(ctx))
	cancel()
	works(t, db, app)
	require.NoError(t, fxApp.Stop(context.Background()))
}

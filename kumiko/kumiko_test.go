package kumiko_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/fx"
	"go.uber.org/goleak"

	khttp "github.com/kumiko-go/kumiko/http"
	"github.com/kumiko-go/kumiko/kumiko"
	"github.com/kumiko-go/kumiko/kumikotest"
	"github.com/kumiko-go/kumiko/pipeline"
	"github.com/kumiko-go/kumiko/samples/tasks"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

const secret = "a-test-secret-that-is-long-enough-for-hs256"

func TestConfigValidationNamesTheField(t *testing.T) {
	t.Parallel()
	cases := map[string]kumiko.Config{
		"Config.DatabaseURL is required":    {JWTSecret: secret},
		"Config.DatabaseURL must be":        {DatabaseURL: "mysql://x", JWTSecret: secret},
		"Config.JWTSecret is required":      {DatabaseURL: "postgres://x/y"},
		"Config.JWTSecret must be at least": {DatabaseURL: "postgres://x/y", JWTSecret: "short"},
		"Config.RedisURL":                   {DatabaseURL: "postgres://x/y", JWTSecret: secret, RedisURL: "http://x"},
		`Config.InstanceID "__shared__"`:    {DatabaseURL: "postgres://x/y", JWTSecret: secret, InstanceID: "__shared__"},
		"Config.MaxConns must be at least":  {DatabaseURL: "postgres://x/y", JWTSecret: secret, MaxConns: 1},
	}
	for want, cfg := range cases {
		_, err := kumiko.BuildServer(context.Background(), cfg, tasks.Feature)
		require.ErrorContains(t, err, want)
	}
	// A key set alone is enough: HS256 is then refused.
	app, err := kumiko.BuildServer(context.Background(), kumiko.Config{DatabaseURL: "postgres://x/y", JWKSURL: "https://idp.example/jwks"}, tasks.Feature)
	require.NoError(t, err)
	require.NoError(t, app.Stop(context.Background()))
}

// The server BuildServer wires serves the sample, then stops gracefully.
func TestBuildServerStartStop(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	ctx := context.Background()
	app, err := kumiko.BuildServer(ctx, kumiko.Config{
		DatabaseURL: db.URL, Schema: db.Schema, JWTSecret: secret, Addr: "127.0.0.1:0", InstanceID: "test-1",
	}, tasks.Feature)
	require.NoError(t, err)
	require.NoError(t, app.Start(ctx))
	base := "http://" + app.Addr()

	resp, err := http.Get(base + "/healthz")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)

	token, err := khttp.IssueToken([]byte(secret), "u-1", "01900000-0000-7000-8000-000000000001", []string{"User"}, time.Minute)
	require.NoError(t, err)
	body := post(t, base+"/api/write", token, `{"type":"task.create","payload":{"title":"via fx"}}`, http.StatusOK)
	require.Contains(t, body, `"title":"via fx"`)
	require.Equal(t, 1, db.Count(t, "SELECT count(*) FROM read_task"))
	require.Equal(t, db.Schema, app.Parts().Store.Schema(), "the store works in the configured schema")
	require.NotNil(t, app.Parts().Executor)

	require.NoError(t, app.Stop(ctx))
	resp, err = http.Get(base + "/healthz")
	if err == nil {
		resp.Body.Close()
	}
	require.Error(t, err, "stopped servers do not answer")
}

func TestStartFailsClearlyWithoutDatabase(t *testing.T) {
	t.Parallel()
	app, err := kumiko.BuildServer(context.Background(), kumiko.Config{
		DatabaseURL: "postgres://postgres@127.0.0.1:1/none?connect_timeout=2", JWTSecret: secret, Addr: "127.0.0.1:0", InstanceID: "t",
	}, tasks.Feature)
	require.NoError(t, err)
	err = app.Start(context.Background())
	require.ErrorContains(t, err, "database unreachable")
}

func post(t *testing.T, url, token, body string, want int) string {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	require.Equal(t, want, resp.StatusCode, string(out))
	return string(out)
}

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}

func TestConfigFromEnv(t *testing.T) {
	t.Setenv("DATABASE_URL", "postgres://db/app")
	t.Setenv("KUMIKO_INSTANCE_ID", "pod-7")
	t.Setenv("KUMIKO_ADDR", ":9999")
	cfg := kumiko.Config{InstanceID: "explicit"}.FromEnv()
	require.Equal(t, "postgres://db/app", cfg.DatabaseURL)
	require.Equal(t, "explicit", cfg.InstanceID, "configured values win over the environment")
	require.Equal(t, ":9999", cfg.Addr)
	require.Equal(t, "pod-7", kumiko.Config{}.FromEnv().InstanceID)
	require.False(t, kumiko.Config{}.FromEnv().TraceDatabase)
	t.Setenv("KUMIKO_TRACE_DATABASE", "true")
	require.True(t, kumiko.Config{}.FromEnv().TraceDatabase)

	t.Setenv("KUMIKO_INSTANCE_ID", "__shared__")
	_, err := kumiko.BuildServer(context.Background(), kumiko.Config{JWTSecret: secret}.FromEnv(), tasks.Feature)
	require.ErrorContains(t, err, `Config.InstanceID "__shared__" is reserved`)
}

// Module hooks App.Start and App.Stop into an fx lifecycle and provides
// the parts.
func TestModuleRunsTheAppInAnFxGraph(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	ctx := context.Background()
	var (
		app  *kumiko.App
		disp *pipeline.Executor
	)
	fxApp := fx.New(
		fx.NopLogger,
		kumiko.Module(ctx, kumiko.Config{
			DatabaseURL: db.URL, Schema: db.Schema, JWTSecret: secret, Addr: "127.0.0.1:0", InstanceID: "fx-1",
		}, tasks.Feature),
		fx.Populate(&app, &disp),
	)
	require.NoError(t, fxApp.Err())
	require.Same(t, app.Parts().Executor, disp)
	require.NoError(t, fxApp.Start(ctx))
	resp, err := http.Get("http://" + app.Addr() + "/healthz")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, 1, db.Count(t, "SELECT count(*) FROM pg_tables WHERE schemaname = $1 AND tablename = 'read_task'", db.Schema))
	require.NoError(t, fxApp.Stop(ctx))

	bad := fx.New(fx.NopLogger, kumiko.Module(ctx, kumiko.Config{JWTSecret: secret}, tasks.Feature), fx.Populate(&app))
	require.ErrorContains(t, bad.Err(), "Config.DatabaseURL is required")
}

// A Start that fails stops what it started; Stop after it, or on an app
// that never started, releases the rest (goleak checks the pool's
// goroutines).
func TestStartRollsBackAndStopReleases(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	ctx := context.Background()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer taken.Close()
	app, err := kumiko.New(ctx, kumiko.Config{
		DatabaseURL: db.URL, Schema: db.Schema, JWTSecret: secret, Addr: taken.Addr().String(), InstanceID: "rollback",
	}, tasks.Feature)
	require.NoError(t, err)
	err = app.Start(ctx)
	require.ErrorContains(t, err, "listen "+taken.Addr().String()+" (http)")
	require.Equal(t, 1, db.Count(t, "SELECT count(*) FROM pg_tables WHERE schemaname = $1 AND tablename = 'read_task'", db.Schema),
		"the steps before the listener ran")
	require.NoError(t, app.Stop(ctx))
	require.ErrorContains(t, app.Start(ctx), "started before")

	never, err := kumiko.New(ctx, kumiko.Config{DatabaseURL: db.URL, Schema: db.Schema, JWTSecret: secret, InstanceID: "never"}, tasks.Feature)
	require.NoError(t, err)
	require.NoError(t, never.Stop(ctx))
}

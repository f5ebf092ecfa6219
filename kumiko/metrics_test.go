package kumiko_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	khttp "github.com/kumiko-go/kumiko/http"
	"github.com/kumiko-go/kumiko/kumiko"
	"github.com/kumiko-go/kumiko/kumikotest"
	"github.com/kumiko-go/kumiko/samples/tasks"
)

const testTenant = "01900000-0000-7000-8000-000000000001"

// get fetches url with token (none when empty) and returns the status and
// body.
func get(t *testing.T, url, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	return resp.StatusCode, readAll(t, resp)
}

func issue(t *testing.T, roles []string, opts ...khttp.TokenOption) string {
	t.Helper()
	tok, err := khttp.IssueToken([]byte(secret), "u-1", testTenant, roles, time.Minute, opts...)
	require.NoError(t, err)
	return tok
}

// With MetricsAddr, /metrics is served there without a token, in a server
// and in a worker, and the API listener has none; the configured issuer,
// audience and operator role reach the HTTP server.
func TestMetricsListener(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	ctx := context.Background()
	const iss, aud = "https://idp.example", "tasks-api"
	cfg := kumiko.Config{DatabaseURL: db.URL, Schema: db.Schema, JWTSecret: secret, Addr: "127.0.0.1:0",
		MetricsAddr: "127.0.0.1:0", JWTIssuer: iss, JWTAudience: aud, OperatorRole: "SRE", InstanceID: "m-1"}
	server, err := kumiko.BuildServer(ctx, cfg, tasks.Feature)
	require.NoError(t, err)
	require.NoError(t, server.Start(ctx))
	t.Cleanup(func() { _ = server.Stop(context.Background()) })
	require.NotEmpty(t, server.MetricsAddr())
	require.NotEqual(t, server.Addr(), server.MetricsAddr())

	claimed := []khttp.TokenOption{khttp.TokenIssuer(iss), khttp.TokenAudience(aud)}
	user := issue(t, []string{"User"}, claimed...)
	post(t, "http://"+server.Addr()+"/api/write", user, `{"type":"task.create","payload":{"title":"counted"}}`, http.StatusOK)
	post(t, "http://"+server.Addr()+"/api/write", issue(t, []string{"User"}), `{"type":"task.create","payload":{"title":"x"}}`, http.StatusUnauthorized)

	status, body := get(t, "http://"+server.MetricsAddr()+"/metrics", "")
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, `kumiko_http_requests_total{method="POST",route="/api/write",status="200"} 1`)
	status, _ = get(t, "http://"+server.Addr()+"/metrics", issue(t, []string{"SRE"}, claimed...))
	require.Equal(t, http.StatusNotFound, status, "the API listener serves no metrics")
	status, _ = get(t, "http://"+server.Addr()+"/api/consumers", issue(t, []string{"Operator"}, claimed...))
	require.Equal(t, http.StatusForbidden, status, "the operator role is SRE")
	status, _ = get(t, "http://"+server.Addr()+"/api/consumers", issue(t, []string{"SRE"}, claimed...))
	require.Equal(t, http.StatusOK, status)

	wcfg := cfg
	wcfg.InstanceID, wcfg.Addr = "w-1", ""
	worker, err := kumiko.BuildWorker(ctx, wcfg, tasks.Feature, counter)
	require.NoError(t, err)
	require.NoError(t, worker.Start(ctx))
	t.Cleanup(func() { _ = worker.Stop(context.Background()) })
	require.Eventually(t, func() bool {
		status, body := get(t, "http://"+worker.MetricsAddr()+"/metrics", "")
		return status == http.StatusOK && strings.Contains(body, `kumiko_event_consumer_lag_events{consumer="task-counter"`)
	}, 10*time.Second, 20*time.Millisecond, "the worker's consumer metrics")
}

// Without MetricsAddr the API listener serves /metrics to the operator role
// only.
func TestMetricsOnTheAPIListener(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	ctx := context.Background()
	server, err := kumiko.BuildServer(ctx, kumiko.Config{DatabaseURL: db.URL, Schema: db.Schema, JWTSecret: secret,
		Addr: "127.0.0.1:0", InstanceID: "m-2"}, tasks.Feature)
	require.NoError(t, err)
	require.NoError(t, server.Start(ctx))
	t.Cleanup(func() { _ = server.Stop(context.Background()) })
	require.Empty(t, server.MetricsAddr())

	url := "http://" + server.Addr() + "/metrics"
	status, _ := get(t, url, "")
	require.Equal(t, http.StatusUnauthorized, status)
	status, _ = get(t, url, issue(t, []string{"Admin", "User"}))
	require.Equal(t, http.StatusForbidden, status)
	status, body := get(t, url, issue(t, []string{"Operator"}))
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, "go_goroutines")
}

func TestMetricsConfig(t *testing.T) {
	t.Setenv("KUMIKO_METRICS_ADDR", ":9090")
	t.Setenv("KUMIKO_JWT_ISSUER", "https://idp.example")
	t.Setenv("KUMIKO_JWT_AUDIENCE", "tasks-api")
	t.Setenv("KUMIKO_OPERATOR_ROLE", "SRE")
	cfg := kumiko.Config{}.FromEnv()
	require.Equal(t, ":9090", cfg.MetricsAddr)
	require.Equal(t, "https://idp.example", cfg.JWTIssuer)
	require.Equal(t, "tasks-api", cfg.JWTAudience)
	require.Equal(t, "SRE", cfg.OperatorRole)

	_, err := kumiko.BuildServer(context.Background(), kumiko.Config{DatabaseURL: "postgres://x/y", JWTSecret: secret,
		Addr: ":8080", MetricsAddr: ":8080"}, tasks.Feature)
	require.ErrorContains(t, err, "Config.MetricsAddr must differ from Config.Addr")
}

package kumiko_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	khttp "github.com/kumiko-go/kumiko/http"
	"github.com/kumiko-go/kumiko/kumiko"
	"github.com/kumiko-go/kumiko/kumikotest"
	"github.com/kumiko-go/kumiko/samples/tasks"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if tasksDir != "" {
		_ = os.RemoveAll(tasksDir) // the sample binary built by tasksBinary
	}
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
		"Config.DatabaseURL is required":   {JWTSecret: secret},
		"Config.DatabaseURL must be":       {DatabaseURL: "mysql://x", JWTSecret: secret},
		"Config.JWTSecret":                 {DatabaseURL: "postgres://x/y"},
		"Config.RedisURL":                  {DatabaseURL: "postgres://x/y", JWTSecret: secret, RedisURL: "http://x"},
		`Config.InstanceID "__shared__"`:   {DatabaseURL: "postgres://x/y", JWTSecret: secret, InstanceID: "__shared__"},
		"Config.MaxConns must be at least": {DatabaseURL: "postgres://x/y", JWTSecret: secret, MaxConns: 1},
	}
	for want, cfg := range cases {
		_, err := kumiko.BuildServer(context.Background(), cfg, tasks.Feature)
		require.ErrorContains(t, err, want)
	}
}

// The server built with fx serves the sample, then stops gracefully.
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
	require.NotNil(t, app.Parts().Dispatcher)

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

// The sample binary, as `make run` starts it: development defaults, a printed
// token and request that work as printed, /healthz, and a clean exit on
// SIGTERM.
func TestSampleBinaryServes(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	bin := tasksBinary(t)
	cmd := exec.Command(bin, "serve")
	cmd.Env = append(os.Environ(), "DATABASE_URL="+db.URL, "KUMIKO_SCHEMA="+db.Schema, "KUMIKO_ADDR=127.0.0.1:0",
		"KUMIKO_JWT_SECRET=", "REDIS_URL=", "KUMIKO_INSTANCE_ID=sample-test")
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	var printed strings.Builder
	lines := bufio.NewScanner(stdout)
	for lines.Scan() {
		printed.WriteString(lines.Text() + "\n")
		if strings.HasPrefix(lines.Text(), "curl ") {
			lines.Scan()
			printed.WriteString(lines.Text() + "\n")
			break
		}
	}
	out := printed.String()
	addr := regexp.MustCompile(`ready on http://(\S+)`).FindStringSubmatch(out)
	require.NotNil(t, addr, "startup output:\n%s\nstderr:\n%s", out, stderr.String())
	token := regexp.MustCompile(`export TOKEN=(\S+)`).FindStringSubmatch(out)
	require.NotNil(t, token, out)
	payload := regexp.MustCompile(`-d '(.*)'`).FindStringSubmatch(out)
	require.NotNil(t, payload, out)

	resp, err := http.Get("http://" + addr[1] + "/healthz")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)

	body := post(t, "http://"+addr[1]+"/api/write", token[1], payload[1], http.StatusOK)
	var created struct{ Data map[string]any }
	require.NoError(t, json.Unmarshal([]byte(body), &created))
	require.Equal(t, float64(1), created.Data["version"])

	// The README's session, request by request.
	base, id := "http://"+addr[1], created.Data["id"].(string)
	body = post(t, base+"/api/write", token[1], `{"type":"task.update","payload":{"id":"`+id+`","version":1,"changes":{"priority":"high"}}}`, http.StatusOK)
	require.Contains(t, body, `"priority":"high"`)
	require.Contains(t, body, `"version":2`)
	body = post(t, base+"/api/write", token[1], `{"type":"task.update","payload":{"id":"`+id+`","version":1,"changes":{"title":"stale"}}}`, http.StatusConflict)
	require.Contains(t, body, `"details":{"currentVersion":2,"expectedVersion":1}`)
	body = post(t, base+"/api/query", token[1], `{"type":"task.list","payload":{"limit":10}}`, http.StatusOK)
	require.Contains(t, body, `"nextCursor":""`)
	req, err := http.NewRequest(http.MethodGet, base+"/api/inspect/task/"+id, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token[1])
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	inspect, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, string(inspect), `"type":"task.created"`)
	require.Contains(t, string(inspect), `"type":"task.updated"`)
	require.Contains(t, out, "roles Admin, User, Operator")
	status, consumers := get(t, base+"/api/consumers", token[1])
	require.Equal(t, http.StatusOK, status, "the development token is an operator's: %s", consumers)

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	err = cmd.Wait()
	require.NoError(t, err, "a graceful stop exits 0; stderr:\n%s", stderr.String())
}

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}

// syncBuffer collects a subprocess's output while the test reads it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
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

	t.Setenv("KUMIKO_INSTANCE_ID", "__shared__")
	_, err := kumiko.BuildServer(context.Background(), kumiko.Config{JWTSecret: secret}.FromEnv(), tasks.Feature)
	require.ErrorContains(t, err, `Config.InstanceID "__shared__" is reserved`)
}

// The sample binary's worker command starts without an HTTP API (so without
// the event stream's consumer), says so, and exits 0 on SIGTERM.
func TestSampleBinaryWorker(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	cmd := exec.Command(tasksBinary(t), "worker")
	cmd.Env = append(os.Environ(), "DATABASE_URL="+db.URL, "KUMIKO_SCHEMA="+db.Schema,
		"KUMIKO_JWT_SECRET=", "REDIS_URL=", "KUMIKO_INSTANCE_ID=worker-test")
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err, "stderr:\n%s", stderr.String())
	require.Equal(t, "tasks worker worker-test is delivering events\n", line)
	require.Equal(t, 1, db.Count(t, "SELECT count(*) FROM pg_tables WHERE schemaname = $1 AND tablename = 'read_task'", db.Schema),
		"the worker migrated and created the read tables")
	require.Zero(t, db.Count(t, "SELECT count(*) FROM kumiko_event_consumers WHERE name = 'kumiko.sse'"), "a worker serves no event stream")

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, cmd.Wait(), "stderr:\n%s", stderr.String())
}

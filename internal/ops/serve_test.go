package ops_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/kumiko"
	"github.com/kumiko-go/kumiko/kumikotest"
	"github.com/kumiko-go/kumiko/samples/tasks"
)

const secret = "a-test-secret-that-is-long-enough-for-hs256"

// badApp, set in a subprocess's environment, makes the test binary the
// command line of an app whose feature fails the boot, named by
// badAppName. stuckApp makes it the command line of the sample's tasks and
// a projection whose handler blocks for ever (see stuck) — unless it is
// "released", when it only records.
const (
	badApp     = "KUMIKO_OPS_TEST_BAD_APP"
	badAppName = "KUMIKO_OPS_TEST_BAD_APP_NAME"
	stuckApp   = "KUMIKO_OPS_TEST_STUCK_APP"
)

// bad is a feature the registry refuses: a malformed event name and CRUD
// handlers without access rules.
var bad = feature.Define("bad", func(r *feature.Registrar) {
	r.Entity("thing", feature.Fields{"title": feature.Text()})
	r.Crud("thing", feature.Access{})
	r.DefineEvent("Bad Name", struct{}{})
})

// stuck is a projection of created tasks whose handler, in stuckApp's
// process, writes its row, says so on stderr and then blocks for ever,
// ignoring its context, as an external call without a deadline would.
var stuck = feature.Define("stuck", func(r *feature.Registrar) {
	r.MultiStreamProjection(feature.MultiStreamProjection{
		Name: "stuck-table",
		Table: &feature.TableDef{Name: "stuck_seen", Columns: []feature.Column{{Name: "event_id", Type: "bigint", NotNull: true}},
			PrimaryKey: []string{"event_id"}},
		Apply: map[string]feature.ApplyFunc{"task.created": func(ctx feature.ApplyContext, e feature.Event) error {
			if _, err := ctx.DB().Exec(ctx.Context(), "INSERT INTO "+ctx.Table()+" (event_id) VALUES ($1)", e.ID); err != nil {
				return err
			}
			if os.Getenv(stuckApp) != "released" {
				fmt.Fprintf(os.Stderr, "stuck: handling event %d\n", e.ID)
				select {}
			}
			return nil
		}},
	})
})

func TestMain(m *testing.M) {
	if os.Getenv(badApp) != "" {
		kumiko.Main(kumiko.Config{Name: os.Getenv(badAppName)}, bad)
		os.Exit(0)
	}
	if os.Getenv(stuckApp) != "" {
		kumiko.Main(kumiko.Config{Name: "tasks"}, tasks.Feature, stuck)
		os.Exit(0)
	}
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

// A boot that fails prints its error once, without a stack or wiring
// noise, exits non-zero, and creates nothing in the database when the
// features are invalid: not the schema, and without DATABASE_URL not the
// development database either.
func TestBootErrorsPrintOnceAndCreateNothing(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	schema := db.Schema + "_boot" // does not exist
	name := "boot_" + strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	clean := func(r cliRun) {
		t.Helper()
		require.NotEqual(t, 0, r.code, "stdout:\n%s", r.stdout)
		for _, noise := range []string{"fx", ".go:", "goroutine", "could not build", "OnStart"} {
			require.NotContains(t, r.stderr, noise)
		}
	}
	for _, args := range [][]string{{"serve"}, {"worker"}, {"migrate"}, {"project", "list"}} {
		for _, dbURL := range []string{db.URL, ""} {
			env := append(os.Environ(), badApp+"=1", badAppName+"="+name, "DATABASE_URL="+dbURL, "KUMIKO_SCHEMA="+schema,
				"KUMIKO_ADDR=127.0.0.1:0", "KUMIKO_JWT_SECRET=", "REDIS_URL=", "KUMIKO_INSTANCE_ID=boot-test")
			r := runCLI(t, os.Args[0], env, args...)
			clean(r)
			require.Equal(t, 1, strings.Count(r.stderr, `event "Bad Name": event names are lowercase`), "%v:\n%s", args, r.stderr)
			require.Equal(t, 1, strings.Count(r.stderr, `handler "thing.create": unreachable handler`), "%v:\n%s", args, r.stderr)
			require.Zero(t, db.Count(t, "SELECT count(*) FROM pg_namespace WHERE nspname = $1", schema), "%v created the schema", args)
			require.Zero(t, db.Count(t, "SELECT count(*) FROM pg_database WHERE datname = $1", "kumiko_"+name), "%v created the development database", args)
		}
	}

	// A start that fails (no database) says so once as well.
	env := append(os.Environ(), "DATABASE_URL=postgres://postgres@127.0.0.1:1/none?connect_timeout=2", "KUMIKO_ADDR=127.0.0.1:0",
		"KUMIKO_JWT_SECRET=", "REDIS_URL=", "KUMIKO_INSTANCE_ID=boot-test")
	for _, cmd := range []string{"serve", "worker"} {
		r := runCLI(t, tasksBinary(t), env, cmd)
		clean(r)
		require.Equal(t, 1, strings.Count(r.stderr, "database unreachable"), "%s:\n%s", cmd, r.stderr)
	}
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
		"KUMIKO_JWT_SECRET=", "REDIS_URL=", "KUMIKO_INSTANCE_ID=sample-test", "KUMIKO_OPERATOR_ROLE=SRE",
		"KUMIKO_SHUTDOWN_TIMEOUT="+shutdownTimeout.String())
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
	require.Contains(t, out, "roles Admin, User, SRE", "the configured roles")
	status, consumers := get(t, base+"/api/consumers", token[1])
	require.Equal(t, http.StatusOK, status, "the development token is an operator's: %s", consumers)

	terminated := time.Now()
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	err = cmd.Wait()
	require.NoError(t, err, "a graceful stop exits 0; stderr:\n%s", stderr.String())
	require.Less(t, time.Since(terminated), shutdownTimeout+kumiko.StopMargin, "the stop is bounded")
	require.Contains(t, stderr.String(), `"msg":"kumiko: stopped"`)
}

// The sample binary's worker command starts without an HTTP API (so without
// the event stream's consumer), says so, and exits 0 on SIGTERM.
func TestSampleBinaryWorker(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	cmd := exec.Command(tasksBinary(t), "worker")
	cmd.Env = append(os.Environ(), "DATABASE_URL="+db.URL, "KUMIKO_SCHEMA="+db.Schema,
		"KUMIKO_JWT_SECRET=", "REDIS_URL=", "KUMIKO_INSTANCE_ID=worker-test", "KUMIKO_SHUTDOWN_TIMEOUT="+shutdownTimeout.String())
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

	terminated := time.Now()
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, cmd.Wait(), "stderr:\n%s", stderr.String())
	require.Less(t, time.Since(terminated), shutdownTimeout+kumiko.StopMargin, "the stop is bounded")
}

// shutdownTimeout is KUMIKO_SHUTDOWN_TIMEOUT of the binaries these tests
// stop: short, so that the bound checked, it + StopMargin, is the feature.
const shutdownTimeout = time.Second

// served is a binary's serve running in development mode, its start-up
// output read: the address and the development token.
type served struct {
	cmd         *exec.Cmd
	addr, token string
	stderr      *syncBuffer
}

// serveBinary starts bin's serve with env and reads its start-up output.
func serveBinary(t *testing.T, bin string, env []string) *served {
	t.Helper()
	cmd := exec.Command(bin, "serve")
	cmd.Env = env
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	srv := &served{cmd: cmd, stderr: &syncBuffer{}}
	cmd.Stderr = srv.stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := bufio.NewScanner(stdout)
	for lines.Scan() && (srv.addr == "" || srv.token == "") {
		if m := regexp.MustCompile(`ready on http://(\S+)`).FindStringSubmatch(lines.Text()); m != nil {
			srv.addr = m[1]
		}
		if m := regexp.MustCompile(`export TOKEN=(\S+)`).FindStringSubmatch(lines.Text()); m != nil {
			srv.token = m[1]
		}
	}
	require.NotEmpty(t, srv.token, "start-up output incomplete; stderr:\n%s", srv.stderr.String())
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	return srv
}

// terminate sends SIGTERM and returns the exit code and how long the
// process took to exit.
func (s *served) terminate(t *testing.T) (code int, took time.Duration) {
	t.Helper()
	sent := time.Now()
	require.NoError(t, s.cmd.Process.Signal(syscall.SIGTERM))
	err := s.cmd.Wait()
	took = time.Since(sent)
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return exit.ExitCode(), took
	}
	require.NoError(t, err)
	return 0, took
}

// SIGTERM while a consumer's handler blocks for ever: serve exits 1 within
// KUMIKO_SHUTDOWN_TIMEOUT + StopMargin, with one log line naming the
// consumer; the shard's cursor did not move past the event; the next start
// delivers the event and exits 0 on SIGTERM.
func TestServeStopsWithinTheBoundWhenAHandlerBlocks(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	env := func(mode, instance string) []string {
		return append(os.Environ(), stuckApp+"="+mode, "DATABASE_URL="+db.URL, "KUMIKO_SCHEMA="+db.Schema, "KUMIKO_ADDR=127.0.0.1:0",
			"KUMIKO_JWT_SECRET=", "REDIS_URL=", "KUMIKO_INSTANCE_ID="+instance, "KUMIKO_SHUTDOWN_TIMEOUT="+shutdownTimeout.String())
	}
	first := serveBinary(t, os.Args[0], env("stuck", "stuck-1"))
	post(t, "http://"+first.addr+"/api/write", first.token, `{"type":"task.create","payload":{"title":"t"}}`, http.StatusOK)
	var id int64
	require.Eventually(t, func() bool {
		m := regexp.MustCompile(`stuck: handling event (\d+)`).FindStringSubmatch(first.stderr.String())
		if m != nil {
			id, _ = strconv.ParseInt(m[1], 10, 64)
		}
		return m != nil
	}, 30*time.Second, 10*time.Millisecond, "the handler was reached; stderr:\n%s", first.stderr.String())

	code, took := first.terminate(t)
	logs := first.stderr.String()
	require.Equal(t, 1, code, "work was abandoned; stderr:\n%s", logs)
	require.Less(t, took, shutdownTimeout+kumiko.StopMargin, "the stop is bounded; stderr:\n%s", logs)
	require.Equal(t, 1, strings.Count(logs, `"msg":"kumiko: stopped, abandoned `), logs)
	require.Contains(t, logs, "abandoned the running passes of consumers stuck-table")
	cursor := func() int64 {
		return int64(db.Count(t, "SELECT last_processed_event_id FROM kumiko_event_consumers WHERE name = 'stuck-table'"))
	}
	require.Less(t, cursor(), id, "the cursor did not move past the abandoned event")

	next := serveBinary(t, os.Args[0], env("released", "stuck-2"))
	require.Eventually(t, func() bool { return cursor() >= id }, 30*time.Second, 10*time.Millisecond, "the next start delivers the event")
	require.Equal(t, 1, db.Count(t, "SELECT count(*) FROM stuck_seen WHERE event_id = $1", id))
	code, took = next.terminate(t)
	require.Zero(t, code, "a clean stop exits 0; stderr:\n%s", next.stderr.String())
	require.Less(t, took, shutdownTimeout+kumiko.StopMargin)
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

// post sends body to url with token and checks the status.
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

// get fetches url with token and returns the status and body.
func get(t *testing.T, url, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

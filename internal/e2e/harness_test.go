package e2e_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	khttp "github.com/kumiko-go/kumiko/http"
	"github.com/kumiko-go/kumiko/kumiko"
	"github.com/kumiko-go/kumiko/kumikotest"
)

// dataKey is every app's KUMIKO_DATA_KEY (32 bytes, base64).
const dataKey = "ZTJlLWRhdGEta2V5LWZvci1wZXJzb25hbC1maWVsZHM="

// secret is every app's KUMIKO_JWT_SECRET; tokens are issued with it.
const secret = "an-end-to-end-secret-long-enough-for-hs256"

// ---- binaries ----

// packages are the app binaries the suite builds, by name.
var packages = map[string]string{
	"tasks":     "./samples/tasks/cmd/tasks",
	"relations": "./samples/relations/cmd/relations",
	"helpdesk":  "./samples/helpdesk/cmd/helpdesk",
	"e2eapp":    "./internal/e2e/e2eapp",
}

var (
	binMu  sync.Mutex
	binDir string
	builds = map[string]func() (string, error){}
)

// binary is the path of the named app binary, built on first use (once per
// run of the test binary; without -race, the apps need none).
func binary(t testing.TB, name string) string {
	t.Helper()
	pkg, ok := packages[name]
	require.True(t, ok, "no binary %q", name)
	binMu.Lock()
	build, ok := builds[name]
	if !ok {
		build = sync.OnceValues(func() (string, error) { return buildBinary(name, pkg) })
		builds[name] = build
	}
	binMu.Unlock()
	path, err := build()
	require.NoError(t, err)
	return path
}

func buildBinary(name, pkg string) (string, error) {
	binMu.Lock()
	if binDir == "" {
		dir, err := os.MkdirTemp("", "kumiko-e2e-")
		if err != nil {
			binMu.Unlock()
			return "", err
		}
		binDir = dir
	}
	dir := binDir
	binMu.Unlock()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, name)
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", pkg, err, b)
	}
	return out, nil
}

func removeBinaries() {
	binMu.Lock()
	defer binMu.Unlock()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
}

// ---- processes ----

// output collects what a process writes, line by line.
type output struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.Write(p)
}

func (o *output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}

// records are the JSON log lines written so far (other lines are skipped).
func (o *output) records() []map[string]any {
	var out []map[string]any
	for line := range strings.SplitSeq(o.String(), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) == nil {
			out = append(out, rec)
		}
	}
	return out
}

// proc is an app process the test started; its test kills it at the end
// and prints its output when the test failed.
type proc struct {
	t      testing.TB
	label  string
	cmd    *exec.Cmd
	stdout output
	stderr output
	done   chan struct{}
	// started is the "kumiko: started" record, once seen.
	started map[string]any
}

// startProc starts bin with args and env (the whole environment).
func startProc(t testing.TB, label, bin string, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{t: t, label: label, done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = env
	p.cmd.SysProcAttr = sysProcAttr()
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	require.NoError(t, p.cmd.Start())
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		if !p.exited() {
			_ = p.cmd.Process.Kill()
		}
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			t.Errorf("%s: still running 10 s after SIGKILL", p.label)
		}
		if t.Failed() {
			p.dump()
		}
	})
	return p
}

// dump logs the process's output (the end of it).
func (p *proc) dump() {
	tail := func(s string) string {
		lines := strings.Split(s, "\n")
		if len(lines) > 150 {
			lines = append([]string{fmt.Sprintf("… %d lines before", len(lines)-150)}, lines[len(lines)-150:]...)
		}
		return strings.Join(lines, "\n")
	}
	p.t.Logf("---- %s (%s) stdout:\n%s\n---- %s stderr:\n%s", p.label, strings.Join(p.cmd.Args, " "), tail(p.stdout.String()), p.label, tail(p.stderr.String()))
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// code is the exit code of an exited process; -1 when a signal ended it.
func (p *proc) code() int { return p.cmd.ProcessState.ExitCode() }

// waitStarted waits for the "kumiko: started" log record and returns it.
func (p *proc) waitStarted() map[string]any {
	p.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		for _, rec := range p.stderr.records() {
			if rec["msg"] == "kumiko: started" {
				p.started = rec
				return rec
			}
		}
		if p.exited() {
			p.dump()
			p.t.Fatalf("%s exited with code %d before it started", p.label, p.code())
		}
		if time.Now().After(deadline) {
			p.dump()
			p.t.Fatalf("%s did not start within 60 s", p.label)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// signal sends sig and returns the time it was sent.
func (p *proc) signal(sig os.Signal) time.Time {
	p.t.Helper()
	at := time.Now()
	require.NoError(p.t, p.cmd.Process.Signal(sig), p.label)
	return at
}

// kill9 kills the process with SIGKILL and waits until it is gone.
func (p *proc) kill9() {
	p.t.Helper()
	p.signal(syscall.SIGKILL)
	p.wait(10 * time.Second)
}

// wait waits at most d for the process to exit and returns its exit code.
func (p *proc) wait(d time.Duration) int {
	p.t.Helper()
	select {
	case <-p.done:
		return p.code()
	case <-time.After(d):
		p.dump()
		p.t.Fatalf("%s still runs after %s", p.label, d)
		return 0
	}
}

// stop sends SIGTERM and waits for a clean exit within the stop bound.
func (p *proc) stop(shutdown time.Duration) {
	p.t.Helper()
	p.signal(syscall.SIGTERM)
	code := p.wait(shutdown + kumiko.StopMargin + stopSlack)
	if code != 0 {
		p.dump()
	}
	require.Zero(p.t, code, "%s: a clean stop exits 0", p.label)
}

// stopSlack is what a loaded two-core machine may add to the stop bound.
const stopSlack = 10 * time.Second

// shutdownTimeout is every app's KUMIKO_SHUTDOWN_TIMEOUT unless a test sets
// its own.
const shutdownTimeout = 5 * time.Second

// ---- apps ----

// e2eConns is the pool size of e2eapp's processes (each holds three
// connections more of its own: the heartbeat's and two listeners').
// PostgreSQL's default allows 100 connections for every test of the
// repository running at once; see also reserve.
const e2eConns = 5

// maxProcs is how many app processes the suite runs at once.
const maxProcs = 5

var procSlots = struct {
	mu   sync.Mutex
	cond *sync.Cond
	free int
}{free: maxProcs}

func init() { procSlots.cond = sync.NewCond(&procSlots.mu) }

// reserve holds n of the suite's process slots until t ends: a test calls
// it first with the most processes it runs at once, so that the suite's
// connections stay within the server's limit however many tests run.
func reserve(t testing.TB, n int) {
	t.Helper()
	require.LessOrEqual(t, n, maxProcs)
	procSlots.mu.Lock()
	for procSlots.free < n {
		procSlots.cond.Wait()
	}
	procSlots.free -= n
	procSlots.mu.Unlock()
	t.Cleanup(func() {
		procSlots.mu.Lock()
		procSlots.free += n
		procSlots.mu.Unlock()
		procSlots.cond.Broadcast()
	})
}

// app is one deployment of an app binary: its database schema and the
// environment every process of it gets, as the README lists it.
type app struct {
	bin string
	db  *kumikotest.DB
	env []string
	hc  *http.Client
}

// newApp deploys binary name on a fresh schema; env adds or overrides
// variables (KEY=value) of every process.
func newApp(t testing.TB, name string, env ...string) *app {
	t.Helper()
	return newAppOn(t, name, kumikotest.NewDB(t), env...)
}

// newAppOn deploys binary name on db.
func newAppOn(t testing.TB, name string, db *kumikotest.DB, env ...string) *app {
	t.Helper()
	bin := binary(t, name)
	base := []string{}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "KUMIKO_") || strings.HasPrefix(k, "OTEL_") || strings.HasPrefix(k, "E2E_") ||
			k == "DATABASE_URL" || k == "REDIS_URL" || k == "RABBITMQ_URL" {
			continue
		}
		base = append(base, kv)
	}
	base = append(base,
		"DATABASE_URL="+db.URL,
		"KUMIKO_SCHEMA="+db.Schema,
		"REDIS_URL="+kumikotest.RedisURL(),
		"KUMIKO_JWT_SECRET="+secret,
		"KUMIKO_ADDR=127.0.0.1:0",
		"KUMIKO_SHUTDOWN_TIMEOUT="+shutdownTimeout.String(),
		"KUMIKO_DATA_KEY="+dataKey,
	)
	a := &app{bin: bin, db: db, env: append(base, env...),
		hc: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 32}, Timeout: 30 * time.Second}}
	t.Cleanup(a.hc.CloseIdleConnections)
	return a
}

// environ is the app's environment for one process, with its instance id
// and extra variables.
func (a *app) environ(instance string, env ...string) []string {
	out := append([]string{}, a.env...)
	out = append(out, "KUMIKO_INSTANCE_ID="+instance)
	return append(out, env...)
}

// server is a running serve process and its API address.
type server struct {
	*proc
	base string
}

// serve starts `<app> serve` as instance id and waits until it serves.
func (a *app) serve(t testing.TB, id string, env ...string) *server {
	t.Helper()
	p := startProc(t, "serve "+id, a.bin, a.environ(id, env...), "serve")
	rec := p.waitStarted()
	addr, _ := rec["addr"].(string)
	require.NotEmpty(t, addr, "the started record names the address: %v", rec)
	return &server{proc: p, base: "http://" + addr}
}

// worker starts `<app> worker` as instance id and waits until it runs.
func (a *app) worker(t testing.TB, id string, env ...string) *proc {
	t.Helper()
	p := startProc(t, "worker "+id, a.bin, a.environ(id, env...), "worker")
	rec := p.waitStarted()
	require.Equal(t, true, rec["worker"], "a worker says so: %v", rec)
	return p
}

// cliResult is what a command of the binary printed and its exit code.
type cliResult struct {
	stdout, stderr string
	code           int
}

// cli runs `<app> args…` against the app's database and fails the test
// unless it exits 0.
func (a *app) cli(t testing.TB, args ...string) cliResult {
	t.Helper()
	r := a.tryCLI(t, args...)
	require.Zero(t, r.code, "%s %s:\nstdout:\n%s\nstderr:\n%s", filepath.Base(a.bin), strings.Join(args, " "), r.stdout, r.stderr)
	return r
}

func (a *app) tryCLI(t testing.TB, args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, a.bin, args...)
	cmd.Env = a.environ("e2e-cli")
	cmd.SysProcAttr = sysProcAttr()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("%s %v: %v", a.bin, args, err)
	}
	return cliResult{stdout: stdout.String(), stderr: stderr.String(), code: cmd.ProcessState.ExitCode()}
}

// ---- HTTP ----

// client calls one server's API with one user's token.
type client struct {
	t     testing.TB
	hc    *http.Client
	base  string
	token string
	// header is sent with every request.
	header http.Header
}

// with returns a copy of c that sends header key with value too.
func (c *client) with(key, value string) *client {
	cp := *c
	cp.header = c.header.Clone()
	if cp.header == nil {
		cp.header = http.Header{}
	}
	cp.header.Set(key, value)
	return &cp
}

// as returns a client of srv for user in tenant with roles.
func (a *app) as(t testing.TB, srv *server, tenant uuid.UUID, user string, roles ...string) *client {
	t.Helper()
	return &client{t: t, hc: a.hc, base: srv.base, token: token(t, tenant, user, roles...)}
}

// token is a bearer token the apps accept.
func token(t testing.TB, tenant uuid.UUID, user string, roles ...string) string {
	t.Helper()
	tok, err := khttp.IssueToken([]byte(secret), user, tenant.String(), roles, time.Hour)
	require.NoError(t, err)
	return tok
}

// response is an API answer.
type response struct {
	t      testing.TB
	status int
	header http.Header
	body   []byte
}

// do sends a request with a JSON body (nil: none); a transport error fails
// the test.
func (c *client) do(method, path string, body any) *response {
	c.t.Helper()
	r, err := c.try(method, path, body)
	require.NoError(c.t, err, "%s %s", method, path)
	return r
}

// try is do, returning a transport error (for load, where the server may be
// stopping); it never fails the test, so it may run on any goroutine.
func (c *client) try(method, path string, body any) (*response, error) {
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, c.base+path, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range c.header {
		req.Header[k] = v
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	return &response{t: c.t, status: resp.StatusCode, header: resp.Header, body: b}, nil
}

// call posts {"type","payload"} to an /api route.
func (c *client) call(route, typ string, payload any) *response {
	c.t.Helper()
	return c.do(http.MethodPost, "/api/"+route, map[string]any{"type": typ, "payload": payload})
}

func (c *client) write(typ string, payload any) *response {
	c.t.Helper()
	return c.call("write", typ, payload)
}

func (c *client) command(typ string, payload any) *response {
	c.t.Helper()
	return c.call("command", typ, payload)
}

func (c *client) query(typ string, payload any) *response {
	c.t.Helper()
	return c.call("query", typ, payload)
}

// ok fails the test unless the answer is a 200 and decodes its data.
func ok[T any](r *response) T {
	r.t.Helper()
	require.Equal(r.t, http.StatusOK, r.status, "%s", r.body)
	var env struct{ Data T }
	require.NoError(r.t, json.Unmarshal(r.body, &env), "%s", r.body)
	return env.Data
}

// problem is an application/problem+json answer.
type problem struct {
	Status  int            `json:"status"`
	Code    string         `json:"code"`
	Reason  string         `json:"reason"`
	Details map[string]any `json:"details"`
}

// failed fails the test unless the answer is a problem with status.
func (r *response) failed(status int) problem {
	r.t.Helper()
	require.Equal(r.t, status, r.status, "%s", r.body)
	require.Equal(r.t, "application/problem+json", r.header.Get("Content-Type"))
	var p problem
	require.NoError(r.t, json.Unmarshal(r.body, &p))
	return p
}

// entity is the part of a CRUD answer every entity has.
type entity struct {
	ID      uuid.UUID `json:"id"`
	Version int       `json:"version"`
}

// ---- waiting ----

// waitFor polls cond until it holds or d passes; then it fails the test
// with what cond last said.
func waitFor(t testing.TB, d time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		done, state := cond()
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s; last: %s", what, d, state)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// countIs is a waitFor condition: the query's count equals want.
func countIs(t testing.TB, db *kumikotest.DB, want int, sql string, args ...any) func() (bool, string) {
	return func() (bool, string) {
		n := db.Count(t, sql, args...)
		return n == want, fmt.Sprintf("%d, want %d", n, want)
	}
}

// ---- server-sent events ----

// sseFrame is one event frame of GET /api/events.
type sseFrame struct {
	ID    int64
	Event string
	Data  struct {
		AggregateID uuid.UUID `json:"aggregateId"`
		Type        string    `json:"type"`
	}
}

// stream is an open GET /api/events.
type stream struct {
	t      testing.TB
	frames chan sseFrame
	cancel context.CancelFunc
	done   chan struct{}
}

// events opens GET /api/events (with Last-Event-ID when lastID > 0) and
// waits for the answer's headers; the test closes it at the end, or close.
func (c *client) events(lastID int64) *stream {
	c.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/api/events", nil)
	require.NoError(c.t, err)
	req.Header.Set("Authorization", "Bearer "+c.token)
	if lastID > 0 {
		req.Header.Set("Last-Event-ID", fmt.Sprint(lastID))
	}
	// No client timeout: a stream stays open; the context ends it.
	resp, err := (&http.Client{Transport: c.hc.Transport}).Do(req) //nolint:bodyclose // the reader goroutine closes it
	if err != nil {
		cancel()
		c.t.Fatalf("GET /api/events: %v", err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		c.t.Fatalf("GET /api/events: %d %s", resp.StatusCode, b)
	}
	s := &stream{t: c.t, frames: make(chan sseFrame, 1024), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		defer resp.Body.Close()
		defer close(s.frames)
		var f sseFrame
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if f.Event != "" {
					s.frames <- f
				}
				f = sseFrame{}
			case strings.HasPrefix(line, "id: "):
				f.ID, _ = strconv.ParseInt(strings.TrimPrefix(line, "id: "), 10, 64)
			case strings.HasPrefix(line, "event: "):
				f.Event = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				_ = json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &f.Data)
			}
		}
	}()
	c.t.Cleanup(s.close)
	return s
}

// next is the next frame, failing the test after d.
func (s *stream) next(d time.Duration) sseFrame {
	s.t.Helper()
	select {
	case f, ok := <-s.frames:
		require.True(s.t, ok, "the event stream ended")
		return f
	case <-time.After(d):
		s.t.Fatalf("no event frame within %s", d)
		return sseFrame{}
	}
}

// close disconnects and waits for the reader to end.
func (s *stream) close() {
	s.cancel()
	<-s.done
}

// newE2EApp deploys e2eapp's fault feature with the table its jobs write
// their runs to, on pools of e2eConns connections.
func newE2EApp(t testing.TB, env ...string) *app {
	t.Helper()
	a := newApp(t, "e2eapp", append([]string{"E2E_MAX_CONNS=" + strconv.Itoa(e2eConns)}, env...)...)
	a.db.Exec(t, `CREATE TABLE e2e_job_runs (job text NOT NULL, key text NOT NULL, pid int NOT NULL, attempt int NOT NULL,
		ran_at timestamptz NOT NULL DEFAULT clock_timestamp())`)
	return a
}

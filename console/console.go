// Package console serves the operators' web console: a few server-rendered
// pages under one prefix (by default /ops) that show the async event
// dispatcher's consumer shards, the projections, the event log and an
// aggregate's timeline, and act on them (restart, skip, disable, enable a
// shard; retry or skip a parked stream; rebuild a projection), with live
// updates over server-sent events.
// Its jobs page says whether any process works the app's jobs and warns of
// jobs waiting past their time, above River's UI.
//
// Everything the browser loads is embedded in the binary: Go templates, one
// hand-written script and one style sheet; nothing is built and nothing is
// fetched from another origin.
//
// Sign-in: the login form takes a bearer token of the API, which the console
// verifies with the API's own verifier (Config.Authenticate) and keeps in an
// HttpOnly, SameSite=Strict cookie (Secure when the request came over TLS).
// Only the console's routes read that cookie; the API keeps bearer tokens.
// Every state-changing request of the console (its POST actions, logout, and
// the writes of a handler mounted with Config.Jobs) must come from the
// console's own origin (Origin or Referer header) and carry the session's
// CSRF token (a random value set at login in a second HttpOnly cookie and
// rendered into each page) in the X-CSRF-Token header or a csrf form field.
//
// The console calls the pipeline and the consumer package; neither knows
// it. The http adapter mounts it (http.Server.MountConsole), the kumiko
// facade wires both.
package console

import (
	"context"
	"embed"
	"errors"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/kumiko-go/kumiko/consumer"
	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/integration"
	"github.com/kumiko-go/kumiko/jobs"
	"github.com/kumiko-go/kumiko/kumikotype"
	"github.com/kumiko-go/kumiko/pipeline"
)

// DefaultPrefix is the path the console is served under unless
// Config.Prefix says otherwise.
const DefaultPrefix = "/ops"

// DefaultInterval is how often the live pages are sent fresh state unless
// Config.Interval says otherwise.
const DefaultInterval = time.Second

//go:embed assets
var assets embed.FS

// Config configures a Console.
type Config struct {
	// Prefix is the path the console is served under; default "/ops".
	Prefix string
	// Store is the event store the app writes to. Required.
	Store *eventstore.Store
	// Executor is the app's executor, for projection statuses and rebuilds.
	// Required.
	Executor *pipeline.Executor
	// Authenticate verifies a bearer token of the API and returns its user
	// and when the token expires (http.Server.TokenUser). Required.
	Authenticate func(ctx context.Context, token string) (feature.User, time.Time, error)
	// OperatorRole is the role a user needs to use the console; default
	// "Operator".
	OperatorRole string
	// JobsUI, when set, is served under Prefix+"/jobs" to signed-in
	// operators (River's UI, jobs.UIPath): by bearer token, or by the
	// session cookie with its writes accepted only from the console's own
	// origin (the UI's script cannot send the CSRF token). The jobs page
	// (Prefix+"/jobs-status") frames it; no other site may.
	JobsUI http.Handler
	// JobsRunner, when set, gives the jobs page its status line (whether
	// any process works the jobs, and the jobs waiting more than
	// jobs.OverdueAfter past their time, from jobs.Runner.Health; also as
	// JSON under Prefix+"/jobs-status/data"), and adds the jobs not yet
	// done, per state, to the integration page's queue depths. It need not
	// be started: the page tells about every process of the app.
	JobsRunner *jobs.Runner
	// DeadLetters, when set, lists the integration messages the app's
	// handlers failed on every attempt on the integration page, to retry or
	// drop (integration.Service.Dead).
	DeadLetters integration.DeadLetters
	// Interval is how often the live pages get fresh state; default 1s.
	Interval time.Duration
	// Logger receives failed actions and background rebuilds; default
	// slog.Default().
	Logger *slog.Logger
}

// Console is the operators' web console, an http.Handler for the paths
// under its prefix. It is safe for concurrent use.
type Console struct {
	cfg    Config
	ops    *consumer.Ops
	pages  *template.Template
	static http.Handler
	mux    *http.ServeMux

	mu       sync.Mutex
	rebuilds map[string]*rebuildRun // by projection name: the runs this process started
	ctx      context.Context        // ends with Close: background rebuilds stop
	stop     context.CancelFunc
	wg       sync.WaitGroup
}

// New returns the console for cfg.
func New(cfg Config) (*Console, error) {
	if cfg.Store == nil || cfg.Executor == nil || cfg.Authenticate == nil {
		return nil, errors.New("console: a store, an executor and Authenticate are required")
	}
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultPrefix
	}
	cfg.Prefix = "/" + strings.Trim(cfg.Prefix, "/")
	if cfg.OperatorRole == "" {
		cfg.OperatorRole = "Operator"
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	pages, err := template.New("").Funcs(template.FuncMap{"prefix": func() string { return cfg.Prefix }}).
		ParseFS(assets, "assets/*.html")
	if err != nil {
		return nil, err
	}
	static, err := fs.Sub(assets, "assets/static")
	if err != nil {
		return nil, err
	}
	ctx, stop := context.WithCancel(context.Background())
	c := &Console{
		cfg: cfg, ops: consumer.NewOps(cfg.Store), pages: pages,
		static:   http.StripPrefix(cfg.Prefix+"/static/", http.FileServerFS(static)),
		rebuilds: map[string]*rebuildRun{}, ctx: ctx, stop: stop,
	}
	c.mux = c.routes()
	return c, nil
}

// Prefix is the path the console is served under.
func (c *Console) Prefix() string { return c.cfg.Prefix }

// Close stops the rebuilds this console started and waits for them.
func (c *Console) Close() {
	c.stop()
	c.wg.Wait()
}

// ServeHTTP serves the console's paths.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	if p := r.URL.Path; p == c.cfg.Prefix+"/jobs" || strings.HasPrefix(p, c.cfg.Prefix+"/jobs/") {
		// River's UI, framed by the console's jobs page and by no other
		// site; its scripts and styles are its own business.
		h.Set("X-Frame-Options", "SAMEORIGIN")
		h.Set("Content-Security-Policy", "frame-ancestors 'self'")
	} else {
		h.Set("X-Frame-Options", "DENY")
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'; base-uri 'none'")
	}
	c.mux.ServeHTTP(w, r)
}

func (c *Console) routes() *http.ServeMux {
	p := c.cfg.Prefix
	m := http.NewServeMux()
	m.Handle("GET "+p+"/static/", c.static)
	m.HandleFunc("GET "+p+"/login", c.loginPage)
	m.HandleFunc("POST "+p+"/login", c.login)
	m.Handle("POST "+p+"/logout", c.action(c.logout))
	m.Handle("GET "+p+"/{$}", c.page(func(w http.ResponseWriter, r *http.Request, _ session) {
		http.Redirect(w, r, p+"/consumers", http.StatusSeeOther)
	}))
	m.Handle("GET "+p, c.page(func(w http.ResponseWriter, r *http.Request, _ session) {
		http.Redirect(w, r, p+"/consumers", http.StatusSeeOther)
	}))
	m.Handle("GET "+p+"/consumers", c.page(c.render("consumers", "Consumers")))
	m.Handle("GET "+p+"/consumers/live", c.page(c.live(c.consumerState)))
	m.Handle("POST "+p+"/consumers/{op}", c.action(c.consumerAction))
	m.Handle("POST "+p+"/consumers/parked/{op}", c.action(c.parkedAction))
	m.Handle("GET "+p+"/projections", c.page(c.render("projections", "Projections")))
	m.Handle("GET "+p+"/projections/live", c.page(c.live(c.projectionState)))
	m.Handle("POST "+p+"/projections/rebuild", c.action(c.rebuild))
	m.Handle("GET "+p+"/events", c.page(c.render("events", "Events")))
	m.Handle("GET "+p+"/events/live", c.page(c.tail))
	m.Handle("GET "+p+"/aggregates/{type}/{id}", c.page(c.render("timeline", "Timeline")))
	m.Handle("GET "+p+"/aggregates/{type}/{id}/data", c.page(c.timeline))
	m.Handle("GET "+p+"/integration", c.page(c.render("integration", "Integration and jobs")))
	m.Handle("GET "+p+"/integration/live", c.page(c.live(c.integrationState)))
	m.Handle("POST "+p+"/integration/{op}", c.action(c.deadAction))
	if c.hasJobsPage() {
		m.Handle("GET "+p+jobsPage, c.page(c.jobsPage))
	}
	if c.cfg.JobsRunner != nil {
		m.Handle("GET "+p+jobsPage+"/live", c.page(c.live(c.jobsState)))
		m.Handle("GET "+p+jobsPage+"/data", c.page(c.jobsData))
	}
	if c.cfg.JobsUI != nil {
		jobs := c.page(func(w http.ResponseWriter, r *http.Request, _ session) { c.cfg.JobsUI.ServeHTTP(w, r) })
		guarded := c.guarded(c.cfg.JobsUI)
		for _, path := range []string{p + "/jobs", p + "/jobs/"} {
			m.Handle("GET "+path, jobs)
			m.Handle(path, guarded)
		}
	}
	m.HandleFunc(p+"/", func(w http.ResponseWriter, r *http.Request) {
		problem(w, kumikotype.CodeNotFound, "", "there is nothing at "+r.URL.Path)
	})
	return m
}

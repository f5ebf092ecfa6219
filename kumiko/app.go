package kumiko

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"runtime/debug"
	"strconv"
	"sync"

	"github.com/exaring/otelpgx"
	"github.com/jackc/pgx/v5/multitracer"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"

	"github.com/kumiko-go/kumiko/console"
	"github.com/kumiko-go/kumiko/consumer"
	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/feature"
	khttp "github.com/kumiko-go/kumiko/http"
	"github.com/kumiko-go/kumiko/idempotency"
	"github.com/kumiko-go/kumiko/integration"
	"github.com/kumiko-go/kumiko/internal/migrations"
	"github.com/kumiko-go/kumiko/internal/ops"
	"github.com/kumiko-go/kumiko/internal/pguuid"
	"github.com/kumiko-go/kumiko/jobs"
	"github.com/kumiko-go/kumiko/pipeline"
	"github.com/kumiko-go/kumiko/registry"
)

// Parts are the wired components of an App, for tools and tests. HTTP is
// nil in a worker, and Idempotency in a worker without RedisURL (a worker
// uses it only to remove the records of a forgotten data subject).
type Parts struct {
	Config      Config
	Pool        *pgxpool.Pool
	Store       *eventstore.Store
	Registry    *registry.Registry
	Executor    *pipeline.Executor
	Events      *consumer.Dispatcher
	Integration *integration.Service
	Idempotency idempotency.Store
	HTTP        *khttp.Server
	Metrics     *prometheus.Registry
}

// App is a wired server (New) or worker (BuildWorker). Start brings it up in
// order — the database reachable and migrated, read tables in place, event
// delivery, then the listeners; Stop takes it down in reverse, draining
// requests and closing open event streams first, within
// Config.ShutdownTimeout + StopMargin whatever the app's code does. A
// failed Start stops what it had started. Start and Stop must not run
// concurrently.
type App struct {
	parts    Parts
	withHTTP bool
	redis    *redis.Client // the idempotency store's client; nil without Config.RedisURL
	// transport carries integration events; nil = in process.
	transport integration.Transport
	// jobsUI is River's UI under jobs.UIPath; nil in a worker and without jobs.
	jobsUI *jobs.UI
	// console is the ops console; nil in a worker.
	console *console.Console
	addr    listenAddr
	metrics listenAddr

	// conns knows the pool's acquired connections, for Stop to close those
	// of abandoned work.
	conns *connTracker

	begun   bool   // Start was called
	stopped bool   // Stop (or a failed Start) stopped the started steps
	stops   []step // the started steps with a stop, in start order
}

// listenAddr is the address a listener bound, known once it started.
type listenAddr struct {
	mu   sync.Mutex
	addr string
}

func (l *listenAddr) set(a string) { l.mu.Lock(); l.addr = a; l.mu.Unlock() }
func (l *listenAddr) get() string  { l.mu.Lock(); defer l.mu.Unlock(); return l.addr }

// New validates cfg, compiles the features and wires a server: the HTTP API
// and the event dispatcher. An invalid Config or feature fails here, before
// anything touches the network or the database; Start does that.
func New(ctx context.Context, cfg Config, features ...*feature.Feature) (*App, error) {
	return build(ctx, cfg, true, features)
}

// BuildServer is New, under the name it had before New existed.
func BuildServer(ctx context.Context, cfg Config, features ...*feature.Feature) (*App, error) {
	return New(ctx, cfg, features...)
}

// BuildWorker is New without the HTTP API: a process that only delivers
// events to consumers (the worker side of an API/worker split).
func BuildWorker(ctx context.Context, cfg Config, features ...*feature.Feature) (*App, error) {
	return build(ctx, cfg, false, features)
}

func build(ctx context.Context, cfg Config, withHTTP bool, features []*feature.Feature) (*App, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("kumiko: %w", err)
	}
	reg, err := registry.Build(features...)
	if err != nil {
		return nil, err
	}
	if keys, _ := cfg.dataKeys(); keys == nil {
		if what := personalDeclared(reg); what != "" {
			return nil, fmt.Errorf("kumiko: %s declares personal fields, which are stored encrypted: set Config.DataKey (KUMIKO_DATA_KEY, base64 of 32 random bytes) or Config.DataKeys", what)
		}
	}
	cfg = cfg.resolveInstanceID()
	a := &App{withHTTP: withHTTP, conns: newConnTracker()}
	a.parts.Config, a.parts.Registry = cfg, reg
	a.parts.Metrics = prometheus.NewRegistry()
	a.parts.Metrics.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if a.parts.Pool, err = newPool(ctx, cfg, a.conns); err != nil {
		return nil, fmt.Errorf("kumiko: %w", err)
	}
	if err := a.wire(); err != nil {
		a.close()
		return nil, fmt.Errorf("kumiko: %w", err)
	}
	return a, nil
}

// newPool opens the pool lazily: it connects on first use. conns tracks
// the connections acquired from it.
func newPool(ctx context.Context, cfg Config, conns *connTracker) (*pgxpool.Pool, error) {
	pc, err := pgxpool.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("Config.DatabaseURL: %w", err)
	}
	pc.MaxConns = cfg.MaxConns
	pc.AfterConnect = pguuid.AfterConnect
	if cfg.IdleInTransactionTimeout > 0 {
		// A startup parameter: no round trip on any request.
		ms := max(cfg.IdleInTransactionTimeout.Milliseconds(), 1) // 0 would switch it off
		pc.ConnConfig.RuntimeParams["idle_in_transaction_session_timeout"] = strconv.FormatInt(ms, 10)
	}
	pc.ConnConfig.Tracer = conns
	if cfg.TraceDatabase && cfg.TracerProvider != nil {
		t := multitracer.New(otelpgx.NewTracer(otelpgx.WithTracerProvider(cfg.TracerProvider)))
		t.PoolAcquireTracers = append(t.PoolAcquireTracers, conns)
		t.PoolReleaseTracers = append(t.PoolReleaseTracers, conns)
		pc.ConnConfig.Tracer = t
	}
	return pgxpool.NewWithConfig(ctx, pc)
}

// wire builds the parts on the pool; none of them touches the network.
// Each part's config is mapped from Config by its own method (partconfig.go);
// wire adds what comes from the parts it built before.
func (a *App) wire() error {
	p, cfg := &a.parts, a.parts.Config
	var err error
	sc := cfg.storeConfig()
	sc.Upcaster = p.Registry
	if p.Store, err = eventstore.New(p.Pool, sc); err != nil {
		return err
	}
	pc := cfg.pipelineConfig()
	pc.Metrics = p.Metrics
	if p.Executor, err = pipeline.New(p.Registry, p.Store, pc); err != nil {
		return err
	}
	if err := a.wireIdempotency(); err != nil {
		return err
	}
	if defs := p.Executor.JobDefinitions(); len(defs) > 0 {
		jc := cfg.jobsConfig()
		jc.Metrics = p.Metrics
		r, err := jobs.New(p.Store, jc, defs...)
		if err != nil {
			return err
		}
		p.Executor.UseJobs(r)
	}
	consumers := p.Executor.Consumers()
	if cfg.RabbitMQURL != "" {
		if a.transport, err = integration.NewRabbit(cfg.rabbitConfig()); err != nil {
			return err
		}
	}
	ic := cfg.integrationConfig()
	ic.Transport, ic.Metrics = a.transport, p.Metrics
	if p.Integration, err = integration.New(p.Executor, p.Store, ic); err != nil {
		return err
	}
	if relay, ok := p.Integration.Relay(); ok {
		consumers = append(consumers, relay)
	}
	if a.withHTTP {
		if err := a.wireHTTP(); err != nil {
			return err
		}
		consumers = append(consumers, p.HTTP.EventsConsumer()) // feeds GET /api/events
	}
	cc := cfg.consumerConfig()
	cc.Metrics = p.Metrics
	p.Events, err = consumer.New(p.Store, cc, consumers...)
	return err
}

// wireIdempotency builds the idempotency store — Redis with RedisURL, else
// in this process for a server and none for a worker — and has every
// forget of a data subject remove the records of the requests that wrote
// its personal data.
func (a *App) wireIdempotency() error {
	p, cfg := &a.parts, a.parts.Config
	switch {
	case cfg.RedisURL != "":
		opts, err := redis.ParseURL(cfg.RedisURL)
		if err != nil {
			return fmt.Errorf("Config.RedisURL: %w", err)
		}
		// The store's Timeout then also ends the call it gave up on, and
		// frees its connection, instead of leaving it to read_timeout.
		opts.ContextTimeoutEnabled = true
		a.redis = redis.NewClient(opts)
		p.Idempotency = idempotency.NewRedisStore(a.redis, cfg.redisConfig())
	case a.withHTTP:
		cfg.Logger.Info("kumiko: no REDIS_URL; idempotency records live in this process only")
		p.Idempotency = idempotency.NewMemoryStore(idempotency.MemoryConfig{})
	default:
		return nil
	}
	if r, ok := p.Idempotency.(idempotency.Remover); ok {
		p.Executor.OnForget(ops.ForgetRecords(p.Store, r, cfg.Logger))
	}
	return nil
}

// wireHTTP builds the HTTP server on the idempotency store.
func (a *App) wireHTTP() error {
	p, cfg := &a.parts, a.parts.Config
	hc := cfg.httpConfig()
	hc.Idempotency, hc.Metrics, hc.Gatherer, hc.Ready = p.Idempotency, p.Metrics, p.Metrics, p.Pool.Ping
	var err error
	if p.HTTP, err = khttp.NewServer(hc, p.Executor, p.Store); err != nil {
		return err
	}
	return a.mountConsole()
}

// mountConsole serves the ops console under console.DefaultPrefix, with
// River's UI under jobs.UIPath inside it when the app has jobs: both to the
// operator role, by session cookie or bearer token.
func (a *App) mountConsole() error {
	p := &a.parts
	var jobsUI http.Handler
	r := p.Executor.Jobs()
	if r != nil {
		ui, err := r.UI(jobs.UIPath)
		if err != nil {
			return err
		}
		a.jobsUI, jobsUI = ui, ui
	}
	cc := p.Config.consoleConfig()
	cc.Store, cc.Executor, cc.Authenticate = p.Store, p.Executor, p.HTTP.TokenUser
	cc.JobsUI, cc.JobsRunner, cc.DeadLetters = jobsUI, r, p.Integration.Dead()
	var err error
	a.console, err = console.New(cc)
	if err != nil {
		return err
	}
	p.HTTP.MountConsole(a.console.Prefix(), a.console)
	return nil
}

// step is one part of the start order: start brings it up, stop takes it
// down; either may be nil. name names the part when its stop is abandoned.
// Stop stops the steps of one chain in reverse order, the chains at once,
// then the steps of baseChain.
type step struct {
	name        string
	chain       chain
	start, stop func(context.Context) error
}

// chain is a sequence of steps whose stops depend on each other.
type chain int

// The chains of the steps.
const (
	baseChain    chain = iota // the stores and the pool, stopped last
	eventsChain               // the integration service after the dispatcher, whose relay publishes through it
	jobsChain                 // the job runner
	metricsChain              // the metrics listener
	jobsUIChain               // River's UI
	httpChain                 // the API listener, then the console it serves, after the idempotency prune
)

// steps is the start order; Stop runs it backwards, then closes the Redis
// client and the pool.
//
// Every part whose start leaves something running — the transport's
// receiver and the inbox sweep, the dispatcher's loops, listener and
// liveness beat, the job runner, the listeners, River's UI, the
// idempotency prune — runs it on a context of its own,
// context.WithCancel(context.WithoutCancel(ctx)), until its own stop: the
// start context only bounds the start. The event store's wake-up sender
// detaches from the appending request the same way, the console's rebuilds
// run on the console's own context until it closes, and the key set is
// fetched per request on a detached context with a timeout of its own.
func (a *App) steps() []step {
	p := a.parts
	cfg := p.Config
	steps := []step{
		{name: "migrations and event store", start: a.migrate, stop: func(context.Context) error { p.Store.Close(); return nil }},
		{name: "read tables", start: p.Executor.EnsureSchema},
	}
	steps = append(steps, step{name: "integration service", chain: eventsChain, start: p.Integration.Start, stop: p.Integration.Stop},
		step{name: "event dispatcher", chain: eventsChain, start: p.Events.Start, stop: p.Events.Stop})
	if r := p.Executor.Jobs(); r != nil {
		steps = append(steps, step{name: "job runner", chain: jobsChain, start: r.Start, stop: r.Stop})
	}
	if cfg.MetricsAddr != "" {
		steps = append(steps, metricsListener(cfg, p.Metrics, &a.metrics))
	}
	if a.jobsUI != nil {
		steps = append(steps, step{name: "jobs UI", chain: jobsUIChain, start: a.jobsUI.Start, stop: a.jobsUI.Stop})
	}
	if a.withHTTP {
		steps = append(steps, step{name: "console", chain: httpChain, stop: func(context.Context) error { a.console.Close(); return nil }},
			apiListener(cfg, p.HTTP, &a.addr))
		if cfg.IdempotencyRetention >= 0 {
			steps = append(steps, pruneIdempotencyKeys(cfg, p.Executor))
		}
	}
	return steps
}

// migrate checks the database answers and applies the migrations of the
// event store and of the other tables' owners.
func (a *App) migrate(ctx context.Context) error {
	p := a.parts
	if err := p.Pool.Ping(ctx); err != nil {
		return fmt.Errorf("database unreachable: %w", err)
	}
	applied, err := migrations.All(ctx, p.Store)
	for _, m := range applied {
		p.Config.Logger.Info("kumiko: migrated the "+m.Owner+" tables", "schema", p.Config.Schema, "applied", m.Versions)
	}
	if err != nil {
		return err
	}
	return p.Store.CheckKeys(ctx)
}

// personalDeclared names an entity, event or integration event of reg
// that declares personal fields ("" when none does).
func personalDeclared(reg *registry.Registry) string {
	for _, e := range reg.Entities() {
		if len(e.Personal()) > 0 {
			return "entity " + e.Name()
		}
	}
	for _, et := range reg.Events() {
		if len(et.Personal) > 0 {
			return "event " + et.Name
		}
	}
	for _, c := range reg.Contracts() {
		if len(c.Personal) > 0 {
			return "integration event " + c.Name
		}
	}
	return ""
}

// Start connects, migrates, creates read tables, starts delivering events
// and starts serving. ctx bounds the start only: what Start starts runs
// until Stop, whatever becomes of ctx once Start returned (the serve
// command and fx cancel it). When a step fails, it stops the steps before
// it and returns the step's error.
func (a *App) Start(ctx context.Context) error {
	if a.begun {
		return errors.New("kumiko: the app was started before")
	}
	a.begun = true
	// The rule of every step: its start uses ctx to bound the start, and
	// what it leaves running lives on a context of its own until its stop
	// (see steps).
	for _, s := range a.steps() {
		if s.start != nil {
			if err := s.start(ctx); err != nil {
				return errors.Join(err, a.stopStarted(context.WithoutCancel(ctx)))
			}
		}
		if s.stop != nil {
			a.stops = append(a.stops, s)
		}
	}
	cfg := a.parts.Config
	attrs := []any{"name", cfg.Name, "instance_id", cfg.InstanceID, "schema", cfg.Schema}
	if a.withHTTP {
		attrs = append(attrs, "addr", a.Addr())
	}
	if cfg.MetricsAddr != "" {
		attrs = append(attrs, "metrics_addr", a.MetricsAddr())
	}
	if !a.withHTTP {
		attrs = append(attrs, "worker", true)
	}
	cfg.Logger.Info("kumiko: started", attrs...)
	return nil
}

// Stop takes the app down. At once the listeners, the job runner and
// event delivery stop taking work (open event streams end); then
// integration events stop; then the stores and the pool close. It is
// graceful until one deadline shared by every part — the earlier of ctx's
// deadline and now + Config.ShutdownTimeout: running work may finish. At
// the deadline the parts cancel the contexts of the work still running
// (requests, consumer passes, jobs, integration handlers); a part that does
// not return soon after is abandoned; then Stop closes the database
// connections abandoned work still holds, so its transactions roll back,
// and the pool. It returns within that deadline + StopMargin whatever the
// work does, and logs one line at the end: "kumiko: stopped", or "kumiko:
// stopped, abandoned …" naming what it gave up on when it returns an error
// wrapping ErrAbandoned. Abandoned work is delivered again after the next
// start.
//
// Stopping an app that never started releases its pool; stopping twice
// does nothing.
func (a *App) Stop(ctx context.Context) error {
	if !a.begun {
		a.begun, a.stopped = true, true
		a.close()
		return nil
	}
	return a.stopStarted(ctx)
}

// close releases what New opened.
func (a *App) close() {
	if a.redis != nil {
		_ = a.redis.Close()
	}
	a.parts.Pool.Close()
}

// Addr is the address the HTTP server listens on, once started.
func (a *App) Addr() string { return a.addr.get() }

// MetricsAddr is the address GET /metrics listens on when Config.MetricsAddr
// is set, once started; empty otherwise.
func (a *App) MetricsAddr() string { return a.metrics.get() }

// Parts returns the wired components.
func (a *App) Parts() Parts { return a.parts }

// hostname names the machine in the process's liveness record; "" when
// unknown.
func hostname() string {
	h, _ := os.Hostname()
	return h
}

// buildVersion is the main module's version in the process's liveness
// record: a tag, or a pseudo-version; "" when unknown.
func buildVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		return bi.Main.Version
	}
	return ""
}

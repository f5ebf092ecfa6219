package kumiko

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"
	"go.uber.org/fx"
	"go.uber.org/fx/fxevent"

	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/feature"
	khttp "github.com/kumiko-go/kumiko/http"
	"github.com/kumiko-go/kumiko/idempotency"
	"github.com/kumiko-go/kumiko/pipeline"
	"github.com/kumiko-go/kumiko/registry"
)

// Parts are the wired components of a server, for tools and tests. HTTP and
// Idempotency are nil in a worker.
type Parts struct {
	Config      Config
	Pool        *pgxpool.Pool
	Store       *eventstore.Store
	Registry    *registry.Registry
	Dispatcher  *pipeline.Dispatcher
	Events      *pipeline.EventDispatcher
	Idempotency idempotency.Store
	HTTP        *khttp.Server
	Metrics     *prometheus.Registry
}

// App is a built server. Start opens the database (migrating it and creating
// read tables) and starts listening; Stop drains requests and closes
// everything, in reverse order.
type App struct {
	app     *fx.App
	parts   Parts
	addr    *listenAddr
	metrics *metricsAddr
}

// listenAddr is the address the server bound, known once it started.
type listenAddr struct {
	mu   sync.Mutex
	addr string
}

func (l *listenAddr) set(a string) { l.mu.Lock(); l.addr = a; l.mu.Unlock() }
func (l *listenAddr) get() string  { l.mu.Lock(); defer l.mu.Unlock(); return l.addr }

// BuildServer validates cfg, compiles the features and wires the server: the
// HTTP API and the event dispatcher. It does not touch the network: that
// happens in Start.
func BuildServer(ctx context.Context, cfg Config, features ...*feature.Feature) (*App, error) {
	return build(ctx, cfg, true, features)
}

// BuildWorker is BuildServer without the HTTP API: a process that only
// delivers events to consumers (the worker side of an API/worker split).
func BuildWorker(ctx context.Context, cfg Config, features ...*feature.Feature) (*App, error) {
	return build(ctx, cfg, false, features)
}

func build(ctx context.Context, cfg Config, withHTTP bool, features []*feature.Feature) (*App, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("kumiko: %w", err)
	}
	cfg = cfg.resolveInstanceID()
	a := &App{}
	targets := []any{&a.parts.Config, &a.parts.Pool, &a.parts.Store, &a.parts.Registry, &a.parts.Dispatcher, &a.parts.Events, &a.parts.Metrics, &a.metrics}
	opts := []fx.Option{
		fx.WithLogger(func() fxevent.Logger {
			l := &fxevent.SlogLogger{Logger: cfg.Logger.With("component", "fx")}
			l.UseLogLevel(slog.LevelDebug) // wiring details; failures still log as errors
			return l
		}),
		core(ctx, cfg, features),
	}
	if withHTTP {
		opts = append(opts, api())
		targets = append(targets, &a.addr, &a.parts.Idempotency, &a.parts.HTTP)
	}
	a.app = fx.New(append(opts, fx.Populate(targets...))...)
	if err := a.app.Err(); err != nil {
		return nil, fmt.Errorf("kumiko: %w", err)
	}
	return a, nil
}

// Start connects, migrates, creates read tables and starts serving.
func (a *App) Start(ctx context.Context) error { return a.app.Start(ctx) }

// Stop shuts the HTTP server down gracefully, then closes the stores.
func (a *App) Stop(ctx context.Context) error { return a.app.Stop(ctx) }

// Addr is the address the HTTP server listens on, once started.
func (a *App) Addr() string { return a.addr.get() }

// Parts returns the wired components.
func (a *App) Parts() Parts { return a.parts }

// Module is the fx module of a kumiko server, for applications that build
// their own fx graph. It provides the Config, the pool, the event store, the
// registry, the dispatcher, the event dispatcher, the idempotency store, the
// Prometheus registry and the HTTP server, and hooks their start and stop
// into the lifecycle. cfg must already be validated (BuildServer does that).
func Module(ctx context.Context, cfg Config, features ...*feature.Feature) fx.Option {
	return fx.Options(core(ctx, cfg, features), api())
}

// core is everything but the HTTP API.
func core(ctx context.Context, cfg Config, features []*feature.Feature) fx.Option {
	return fx.Module("kumiko",
		fx.Supply(cfg, features, buildContext{ctx}),
		fx.Provide(
			newMetrics,
			newRegistry,
			newPool,
			newStore,
			newDispatcher,
			newEventDispatcher,
		),
		fx.Invoke(func(*pipeline.EventDispatcher) {}), // always deliver events
		metricsListener(),
	)
}

// api is the HTTP side: the idempotency store, the server and its listener.
func api() fx.Option {
	return fx.Module("kumiko.http",
		fx.Provide(
			func() *listenAddr { return &listenAddr{} },
			newIdempotency,
			newHTTP,
		),
		fx.Invoke(serve, pruneIdempotencyKeys),
	)
}

func newMetrics() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

func newRegistry(features []*feature.Feature) (*registry.Registry, error) {
	return registry.Build(features...)
}

// buildContext is the context BuildServer was called with.
type buildContext struct{ context.Context }

func newPool(lc fx.Lifecycle, ctx buildContext, cfg Config) (*pgxpool.Pool, error) {
	pc, err := pgxpool.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("Config.DatabaseURL: %w", err)
	}
	pc.MaxConns = cfg.MaxConns
	if cfg.IdleInTransactionTimeout > 0 {
		// A startup parameter: no round trip on any request.
		ms := max(cfg.IdleInTransactionTimeout.Milliseconds(), 1) // 0 would switch it off
		pc.ConnConfig.RuntimeParams["idle_in_transaction_session_timeout"] = strconv.FormatInt(ms, 10)
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc) // lazy: connects on first use
	if err != nil {
		return nil, err
	}
	lc.Append(fx.StopHook(pool.Close))
	return pool, nil
}

func newStore(lc fx.Lifecycle, cfg Config, pool *pgxpool.Pool, reg *registry.Registry) (*eventstore.Store, error) {
	store, err := eventstore.New(pool, eventstore.Config{Schema: cfg.Schema, Upcaster: reg, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	lc.Append(fx.Hook{
		OnStart: func(ctx context.Context) error {
			if err := pool.Ping(ctx); err != nil {
				return fmt.Errorf("database unreachable: %w", err)
			}
			applied, err := store.Migrate(ctx)
			if err != nil {
				return err
			}
			if len(applied) > 0 {
				cfg.Logger.Info("kumiko: migrated the event store", "schema", cfg.Schema, "applied", applied)
			}
			return nil
		},
		OnStop: func(context.Context) error { store.Close(); return nil },
	})
	return store, nil
}

func newDispatcher(lc fx.Lifecycle, cfg Config, reg *registry.Registry, store *eventstore.Store, metrics *prometheus.Registry) (*pipeline.Dispatcher, error) {
	d, err := pipeline.New(reg, store, pipeline.Config{
		Logger: cfg.Logger, Metrics: metrics, AsOfConcurrency: cfg.AsOfConcurrency, AsOfTimeout: cfg.AsOfTimeout,
	})
	if err != nil {
		return nil, err
	}
	lc.Append(fx.StartHook(d.EnsureSchema))
	return d, nil
}

// eventDispatcherIn are the event dispatcher's dependencies; the HTTP server
// is absent in a worker.
type eventDispatcherIn struct {
	fx.In
	Lifecycle  fx.Lifecycle
	Config     Config
	Store      *eventstore.Store
	Dispatcher *pipeline.Dispatcher
	Metrics    *prometheus.Registry
	HTTP       *khttp.Server `optional:"true"`
}

func newEventDispatcher(in eventDispatcherIn) (*pipeline.EventDispatcher, error) {
	consumers := in.Dispatcher.Consumers()
	if in.HTTP != nil {
		consumers = append(consumers, in.HTTP.EventsConsumer()) // feeds GET /api/events
	}
	e, err := pipeline.NewEventDispatcher(in.Store, pipeline.EventDispatcherConfig{
		InstanceID: in.Config.InstanceID, Logger: in.Config.Logger, Metrics: in.Metrics,
	}, consumers...)
	if err != nil {
		return nil, err
	}
	in.Lifecycle.Append(fx.Hook{OnStart: e.Start, OnStop: e.Stop})
	return e, nil
}

func newIdempotency(lc fx.Lifecycle, cfg Config) (idempotency.Store, error) {
	if cfg.RedisURL == "" {
		cfg.Logger.Info("kumiko: no REDIS_URL; idempotency records live in this process only")
		return idempotency.NewMemoryStore(idempotency.MemoryConfig{}), nil
	}
	opts, err := redis.ParseURL(cfg.RedisURL)
	if err != nil {
		return nil, fmt.Errorf("Config.RedisURL: %w", err)
	}
	client := redis.NewClient(opts)
	lc.Append(fx.StopHook(client.Close))
	return idempotency.NewRedisStore(client, idempotency.RedisConfig{}), nil
}

func newHTTP(cfg Config, d *pipeline.Dispatcher, store *eventstore.Store, pool *pgxpool.Pool, idem idempotency.Store, metrics *prometheus.Registry) (*khttp.Server, error) {
	return khttp.NewServer(khttp.Config{
		JWTSecret:           []byte(cfg.JWTSecret),
		Issuer:              cfg.JWTIssuer,
		Audience:            cfg.JWTAudience,
		OperatorRole:        cfg.OperatorRole,
		SeparateMetrics:     cfg.MetricsAddr != "",
		Idempotency:         idem,
		IdempotencyFailOpen: cfg.IdempotencyFailOpen,
		Logger:              cfg.Logger,
		Metrics:             metrics,
		Gatherer:            metrics,
		Ready:               pool.Ping,
	}, d, store)
}

// serve starts listening after everything else started and stops first.
func serve(lc fx.Lifecycle, cfg Config, srv *khttp.Server, addr *listenAddr) {
	hs := &http.Server{
		Handler:           srv.Handler(),
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		ReadTimeout:       cfg.ReadTimeout,
		WriteTimeout:      cfg.WriteTimeout,
		IdleTimeout:       cfg.IdleTimeout,
		MaxHeaderBytes:    cfg.MaxHeaderBytes,
	}
	hs.RegisterOnShutdown(srv.CloseStreams) // open event streams would hold Shutdown
	lc.Append(listenHook(cfg, "http", cfg.Addr, hs, addr))
}

// listenHook serves hs on address from start to stop (stopping gracefully
// within cfg.ShutdownTimeout) and records the bound address in bound; what
// names the server in errors and logs.
func listenHook(cfg Config, what, address string, hs *http.Server, bound *listenAddr) fx.Hook {
	return fx.Hook{
		OnStart: func(ctx context.Context) error {
			ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", address)
			if err != nil {
				return fmt.Errorf("listen %s (%s): %w", address, what, err)
			}
			bound.set(ln.Addr().String())
			go func() {
				if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
					cfg.Logger.Error("kumiko: "+what+" server stopped", "err", err)
				}
			}()
			cfg.Logger.Info("kumiko: serving "+what, "addr", ln.Addr().String(), "instance_id", cfg.InstanceID)
			return nil
		},
		OnStop: func(ctx context.Context) error {
			ctx, cancel := context.WithTimeout(ctx, cfg.ShutdownTimeout)
			defer cancel()
			return hs.Shutdown(ctx)
		},
	}
}

// pruneIdempotencyKeys deletes the recorded idempotency keys past
// IdempotencyRetention while the server runs: right after it starts, then
// every IdempotencyPruneInterval. Every server of an app does; the deletes
// are idempotent. A failure is logged and retried at the next tick.
func pruneIdempotencyKeys(lc fx.Lifecycle, cfg Config, d *pipeline.Dispatcher) {
	cfg = cfg.withLimitDefaults() // Module may get a Config without defaults
	if cfg.IdempotencyRetention < 0 {
		return
	}
	var (
		cancel context.CancelFunc
		done   = make(chan struct{})
	)
	lc.Append(fx.Hook{
		OnStart: func(ctx context.Context) error {
			ctx, cancel = context.WithCancel(context.WithoutCancel(ctx))
			go func() {
				defer close(done)
				tick := time.NewTicker(cfg.IdempotencyPruneInterval)
				defer tick.Stop()
				for {
					n, err := d.PruneIdempotencyKeys(ctx, time.Now().Add(-cfg.IdempotencyRetention))
					switch {
					case ctx.Err() != nil:
						return
					case err != nil:
						cfg.Logger.Warn("kumiko: prune idempotency keys", "err", err)
					case n > 0:
						cfg.Logger.Info("kumiko: pruned idempotency keys", "deleted", n, "retention", cfg.IdempotencyRetention)
					}
					select {
					case <-ctx.Done():
						return
					case <-tick.C:
					}
				}
			}()
			return nil
		},
		OnStop: func(ctx context.Context) error {
			cancel()
			select {
			case <-done:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		},
	})
}

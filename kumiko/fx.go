package kumiko

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/fx"

	"github.com/kumiko-go/kumiko/consumer"
	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/feature"
	khttp "github.com/kumiko-go/kumiko/http"
	"github.com/kumiko-go/kumiko/idempotency"
	"github.com/kumiko-go/kumiko/pipeline"
	"github.com/kumiko-go/kumiko/registry"
)

// Module is the fx module of a kumiko server, for applications that build
// their own fx graph. It builds the server with New and hooks App.Start and
// App.Stop into the lifecycle; it provides the *App and its Parts: the
// Config, the pool, the event store, the registry, the executor, the event
// dispatcher, the idempotency store, the Prometheus registry and the HTTP
// server. An invalid cfg or feature fails the graph.
//
// fx cancels the context of its start hooks once they ran; the app keeps
// none of it (see App.Start) and runs until the stop hook. The stop hook's
// context bounds App.Stop's graceful part; App.Stop may take StopMargin
// past it, so give fx a stop timeout (fx.StopTimeout, default 15s) of at
// least Config.ShutdownTimeout + StopMargin.
func Module(ctx context.Context, cfg Config, features ...*feature.Feature) fx.Option {
	return fx.Module("kumiko",
		fx.Provide(func() (moduleOut, error) { return provide(New(ctx, cfg, features...)) }),
		fx.Invoke(func(in moduleIn) { in.Lifecycle.Append(fx.Hook{OnStart: in.App.Start, OnStop: in.App.Stop}) }),
	)
}

// moduleOut is what Module provides.
type moduleOut struct {
	fx.Out
	App         *App
	Config      Config
	Pool        *pgxpool.Pool
	Store       *eventstore.Store
	Registry    *registry.Registry
	Executor    *pipeline.Executor
	Events      *consumer.Dispatcher
	Idempotency idempotency.Store
	HTTP        *khttp.Server
	Metrics     *prometheus.Registry
}

// moduleIn is what Module's lifecycle hook needs.
type moduleIn struct {
	fx.In
	Lifecycle fx.Lifecycle
	App       *App
}

func provide(a *App, err error) (moduleOut, error) {
	if err != nil {
		return moduleOut{}, err
	}
	p := a.Parts()
	return moduleOut{App: a, Config: p.Config, Pool: p.Pool, Store: p.Store, Registry: p.Registry, Executor: p.Executor,
		Events: p.Events, Idempotency: p.Idempotency, HTTP: p.HTTP, Metrics: p.Metrics}, nil
}

package kumiko

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/fx"
)

// metricsAddr is the address the metrics listener bound, known once it
// started; empty without Config.MetricsAddr.
type metricsAddr struct{ listenAddr }

// MetricsAddr is the address GET /metrics listens on when Config.MetricsAddr
// is set, once started; empty otherwise.
func (a *App) MetricsAddr() string { return a.metrics.get() }

// metricsListener serves the registry on Config.MetricsAddr, when set: a
// listener of its own, unauthenticated, so scrapers need no token and the
// API listener need not expose app-wide numbers. It starts after the event
// dispatcher (fx starts in invoke order) and stops before it.
func metricsListener() fx.Option {
	return fx.Options(
		fx.Provide(func() *metricsAddr { return &metricsAddr{} }),
		fx.Invoke(serveMetrics),
	)
}

func serveMetrics(lc fx.Lifecycle, cfg Config, reg *prometheus.Registry, addr *metricsAddr) {
	if cfg.MetricsAddr == "" {
		return
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, WriteTimeout: time.Minute}
	lc.Append(fx.Hook{
		OnStart: func(ctx context.Context) error {
			ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", cfg.MetricsAddr)
			if err != nil {
				return fmt.Errorf("listen %s (metrics): %w", cfg.MetricsAddr, err)
			}
			addr.set(ln.Addr().String())
			go func() {
				if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
					cfg.Logger.Error("kumiko: metrics server stopped", "err", err)
				}
			}()
			cfg.Logger.Info("kumiko: serving metrics", "addr", ln.Addr().String())
			return nil
		},
		OnStop: func(ctx context.Context) error {
			ctx, cancel := context.WithTimeout(ctx, cfg.ShutdownTimeout)
			defer cancel()
			return hs.Shutdown(ctx)
		},
	})
}

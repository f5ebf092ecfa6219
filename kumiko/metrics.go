package kumiko

import (
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
	lc.Append(listenHook(cfg, "metrics", cfg.MetricsAddr, hs, &addr.listenAddr))
}

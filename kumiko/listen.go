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

	khttp "github.com/kumiko-go/kumiko/http"
	"github.com/kumiko-go/kumiko/pipeline"
)

// apiListener serves the HTTP API on Config.Addr, last to start and first
// to stop.
func apiListener(cfg Config, srv *khttp.Server, bound *listenAddr) step {
	hs := &http.Server{
		Handler:           srv.Handler(),
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		ReadTimeout:       cfg.ReadTimeout,
		WriteTimeout:      cfg.WriteTimeout,
		IdleTimeout:       cfg.IdleTimeout,
		MaxHeaderBytes:    cfg.MaxHeaderBytes,
	}
	hs.RegisterOnShutdown(srv.CloseStreams) // open event streams would hold Shutdown
	st := listener(cfg, "http", cfg.Addr, hs, bound)
	stop := st.stop
	st.stop = func(ctx context.Context) error {
		err := stop(ctx)
		// The idempotency records of the last answers, before the store's
		// client closes.
		ctx, cancel := context.WithTimeout(ctx, cfg.ShutdownTimeout)
		defer cancel()
		return errors.Join(err, srv.WaitRecords(ctx))
	}
	return st
}

// metricsListener serves the registry on Config.MetricsAddr: a listener of
// its own, unauthenticated, so scrapers need no token and the API listener
// need not expose app-wide numbers. It starts after the event dispatcher
// and stops before it.
func metricsListener(cfg Config, reg *prometheus.Registry, bound *listenAddr) step {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, WriteTimeout: time.Minute}
	return listener(cfg, "metrics", cfg.MetricsAddr, hs, bound)
}

// listener serves hs on address from start to stop (stopping gracefully
// within cfg.ShutdownTimeout) and records the bound address in bound; what
// names the server in errors and logs.
func listener(cfg Config, what, address string, hs *http.Server, bound *listenAddr) step {
	return step{
		start: func(ctx context.Context) error {
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
			cfg.Logger.Debug("kumiko: serving "+what, "addr", ln.Addr().String(), "instance_id", cfg.InstanceID)
			return nil
		},
		stop: func(ctx context.Context) error {
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
func pruneIdempotencyKeys(cfg Config, d *pipeline.Executor) step {
	var (
		cancel context.CancelFunc
		done   = make(chan struct{})
	)
	return step{
		start: func(ctx context.Context) error {
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
		stop: func(ctx context.Context) error {
			cancel()
			select {
			case <-done:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		},
	}
}

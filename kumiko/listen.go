package kumiko

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	khttp "github.com/kumiko-go/kumiko/http"
	"github.com/kumiko-go/kumiko/internal/lifecycle"
	"github.com/kumiko-go/kumiko/pipeline"
)

// apiListener serves the HTTP API on Config.Addr, last to start; it stops
// before the console it serves.
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
	// A request head with both Content-Length and Transfer-Encoding is
	// refused on the connection, where net/http still shows both.
	st := listener(cfg, "http", cfg.Addr, hs, bound, khttp.StrictFraming)
	st.chain = httpChain
	stop := st.stop
	st.stop = func(ctx context.Context) error {
		err := stop(ctx)
		// The idempotency records of the last answers, before the store's
		// client closes, within the same deadline — or the grace after it,
		// when the requests took it all.
		if ctx.Err() != nil {
			var cancel context.CancelFunc
			ctx, cancel = context.WithDeadline(context.WithoutCancel(ctx), lifecycle.GiveUp(ctx))
			defer cancel()
		}
		return errors.Join(err, srv.WaitRecords(ctx))
	}
	return st
}

// metricsListener serves the registry on Config.MetricsAddr: a listener of
// its own, unauthenticated, so scrapers need no token and the API listener
// need not expose app-wide numbers. It starts after the event dispatcher
// and stops with the other parts.
func metricsListener(cfg Config, reg *prometheus.Registry, bound *listenAddr) step {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, WriteTimeout: time.Minute}
	st := listener(cfg, "metrics", cfg.MetricsAddr, hs, bound, nil)
	st.chain = metricsChain
	return st
}

// listener serves hs on address from start to stop and records the bound
// address in bound; what names the server in errors and logs. wrap, when
// set, wraps the listener hs serves.
//
// Its stop follows the stop contract (see internal/lifecycle): it shuts
// the server down gracefully until ctx ends — no new connections, open
// requests answered, event streams (requests that accept
// text/event-stream: the console's, and the API's, which the server ends
// itself) ended at once, their clients reconnecting elsewhere; then it
// cancels the contexts of the requests still running and closes their
// connections, waits until lifecycle.GiveUp(ctx) for their handlers, and
// returns an error naming them (method and path).
func listener(cfg Config, what, address string, hs *http.Server, bound *listenAddr, wrap func(net.Listener) net.Listener) step {
	var (
		requests lifecycle.Work
		stopping context.Context // ended when the stop gives up on the requests
		giveUp   context.CancelFunc
		draining context.Context // ended when the stop begins, and with it the streams
		drain    context.CancelFunc
	)
	inner := hs.Handler
	hs.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer requests.Begin(r.Method + " " + r.URL.Path)()
		if strings.Contains(r.Header.Get("Accept"), "text/event-stream") {
			ctx, cancel := context.WithCancel(r.Context())
			defer cancel()
			defer context.AfterFunc(draining, cancel)()
			r = r.WithContext(ctx)
		}
		inner.ServeHTTP(w, r)
	})
	return step{
		name: what + " listener",
		start: func(ctx context.Context) error {
			ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", address)
			if err != nil {
				return fmt.Errorf("listen %s (%s): %w", address, what, err)
			}
			bound.set(ln.Addr().String())
			if wrap != nil {
				ln = wrap(ln)
			}
			// Serving outlives the start call, until the stop (the request
			// contexts do not derive from ctx).
			stopping, giveUp = context.WithCancel(context.WithoutCancel(ctx))
			draining, drain = context.WithCancel(stopping)
			// Every request's context derives from stopping, so giving up
			// cancels them all — Server.Close alone does not cancel a
			// request whose body the handler has not read to the end.
			hs.BaseContext = func(net.Listener) context.Context { return stopping }
			go func() {
				if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
					cfg.Logger.Error("kumiko: "+what+" server stopped", "err", err)
				}
			}()
			cfg.Logger.Debug("kumiko: serving "+what, "addr", ln.Addr().String(), "instance_id", cfg.InstanceID)
			return nil
		},
		stop: func(ctx context.Context) error {
			defer giveUp()
			drain()
			err := hs.Shutdown(ctx)
			if err == nil {
				return nil
			}
			running := requests.Names()
			giveUp()
			_ = hs.Close()
			lifecycle.Await(ctx, requests.Idle(), nil)
			if len(running) == 0 {
				return fmt.Errorf("%s server: connections still open at the deadline: %w", what, err)
			}
			return fmt.Errorf("%s server: abandoned the requests %s: %w", what, strings.Join(running, ", "), err)
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
		name: "idempotency prune", chain: httpChain,
		start: func(ctx context.Context) error {
			// The prune outlives the start call, until the stop.
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
			if !lifecycle.Await(ctx, done, nil) {
				return fmt.Errorf("idempotency prune did not stop: %w", ctx.Err())
			}
			return nil
		},
	}
}

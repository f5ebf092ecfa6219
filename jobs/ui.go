package jobs

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sync"

	"riverqueue.com/riverui"
)

// UIPath is where a server mounts River's UI for operators.
const UIPath = "/ops/jobs"

// UI is River's web UI (riverqueue.com/riverui) on a Runner's jobs: its
// pages, built into the module, and the JSON API under <prefix>/api they
// call to list, retry, cancel and delete jobs and to pause queues. It does
// no authentication of its own: serve it behind the operators' check
// (http.Server.MountOperator).
type UI struct {
	h      *riverui.Handler
	mu     sync.Mutex
	cancel context.CancelFunc
}

// UI builds River's UI for r's jobs, served under prefix (e.g. UIPath):
// the handler expects request paths that start with prefix.
func (r *Runner) UI(prefix string) (*UI, error) {
	h, err := riverui.NewHandler(&riverui.HandlerOpts{
		Endpoints: riverui.NewEndpoints(r.client, nil),
		Logger:    slog.New(warnings{r.cfg.Logger.Handler()}),
		Prefix:    prefix,
	})
	if err != nil {
		return nil, fmt.Errorf("jobs: UI: %w", err)
	}
	return &UI{h: h}, nil
}

// ServeHTTP serves the UI's pages and API.
func (u *UI) ServeHTTP(w http.ResponseWriter, req *http.Request) { u.h.ServeHTTP(w, req) }

// Start starts the UI's background services until Stop; ctx only bounds
// the start.
func (u *UI) Start(ctx context.Context) error {
	run, cancel := context.WithCancel(context.WithoutCancel(ctx))
	if err := u.h.Start(run); err != nil {
		cancel()
		return fmt.Errorf("jobs: UI: %w", err)
	}
	u.mu.Lock()
	u.cancel = cancel
	u.mu.Unlock()
	return nil
}

// Stop stops the UI's background services.
func (u *UI) Stop(context.Context) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.cancel != nil {
		u.cancel()
		u.cancel = nil
	}
	return nil
}

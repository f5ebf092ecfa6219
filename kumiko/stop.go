package kumiko

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kumiko-go/kumiko/internal/lifecycle"
)

// ErrAbandoned is what App.Stop's error wraps when the stop gave up on work
// still running at its deadline — a request, a consumer's pass, a job, an
// integration handler — or on a part that did not stop. Such work was
// cancelled, its database connections closed, so its transaction rolled
// back; it is delivered (or retried) again after the next start. The error
// names what was abandoned. The serve and worker commands exit 1 on it.
var ErrAbandoned = errors.New("kumiko: work abandoned at the stop's deadline")

// Bounds of a stop past its graceful deadline; they add up to StopMargin at
// most.
const (
	// stepGrace is how long past the deadline (or past its own start, when
	// it starts later) a part's Stop may take before it is abandoned: the
	// parts give up on their work lifecycle.Grace after the deadline.
	stepGrace = lifecycle.Grace + 500*time.Millisecond
	// minStepWait is what a part's Stop still gets when it starts after
	// the other parts used up their share of the margin.
	minStepWait = 250 * time.Millisecond
	// closeReserve is kept at the end of StopMargin for closing the
	// database connections still held and the pool.
	closeReserve = 1500 * time.Millisecond
	// poolWait is how long the pool may take to close once the connections
	// of abandoned work are: holders that do not return never release
	// theirs, so the pool is left to close in the background after it.
	poolWait = time.Second
)

// stopStarted stops the started steps, each bounded, then closes the Redis
// client, the database connections still held and the pool (see Stop).
// The steps of each chain stop in reverse start order, the chains at once —
// every part stops taking work at the start of the stop, and has the whole
// graceful period to finish what it runs —, then the steps of no chain.
func (a *App) stopStarted(ctx context.Context) error {
	if a.stopped {
		return nil
	}
	a.stopped = true
	cfg := a.parts.Config
	start := time.Now()
	graceful := start.Add(cfg.ShutdownTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(graceful) {
		graceful = d
	}
	sctx, cancel := context.WithDeadline(ctx, graceful)
	defer cancel()
	st := &stopping{ctx: sctx, graceful: graceful, hard: graceful.Add(StopMargin - closeReserve)}

	chains := map[chain][]step{}
	for _, s := range a.stops {
		chains[s.chain] = append(chains[s.chain], s)
	}
	var wg sync.WaitGroup
	for c, steps := range chains {
		if c != baseChain {
			wg.Go(func() { st.run(steps) })
		}
	}
	wg.Wait() // bounded: every step is
	st.run(chains[baseChain])
	a.stops = nil
	if a.redis != nil {
		if err := a.redis.Close(); err != nil {
			st.errs = append(st.errs, fmt.Errorf("redis: %w", err))
		}
	}
	st.abandoned = append(st.abandoned, a.closePool(graceful.Add(StopMargin-100*time.Millisecond))...)
	st.collectLate()

	var out []error
	attrs := []any{"name", cfg.Name, "instance_id", cfg.InstanceID, "duration", time.Since(start)}
	if len(st.abandoned) > 0 {
		out = append(out, fmt.Errorf("%w: %s", ErrAbandoned, strings.Join(st.abandoned, "; ")))
	}
	out = append(out, st.errs...)
	err := errors.Join(out...)
	switch {
	case len(st.abandoned) > 0:
		if len(st.errs) > 0 {
			attrs = append(attrs, "err", errors.Join(st.errs...))
		}
		cfg.Logger.Error("kumiko: stopped, abandoned "+strings.Join(st.abandoned, "; "), attrs...)
	case err != nil:
		cfg.Logger.Error("kumiko: stopped", append(attrs, "err", err)...)
	default:
		cfg.Logger.Info("kumiko: stopped", attrs...)
	}
	return err
}

// stopping is one stop under way: its bounds, and what it gave up on.
type stopping struct {
	ctx context.Context // ends at graceful
	// graceful is the deadline the parts share; hard the end of the time
	// the steps may take, before the connections and the pool are closed.
	graceful, hard time.Time

	mu        sync.Mutex
	abandoned []string
	errs      []error
	late      []lateStep
}

// run stops steps in reverse order, each within its bound: stepGrace past
// the deadline (or past its own start, when later), and never past hard
// (or a brief moment, for a step that begins later still).
func (st *stopping) run(steps []step) {
	for i := len(steps) - 1; i >= 0; i-- {
		s := steps[i]
		limit := lifecycle.Later(st.graceful, time.Now()).Add(stepGrace)
		if limit.After(st.hard) {
			limit = lifecycle.Later(st.hard, time.Now().Add(minStepWait))
		}
		late, err := runBounded(st.ctx, s.stop, limit)
		st.mu.Lock()
		if late != nil {
			st.late = append(st.late, lateStep{index: len(st.abandoned), result: late})
			st.abandoned = append(st.abandoned, s.name+" did not stop in time")
		}
		for _, e := range flatten(err) {
			if errors.Is(e, context.DeadlineExceeded) || errors.Is(e, context.Canceled) {
				st.abandoned = append(st.abandoned, e.Error())
			} else {
				st.errs = append(st.errs, e)
			}
		}
		st.mu.Unlock()
	}
}

// collectLate adds what steps that did not stop in time said, if they
// returned meanwhile.
func (st *stopping) collectLate() {
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, l := range st.late {
		select {
		case err := <-l.result:
			if err != nil {
				st.abandoned[l.index] += " (" + err.Error() + ")"
			}
		default:
		}
	}
}

// lateStep is a step abandoned by a stop: its Stop's result arrives on
// result, if ever; index is its entry among the abandoned.
type lateStep struct {
	index  int
	result <-chan error
}

// runBounded runs stop(ctx) and waits for it until limit. When it does not
// return by then, late is where its error arrives later.
func runBounded(ctx context.Context, stop func(context.Context) error, limit time.Time) (late <-chan error, err error) {
	ch := make(chan error, 1)
	go func() { ch <- stop(ctx) }()
	timer := time.NewTimer(time.Until(limit))
	defer timer.Stop()
	select {
	case err := <-ch:
		return nil, err
	case <-timer.C:
		return ch, nil
	}
}

// closePool closes the database connections that work the stop abandoned
// still holds — their transactions roll back at once — and then the pool,
// waiting for it until limit at most: the pool waits for every connection
// to be released, which work that never returns never does. It returns
// what it abandoned.
func (a *App) closePool(limit time.Time) []string {
	closed := a.conns.closeHeld()
	done := make(chan struct{})
	go func() { a.parts.Pool.Close(); close(done) }()
	closed += a.conns.closeHeld() // acquired while the pool began to close
	var out []string
	if closed > 0 {
		out = append(out, fmt.Sprintf("%d database connection(s) held by abandoned work, closed (their transactions roll back)", closed))
	}
	wait := min(time.Until(lifecycle.Later(limit, time.Now().Add(minStepWait))), poolWait)
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		if closed == 0 {
			out = append(out, "the database pool did not close (a connection was not released)")
		}
	}
	return out
}

// flatten lists the errors err joins (err itself when it joins none).
func flatten(err error) []error {
	if err == nil {
		return nil
	}
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return []error{err}
	}
	var out []error
	for _, e := range j.Unwrap() {
		out = append(out, flatten(e)...)
	}
	return out
}

// connTracker knows the connections acquired from the app's pool and not
// released yet, so that a stop can close those its abandoned work holds. It
// is the pool's tracer (pgxpool calls it synchronously on every Acquire and
// Release, also when Release destroys the connection): one map insert and
// delete per acquisition. Its query hooks do nothing.
type connTracker struct {
	mu   sync.Mutex
	held map[*pgx.Conn]struct{}
}

func newConnTracker() *connTracker { return &connTracker{held: map[*pgx.Conn]struct{}{}} }

// TraceAcquireStart implements pgxpool.AcquireTracer.
func (t *connTracker) TraceAcquireStart(ctx context.Context, _ *pgxpool.Pool, _ pgxpool.TraceAcquireStartData) context.Context {
	return ctx
}

// TraceAcquireEnd implements pgxpool.AcquireTracer.
func (t *connTracker) TraceAcquireEnd(_ context.Context, _ *pgxpool.Pool, d pgxpool.TraceAcquireEndData) {
	if d.Err != nil || d.Conn == nil {
		return
	}
	t.mu.Lock()
	t.held[d.Conn] = struct{}{}
	t.mu.Unlock()
}

// TraceRelease implements pgxpool.ReleaseTracer.
func (t *connTracker) TraceRelease(_ *pgxpool.Pool, d pgxpool.TraceReleaseData) {
	t.mu.Lock()
	delete(t.held, d.Conn)
	t.mu.Unlock()
}

// TraceQueryStart implements pgx.QueryTracer, which a pool's tracer must.
func (t *connTracker) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}

// TraceQueryEnd implements pgx.QueryTracer.
func (t *connTracker) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// closeHeld closes the network connection under every connection still
// acquired — safe while another goroutine uses it: its next read or write
// fails, and the server rolls back its transaction — and returns how many
// it closed (not counting those closed before, such as connections a
// library took out of the pool and closed itself).
func (t *connTracker) closeHeld() int {
	t.mu.Lock()
	conns := make([]*pgx.Conn, 0, len(t.held))
	for c := range t.held {
		conns = append(conns, c)
	}
	t.mu.Unlock()
	n := 0
	for _, c := range conns {
		nc := c.PgConn().Conn()
		if tc, ok := nc.(*tls.Conn); ok {
			nc = tc.NetConn() // a TLS close would write, and wait for a writer
		}
		if nc.Close() == nil {
			n++
		}
	}
	return n
}

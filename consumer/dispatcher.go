package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/internal/lifecycle"
)

// Config configures an Dispatcher.
type Config struct {
	// InstanceID names this process; per-instance consumers keep a state
	// row under it. Required; "__shared__" is reserved.
	InstanceID string
	// PollInterval is the fallback wake-up when no notification arrives;
	// default 500ms.
	PollInterval time.Duration
	// Logger default slog.Default().
	Logger *slog.Logger
	// Metrics registers the consumer series; nil keeps them unregistered.
	Metrics prometheus.Registerer
	// Heartbeat is how often the process records its liveness in
	// kumiko_instances — one row write per process per beat, whatever the
	// number of consumers; default 10s (DefaultHeartbeat).
	Heartbeat time.Duration
	// StaleAfter is how old the process's last beat must be for it to be
	// stale (it is recorded with the beat, so every reader judges alike);
	// default 1m (DefaultStaleAfter), at least two beats.
	StaleAfter time.Duration
	// StuckAfter is how long a handler call may run before its shard
	// reports StatusStuck, for consumers that set no StuckAfter of their
	// own; default 30s (DefaultStuckAfter). A shard stays stuck in the
	// reports while its process beats and the call has not returned.
	StuckAfter time.Duration
	// CollectStale removes the per-instance shards of stale instances
	// automatically (Ops.CollectStale), at most once per StaleAfter.
	CollectStale bool
	// Host and Version describe the process in its liveness record.
	Host, Version string
	// TracerProvider makes a span per pass that delivers events ("consumer.pass
	// <name>"), linked to the spans that appended them (the traceparent in
	// their metadata headers); handlers run in its context. Default: no
	// spans.
	TracerProvider trace.TracerProvider
}

// TracerName is the instrumentation scope of the dispatcher's spans.
const TracerName = "github.com/kumiko-go/kumiko/consumer"

// Dispatcher delivers committed events to consumers, asynchronously and
// across any number of processes. Each consumer runs its own loop: a pass
// whenever it is woken (a database notification, an append in this process,
// or the poll interval), more passes while a batch was full, and backoff
// while the database fails.
type Dispatcher struct {
	store     *eventstore.Store
	pool      *pgxpool.Pool
	cfg       Config
	sql       queries
	consumers []Consumer
	metrics   *metrics
	tracer    trace.Tracer

	mu     sync.Mutex
	wakers []*waker
	// cancel ends the loops, the listener and the beat (a stop begins);
	// cancelPasses the contexts of running passes (it gives up on them).
	cancel, cancelPasses context.CancelFunc
	wg                   sync.WaitGroup
	started              bool
	passes               lifecycle.Work // the passes running, by consumer
	// running holds the handler calls running now, per consumer name and
	// shard; the beat records those running past their threshold (see
	// stuck.go).
	running map[string]*runningCall
	bal     balancer
	// reads shares what one pass of a consumer read with its other
	// partitions' passes in this process (see window.go), by consumer.
	reads map[string]*reads
	// routers wakes the partition loops of a consumer in this process
	// (see router.go), by consumer.
	routers map[string]*router
}

// New returns a dispatcher for consumers on store.
func New(store *eventstore.Store, cfg Config, consumers ...Consumer) (*Dispatcher, error) {
	if cfg.InstanceID == "" {
		return nil, errors.New("event dispatcher: InstanceID is required")
	}
	if strings.HasPrefix(cfg.InstanceID, "__") {
		return nil, fmt.Errorf("event dispatcher: instance id %q is reserved: ids beginning with \"__\" name the dispatcher's own shards", cfg.InstanceID)
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = 500 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = DefaultHeartbeat
	}
	if cfg.StaleAfter <= 0 {
		cfg.StaleAfter = DefaultStaleAfter
	}
	if cfg.StuckAfter <= 0 {
		cfg.StuckAfter = DefaultStuckAfter
	}
	if err := cfg.validateLiveness(); err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.Metrics, cfg.InstanceID)
	if err != nil {
		return nil, fmt.Errorf("event dispatcher: metrics: %w", err)
	}
	if cfg.TracerProvider == nil {
		cfg.TracerProvider = noop.NewTracerProvider()
	}
	e := &Dispatcher{store: store, pool: store.Pool(), cfg: cfg, metrics: m, tracer: cfg.TracerProvider.Tracer(TracerName),
		sql: newQueries(store.Schema()), running: map[string]*runningCall{}, reads: map[string]*reads{}, routers: map[string]*router{},
		bal: balancer{loops: map[string]map[string]*shardLoop{}, warn: map[string]bool{}, stored: map[string]int{}}}
	seen := map[string]bool{}
	for _, c := range consumers {
		c = c.withDefaults()
		if c.StuckAfter <= 0 {
			c.StuckAfter = cfg.StuckAfter
		}
		if err := c.validate(); err != nil {
			return nil, err
		}
		if seen[c.Name] {
			return nil, fmt.Errorf("event dispatcher: consumer %s twice", c.Name)
		}
		seen[c.Name] = true
		e.consumers = append(e.consumers, c)
		e.running[c.Name] = &runningCall{}
		e.reads[c.Name] = &reads{}
		e.routers[c.Name] = &router{w: &waker{ch: make(chan struct{}, 1)}, parts: map[int]*partLoop{}}
	}
	return e, nil
}

// Register creates the state row of every consumer shard of this process
// that does not exist yet, in one transaction. An existing cursor is never
// moved back. A new shard starts on the events that remain: it accepts
// every prune so far (it is not expired by them).
func (e *Dispatcher) Register(ctx context.Context) error {
	err := pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, e.sql.registerLock); err != nil {
			return err
		}
		h, err := e.store.HorizonTx(ctx, tx)
		if err != nil {
			return err
		}
		for _, c := range e.consumers {
			start := int64(0)
			if c.StartFrom == feature.FromNow {
				start = h.LastID
			}
			if c.Delivery == feature.PerInstance {
				_, err = tx.Exec(ctx, e.sql.register, c.Name, e.cfg.InstanceID, start)
			} else {
				_, err = tx.Exec(ctx, e.sql.registerShared, c.Name, start, c.Partitions)
			}
			if err != nil {
				return fmt.Errorf("consumer %s: %w", c.Name, err)
			}
		}
		if shared := e.sharedNames(); len(shared) > 0 {
			if _, err := tx.Exec(ctx, e.sql.memberJoin, shared, e.cfg.InstanceID); err != nil {
				return fmt.Errorf("consumer members: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		return eventstore.TranslateError(fmt.Errorf("register consumers: %w", err))
	}
	return nil
}

// RunPass runs one pass of the named consumer now, for tools and tests: of
// its shard for this process, or for a partitioned consumer one pass of
// each partition in turn, whoever it is assigned to (their results summed:
// Handled and the counts add up, More when any had more).
func (e *Dispatcher) RunPass(ctx context.Context, name string) (PassResult, error) {
	for _, c := range e.consumers {
		if c.Name != name {
			continue
		}
		if c.Delivery == feature.PerInstance {
			return e.pass(ctx, c, e.cfg.InstanceID, time.Now())
		}
		n, err := e.storedPartitions(ctx, name)
		if err != nil {
			return PassResult{}, err
		}
		if n == 0 {
			return e.pass(ctx, c, SharedInstance, time.Now())
		}
		var sum PassResult
		for k := range n {
			res, err := e.pass(ctx, c, PartitionInstance(k), time.Now())
			if err != nil {
				return sum, err
			}
			sum.add(res)
		}
		return sum, nil
	}
	return PassResult{}, fmt.Errorf("no consumer %q", name)
}

// Start records the process's liveness, registers the consumers and starts
// their loops, the listener and the heartbeat. ctx bounds only the start:
// what Start starts runs until Stop, whatever becomes of ctx.
func (e *Dispatcher) Start(ctx context.Context) error {
	started := time.Now()
	// The liveness record first: a gc running meanwhile then never takes
	// the shards registered next for those of an unknown instance.
	if err := e.beat(ctx, e.pool, started, true); err != nil {
		return eventstore.TranslateError(fmt.Errorf("event dispatcher: %w", err))
	}
	if err := e.Register(ctx); err != nil {
		return err
	}
	e.mu.Lock()
	if e.started {
		e.mu.Unlock()
		return errors.New("event dispatcher: already started")
	}
	e.started = true
	// The loops outlive the start call: they stop through Stop, and the
	// passes they run have a context of their own, which Stop cancels only
	// once it gives up on them (see lifecycle).
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	passCtx, cancelPasses := context.WithCancel(context.WithoutCancel(ctx))
	e.cancel, e.cancelPasses = cancel, cancelPasses
	e.mu.Unlock()
	local, unsubscribe := e.store.Subscribe()
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		defer unsubscribe()
		for {
			select {
			case <-runCtx.Done():
				return
			case <-local:
				e.wakeAll()
			}
		}
	}()
	e.wg.Add(1)
	go func() { defer e.wg.Done(); e.store.Listen(runCtx, e.wakeAll) }()
	e.wg.Add(1)
	go func() { defer e.wg.Done(); e.heartbeat(runCtx, started) }()
	for _, c := range e.consumers {
		if c.Delivery == feature.PerInstance {
			e.startLoop(runCtx, passCtx, c, e.cfg.InstanceID)
		}
	}
	// The shared consumers' shards this process is assigned, then a look at
	// the assignment every PollInterval. A start that cannot read them
	// ends what it started.
	if err := e.rebalance(ctx, runCtx, passCtx); err != nil {
		cancel()
		cancelPasses()
		e.wg.Wait()
		return fmt.Errorf("event dispatcher: %w", err)
	}
	if len(e.sharedNames()) > 0 {
		e.wg.Add(1)
		go func() { defer e.wg.Done(); e.balanceLoop(runCtx, passCtx) }()
	}
	return nil
}

// Stop ends the loops at once — no pass starts after it is called — and
// waits for the passes running until ctx ends: a pass that finishes
// commits its events and cursor as a whole. When ctx ends first, Stop
// cancels the passes' contexts, waits until lifecycle.GiveUp(ctx) for them,
// and returns an error wrapping ctx's that names the consumers whose
// passes it gave up on; their transactions roll back (a handler that
// ignores its context holds its connection until the app closes it) and
// their events are delivered again after the next start.
func (e *Dispatcher) Stop(ctx context.Context) error {
	e.mu.Lock()
	cancel, cancelPasses := e.cancel, e.cancelPasses
	e.mu.Unlock()
	if cancel == nil {
		return nil
	}
	cancel()
	done := lifecycle.Done(&e.wg)
	defer e.leave(ctx)
	if lifecycle.Settle(ctx, done) {
		cancelPasses()
		return nil
	}
	running := e.passes.Names()
	returned := lifecycle.Await(ctx, done, cancelPasses)
	switch {
	case len(running) > 0:
		return fmt.Errorf("event dispatcher: abandoned the running passes of consumers %s: %w", strings.Join(running, ", "), ctx.Err())
	case !returned:
		return fmt.Errorf("event dispatcher: the loops did not end: %w", ctx.Err())
	}
	return nil
}

// storedPartitions is the partition count stored for the shared consumer
// name, as this process last read it (rebalance reads it again every
// PollInterval).
func (e *Dispatcher) storedPartitions(ctx context.Context, name string) (int, error) {
	e.bal.mu.Lock()
	n, ok := e.bal.stored[name]
	e.bal.mu.Unlock()
	if ok {
		return n, nil
	}
	ms, err := memberships(ctx, e.pool, e.sql.members, []string{name})
	if err != nil {
		return 0, err
	}
	e.bal.mu.Lock()
	e.bal.stored[name] = ms[name].partitions
	e.bal.mu.Unlock()
	return ms[name].partitions, nil
}

// leave removes the process from the members of its shared consumers, so
// that the others take over its partitions at their next look rather than
// once it is stale. It is bounded by ctx and half a second; a failure only
// delays the takeover.
func (e *Dispatcher) leave(ctx context.Context) {
	if len(e.sharedNames()) == 0 {
		return
	}
	bound, cancel := context.WithTimeout(context.WithoutCancel(ctx), 500*time.Millisecond)
	defer cancel()
	if _, err := e.pool.Exec(bound, e.sql.memberLeave, e.cfg.InstanceID); err != nil {
		e.cfg.Logger.Warn("event dispatcher: leaving the consumers' members failed; others take over once this instance is stale", "err", err)
	}
}

// waker wakes one consumer's loop and remembers when it was first woken
// since its last pass began: when this process learnt of the commits that
// pass is to deliver.
type waker struct {
	ch chan struct{}
	at time.Time // guarded by Dispatcher.mu; zero: not woken
	// idle reports that the loop has done what it was woken for and waits
	// for its next wake-up (or poll). Only the tests read it: with at zero
	// and ch empty it tells them that nothing is left for the loop to do
	// until the next commit (see export_test.go).
	idle atomic.Bool
}

func (e *Dispatcher) wakeAll() {
	now := time.Now()
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, w := range e.wakers {
		w.ring(now)
	}
}

// ring wakes w as woken at at, unless it was woken before and has not
// looked since; the caller holds Dispatcher.mu.
func (w *waker) ring(at time.Time) {
	if w.at.IsZero() {
		w.at = at
	}
	select {
	case w.ch <- struct{}{}:
	default:
	}
}

// woken returns when w was first woken since the last call (zero: it was
// not) and clears it.
func (e *Dispatcher) woken(w *waker) time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	at := w.at
	w.at = time.Time{}
	return at
}

// loop runs passes of one consumer's shard instance, each on passCtx,
// until ctx ends. part is the loop's place in its router when the shard is
// a partition (nil otherwise): each pass tells it where the cursor is.
//
// Each pass is given the time its events were first known to be committed,
// for the delivery metric: the first wake-up since the previous pass began
// (a notification, or an append in this process), else the pass's own
// start (a poll, or the next batch of a backlog). While events stay
// undelivered — a full batch, a gap, a failure — the next pass keeps the
// earlier time.
func (e *Dispatcher) loop(ctx, passCtx context.Context, c Consumer, instance string, w *waker, part *partLoop) {
	var (
		ceiling time.Duration // of the backoff; 0 while passes succeed
		pending time.Time     // when events still undelivered were first known; zero: none
	)
	for ctx.Err() == nil {
		since := time.Now()
		if at := e.woken(w); !at.IsZero() {
			since = at
		}
		if !pending.IsZero() && pending.Before(since) {
			since = pending
		}
		started := time.Now()
		if c.standingBy() {
			since = started // nobody waits for a consumer on standby
		}
		if ctx.Err() != nil {
			return // a stop began while this loop waited or backed off
		}
		end := e.passes.Begin(c.Name)
		res, err := e.pass(passCtx, c, instance, since)
		end()
		pending = time.Time{}
		if part != nil {
			var known int64 // the router judges from it (0: unknown)
			if err == nil && res.Locked && !res.More {
				known = res.Cursor
			}
			part.passed(known)
		}
		if err != nil || res.More || res.waiting || res.Failed != nil || !res.Locked {
			// Still undelivered as far as this process knows — also when
			// the pass did not get to look (another transaction held the
			// shard's row).
			pending = since
		}
		wait := e.cfg.PollInterval
		if part != nil {
			// Partitions started together would poll together: a burst
			// of passes that delays a commit's own partition. Each polls
			// at a random point of the second half of the interval.
			wait = wait/2 + rand.N(wait/2+1)
		}
		switch {
		case err != nil && ctx.Err() == nil:
			ceiling, wait = backoff(ceiling)
			e.cfg.Logger.Warn("event dispatcher: pass failed; retrying", "consumer", c.Name, "instance_id", instance, "in", wait, "err", err)
		case err == nil && res.More:
			ceiling = 0
			continue
		case err == nil && res.Failed != nil && !c.SkipApplyErrors:
			ceiling, wait = backoff(ceiling) // the same event again, after a pause
		default:
			ceiling = 0
		}
		if err == nil && res.Locked {
			if res.Head > 0 {
				e.metrics.cursor(c.Name, instance, res.Cursor, res.Head)
			}
			e.metrics.gapWait(c.Name, instance, res.GapWait)
			e.metrics.expired(c.Name, instance, res.Expired)
			e.metrics.parkedNow(c.Name, instance, res.Parked)
		}
		woken := w.ch
		if ceiling > 0 {
			woken = nil // backing off: new events must not hurry the retry
		}
		w.idle.Store(woken != nil)
		await(ctx, c, woken, wait, started)
		w.idle.Store(false)
	}
}

// await returns when c's next pass is due: after wait, when ctx ends, or
// when woken — unless c stands by — no sooner than MinPassInterval after
// the pass that started at started.
func await(ctx context.Context, c Consumer, woken <-chan struct{}, wait time.Duration, started time.Time) {
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
			return
		case <-woken:
			if c.standingBy() {
				continue // the poll's pass follows the log
			}
			if rest := c.MinPassInterval - time.Since(started); rest > 0 {
				pause := time.NewTimer(rest) // commits meanwhile share the next pass
				defer pause.Stop()
				select {
				case <-ctx.Done():
				case <-pause.C:
				}
			}
			return
		}
	}
}

// Bounds of the retry backoff.
const (
	minBackoff = 100 * time.Millisecond
	maxBackoff = 5 * time.Second
)

// backoff returns the next ceiling of the retry backoff after a failure —
// doubling from minBackoff up to maxBackoff — and the pause to take, drawn
// at random from the upper half of that ceiling (equal jitter): processes
// that failed together, as they do when the database went away, do not
// come back in lockstep.
func backoff(ceiling time.Duration) (next, wait time.Duration) {
	next = min(max(2*ceiling, minBackoff), maxBackoff)
	return next, next/2 + rand.N(next/2+1)
}

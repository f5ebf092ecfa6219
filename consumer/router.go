package consumer

import (
	"context"
	"sync"
	"time"
)

// A commit wakes a process's loops. A partitioned consumer's partition
// loops are not woken by it directly: most of them have none of the new
// events, and sixteen loops racing for a read and a connection delay the
// one that has. Instead the consumer's router is woken: it reads the log
// after the partitions' cursors once (see prefetch) and wakes only the
// partitions with events of their own in what it read — or every partition
// it cannot judge. A partition passed over moves its cursor at its next
// poll, at most PollInterval later, as every loop does.

// router is the partition loops of one consumer in this process.
type router struct {
	w *waker // woken by commits, in Dispatcher.wakers once started

	mu      sync.Mutex
	started bool
	parts   map[int]*partLoop
}

// partLoop is what the router knows of one partition's loop.
type partLoop struct {
	k int
	w *waker

	mu    sync.Mutex
	known int64     // the cursor its last pass left (0: unknown)
	last  time.Time // when that pass looked at the shard
}

// passed records what the loop's last pass left: its cursor when the pass
// found the shard caught up, else 0 (unknown).
func (l *partLoop) passed(known int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.known, l.last = known, time.Now()
}

// fresh answers the loop's cursor when a pass left it less than within ago.
func (l *partLoop) fresh(within time.Duration) (int64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.known, l.known > 0 && time.Since(l.last) < within
}

// join adds the loop of partition k, waking on w, to c's router, starting
// the router when it is the first (until runCtx ends).
func (e *Dispatcher) join(runCtx, passCtx context.Context, c Consumer, k int, w *waker) *partLoop {
	r := e.routers[c.Name]
	l := &partLoop{k: k, w: w}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.parts[k] = l
	if !r.started {
		r.started = true
		e.mu.Lock()
		e.wakers = append(e.wakers, r.w)
		e.mu.Unlock()
		e.wg.Add(1)
		go func() { defer e.wg.Done(); e.route(runCtx, passCtx, c, r) }()
	}
	return l
}

// part removes the loop l from c's router.
func (e *Dispatcher) part(c Consumer, l *partLoop) {
	r := e.routers[c.Name]
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.parts[l.k] == l {
		delete(r.parts, l.k)
	}
}

// route wakes c's partition loops for the commits r is woken for, until
// ctx ends.
func (e *Dispatcher) route(ctx, passCtx context.Context, c Consumer, r *router) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.w.ch:
		}
		r.w.idle.Store(false)
		at := e.woken(r.w)
		if at.IsZero() {
			at = time.Now()
		}
		e.routeOnce(passCtx, c, r, at)
		r.w.idle.Store(true) // not before its first wake-up: the listener owes it one
	}
}

// routeOnce wakes those of r's loops that the commits announced at at may
// concern: the partitions with events of their own after their cursors in
// the window read after them, and every partition it cannot judge (its
// cursor unknown or older than a PollInterval, the window not up to the
// head, the read failed, the consumer standing by).
func (e *Dispatcher) routeOnce(ctx context.Context, c Consumer, r *router, at time.Time) {
	r.mu.Lock()
	loops := make([]*partLoop, 0, len(r.parts))
	for _, l := range r.parts {
		loops = append(loops, l)
	}
	r.mu.Unlock()
	var from int64
	for _, l := range loops {
		if known, ok := l.fresh(e.cfg.PollInterval); ok && (from == 0 || known < from) {
			from = known
		}
	}
	n, err := e.storedPartitions(ctx, c.Name)
	if from == 0 || err != nil || n == 0 || c.standingBy() {
		e.wake(loops, at, nil)
		return
	}
	e.prefetch(ctx, c, from, n, at, func(w window, ok bool) {
		if !ok || !w.head {
			e.wake(loops, at, nil)
			return
		}
		e.wake(loops, at, func(l *partLoop) bool {
			known, fresh := l.fresh(e.cfg.PollInterval)
			return fresh && w.from <= known && !w.holds(c, known, l.k, n)
		})
	})
}

// wake wakes the loops that skip does not pass over (nil: all), as woken
// at at.
func (e *Dispatcher) wake(loops []*partLoop, at time.Time, skip func(*partLoop) bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, l := range loops {
		if skip == nil || !skip(l) {
			l.w.ring(at)
		}
	}
}

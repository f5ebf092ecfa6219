// Package lifecycle holds the start and stop contract the long-running parts
// of an app share.
//
// Start: a part's Start(ctx) uses ctx only to bound the start. What it
// starts runs on context.WithCancel(context.WithoutCancel(ctx)) until the
// part's own Stop, whatever the caller does with ctx after Start returns
// (the command line and fx both cancel it).
//
// Stop: a part's Stop(ctx) stops taking new work at once and waits for the
// work running until ctx ends. If ctx ends first, it cancels the contexts
// of that work, waits until GiveUp(ctx) for it to return, and returns an
// error wrapping ctx.Err() that names the work it gave up on. Work that
// ignores its context keeps running (and holding its database connection)
// after that; the app closes such connections, so its transaction rolls
// back.
package lifecycle

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// Grace is how long after its stop context's deadline a part waits for the
// work it cancelled to return.
const Grace = time.Second

// minGrace is the least a part waits for work it cancels, so that work that
// honours its context is seen to return even when the part stops late.
const minGrace = 100 * time.Millisecond

// GiveUp is when a part stopping under ctx, which has ended, gives up on the
// work it cancelled: Grace after ctx's deadline, so that parts stopped one
// after the other share the one grace period, and Grace from now when ctx
// has no deadline; never sooner than a brief moment from now.
func GiveUp(ctx context.Context) time.Time {
	now := time.Now()
	end := now.Add(Grace)
	if d, ok := ctx.Deadline(); ok && d.Before(now) {
		end = d.Add(Grace)
	}
	return Later(end, now.Add(minGrace))
}

// Later is the later of a and b.
func Later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// Work is what a part has running, by name, so that its Stop can wait for
// it and name what it gives up on. The zero value is empty and ready.
type Work struct {
	mu      sync.Mutex
	running map[*item]struct{}
	idle    chan struct{} // closed while nothing runs; nil: not made yet
}

type item struct{ name string }

// Begin records that work named name runs until the returned end is
// called (once).
func (w *Work) Begin(name string) (end func()) {
	it := &item{name: name}
	w.mu.Lock()
	if w.running == nil {
		w.running = map[*item]struct{}{}
	}
	if len(w.running) == 0 {
		w.idle = make(chan struct{})
	}
	w.running[it] = struct{}{}
	w.mu.Unlock()
	return func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if _, ok := w.running[it]; !ok {
			return
		}
		delete(w.running, it)
		if len(w.running) == 0 {
			close(w.idle)
		}
	}
}

// Names are the names of the work running, sorted, a name begun several
// times once with its count ("POST /api/write (×3)").
func (w *Work) Names() []string {
	w.mu.Lock()
	counts := map[string]int{}
	for it := range w.running {
		counts[it.name]++
	}
	w.mu.Unlock()
	out := make([]string, 0, len(counts))
	for name, n := range counts {
		if n > 1 {
			name = fmt.Sprintf("%s (×%d)", name, n)
		}
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// Idle is closed once nothing runs (at once when nothing does).
func (w *Work) Idle() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.running) == 0 {
		return closed
	}
	return w.idle
}

var closed = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// Drain is the stop contract for w: it waits for the work running until ctx
// ends; then it calls cancel (when not nil), waits until GiveUp(ctx), and
// returns an error naming the work that was running when ctx ended —
// "<what> <names>: <ctx's error>" — or nil when everything finished in
// time.
func (w *Work) Drain(ctx context.Context, what string, cancel func()) error {
	idle := w.Idle()
	if Settle(ctx, idle) {
		return nil
	}
	names := w.Names()
	Await(ctx, idle, cancel)
	if len(names) == 0 { // it ended between the two looks
		return nil
	}
	return fmt.Errorf("%s %s: %w", what, strings.Join(names, ", "), ctx.Err())
}

// Settle waits until done is closed or ctx ends, and then, when done is
// not closed, a brief moment more: a part stopped after its deadline (the
// parts before it took the time) does not cancel work that was about to
// finish — a poll that found nothing to do — and name it as abandoned. It
// reports whether done was closed.
func Settle(ctx context.Context, done <-chan struct{}) bool {
	select {
	case <-done:
		return true
	case <-ctx.Done():
	}
	return within(done, minGrace)
}

// Await waits until done is closed or ctx ends; then it calls cancel (when
// not nil) and waits for done until GiveUp(ctx). It reports whether done
// was closed.
func Await(ctx context.Context, done <-chan struct{}, cancel func()) bool {
	select {
	case <-done:
		return true
	case <-ctx.Done():
	}
	if cancel != nil {
		cancel()
	}
	return within(done, time.Until(GiveUp(ctx)))
}

// within waits at most d for done and reports whether it was closed.
func within(done <-chan struct{}, d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-done:
		return true
	case <-timer.C:
		return false
	}
}

// Done is closed once wg is done; a goroutine waits on wg until then.
func Done(wg *sync.WaitGroup) <-chan struct{} {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	return done
}

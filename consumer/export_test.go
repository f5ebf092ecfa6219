package consumer

// Settled reports whether the n partition loops of the consumer name that
// e runs have settled: each has joined the consumer's router and recorded
// the cursor its last pass left (so the router can judge it), the router
// has routed a wake-up, and the router and every loop wait with no
// wake-up pending or taken and not yet served. From then on, until a
// poll is due, a loop passes only when the router wakes it for a commit.
//
// A dispatcher that starts is not settled at once: the listener wakes the
// router when it begins to listen (for the commits it may have missed), and
// the router wakes every loop whose cursor it does not know yet — or all of
// them, when the wake-up announced nothing it can judge. Such a loop's
// pass, run late, moves its cursor over the next commit's events as if
// that commit had woken it.
func Settled(e *Dispatcher, name string, n int) bool {
	r := e.routers[name]
	r.mu.Lock()
	loops := make([]*partLoop, 0, len(r.parts))
	for _, l := range r.parts {
		loops = append(loops, l)
	}
	r.mu.Unlock()
	if len(loops) != n {
		return false
	}
	// Under Dispatcher.mu no wake-up is rung; a loop that took one has not
	// served it while its time is set (woken clears it, after idle).
	e.mu.Lock()
	defer e.mu.Unlock()
	waits := func(w *waker) bool { return w.idle.Load() && w.at.IsZero() && len(w.ch) == 0 }
	if !waits(r.w) {
		return false
	}
	for _, l := range loops {
		if _, ok := l.fresh(e.cfg.PollInterval); !ok || !waits(l.w) {
			return false
		}
	}
	return true
}

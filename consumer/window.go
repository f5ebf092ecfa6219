package consumer

import (
	"sync"
	"time"

	"github.com/kumiko-go/kumiko/eventstore"
)

// A partitioned consumer's partitions read the same log: the events after
// their cursors, all types, judged against the same horizon. Their cursors
// move together — every pass moves its cursor to where the log is settled,
// whatever its own events — so in one process they mostly ask for the same
// stretch at once. reads lets one pass read a stretch and the others take
// it: the log is read once per process, not once per partition.
//
// What is shared is only what a pass found complete: a window (from, to]
// holds every event that will ever be committed with an id in it. That is a
// fact about the log, not about the pass that read it — ids up to a settled
// point never change — so any pass of the consumer whose cursor lies in the
// window may deliver from it, in its own transaction, under its own row
// lock. A pass whose cursor lies in no window reads for itself, and others
// wanting the same stretch wait for its read.

// maxWindows is how many windows a consumer keeps; a partition further
// behind than they reach reads for itself.
const maxWindows = 4

// window is a stretch of the log found complete: every event with
// from < id ≤ to, in id order.
type window struct {
	from, to int64
	evs      []eventstore.Event
	// at is when the read began: every commit announced before it is in
	// the read's snapshot. head reports that the read found nothing beyond
	// the window that had committed by then.
	at   time.Time
	head bool
	// n is the partition count parts was worked out for; parts[i] is the
	// partition of evs[i] among n, worked out once for every partition's
	// pass. parts is nil when n is 0 (unknown).
	n     int
	parts []int
}

// partitioned returns w with the partition of each event among n, by
// c's key.
func (w window) partitioned(c Consumer, n int) window {
	w.n, w.parts = n, make([]int, len(w.evs))
	for i, ev := range w.evs {
		w.parts[i] = PartitionOf(c.key(ev), n)
	}
	return w
}

// holds reports whether w has an event of partition k of n (that c wants)
// after cursor; true when w does not know the partitions among n.
func (w window) holds(c Consumer, cursor int64, k, n int) bool {
	if w.n != n {
		return true
	}
	for i, ev := range w.evs {
		if ev.ID > cursor && w.parts[i] == k && c.wants(ev.Type) {
			return true
		}
	}
	return false
}

// reads is one consumer's shared windows and the reads in flight.
type reads struct {
	mu       sync.Mutex
	windows  []window         // newest last
	inflight map[int64]*fetch // by the cursor read after
}

// fetch is a read in flight, begun at at; done closes when it is over, ok
// tells whether it found a window.
type fetch struct {
	at   time.Time
	done chan struct{}
	w    window
	ok   bool
}

// take returns the events of partition k of n after cursor up to upTo (0:
// no bound), at most limit, from a window that holds cursor, and how far
// the answer is complete: the other partitions' events are not copied, the
// cursor moves over them all the same. When w does not know the partitions
// among n, it returns every event.
func (w window) take(cursor, upTo int64, limit, k, n int) (evs []eventstore.Event, to int64) {
	to = w.to
	if upTo > 0 {
		to = min(to, upTo)
	}
	for i, ev := range w.evs {
		if ev.ID <= cursor || w.n == n && w.parts[i] != k {
			continue
		}
		if ev.ID > to {
			break
		}
		if len(evs) == limit {
			return evs, evs[len(evs)-1].ID
		}
		evs = append(evs, ev)
	}
	return evs, to
}

// find returns a window read since notBefore that holds cursor
// (from ≤ cursor < to).
func (r *reads) find(cursor int64, notBefore time.Time) (window, bool) {
	for i := len(r.windows) - 1; i >= 0; i-- {
		if w := r.windows[i]; w.from <= cursor && cursor < w.to && !w.at.Before(notBefore) {
			return w, true
		}
	}
	return window{}, false
}

// peek answers a window kept, read since notBefore, that holds cursor.
func (r *reads) peek(cursor int64, notBefore time.Time) (window, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.find(cursor, notBefore)
}

// get answers a window holding cursor: one kept, or the one a read in
// flight after cursor finds (it waits for that read). Otherwise it returns
// ok false and a function the caller must call with what it read itself
// (found false when it found nothing to share).
//
// Only windows and reads begun since notBefore count (zero: any).
func (r *reads) get(cursor int64, notBefore time.Time) (w window, ok bool, publish func(w window, found bool)) {
	r.mu.Lock()
	if w, ok := r.find(cursor, notBefore); ok {
		r.mu.Unlock()
		return w, true, nil
	}
	if f := r.inflight[cursor]; f != nil && !f.at.Before(notBefore) {
		r.mu.Unlock()
		<-f.done
		if f.ok {
			return f.w, true, nil
		}
		return window{}, false, func(window, bool) {}
	}
	f := &fetch{at: time.Now(), done: make(chan struct{})}
	if r.inflight == nil {
		r.inflight = map[int64]*fetch{}
	}
	r.inflight[cursor] = f
	r.mu.Unlock()
	return window{}, false, func(w window, found bool) {
		w.at = f.at
		r.mu.Lock()
		if r.inflight[cursor] == f {
			delete(r.inflight, cursor)
		}
		if found && w.to > w.from {
			f.w, f.ok = w, true
			r.windows = append(r.windows, w)
			if len(r.windows) > maxWindows {
				r.windows = r.windows[len(r.windows)-maxWindows:]
			}
		}
		r.mu.Unlock()
		close(f.done)
	}
}

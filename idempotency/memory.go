package idempotency

import (
	"context"
	"slices"
	"sync"
	"time"
)

// MemoryConfig configures a MemoryStore. The zero value is usable.
type MemoryConfig struct {
	// TTL is how long a completed response is replayed. Default DefaultTTL.
	TTL time.Duration
	// LockTTL is how long a claim lives without Complete or Release.
	// Default DefaultLockTTL.
	LockTTL time.Duration
}

// WithDefaults returns a copy of c with every zero field set to its default.
func (c MemoryConfig) WithDefaults() MemoryConfig {
	if c.TTL == 0 {
		c.TTL = DefaultTTL
	}
	if c.LockTTL == 0 {
		c.LockTTL = DefaultLockTTL
	}
	return c
}

func (c MemoryConfig) validate() error {
	return validateTTLs("MemoryConfig", c.TTL, c.LockTTL)
}

// sweepBatch bounds the expired records one call removes from each queue.
// A call adds at most one queue item, so the sweep outpaces growth and
// memory stays proportional to the records still alive.
const sweepBatch = 32

// MemoryStore is the Store for development and tests: records live in this
// process only, so several processes do not see each other's keys and a
// restart forgets them. It is safe for concurrent use and runs no goroutine;
// expired records are ignored when met and removed, a bounded batch at a
// time, by every call.
type MemoryStore struct {
	cfg MemoryConfig
	now func() time.Time

	mu      sync.Mutex
	records map[Key]*memoryRecord
	// Expiry queues, one per state: each state has one lifetime, so items
	// are pushed in expiry order. An item may outlive its record (released,
	// completed, reclaimed); the sweep then finds nothing expired to remove.
	pending, done expiryQueue
}

type memoryRecord struct {
	done        bool
	fingerprint string
	resp        Response
	expires     time.Time
}

var (
	_ Store   = (*MemoryStore)(nil)
	_ Remover = (*MemoryStore)(nil)
)

// NewMemoryStore returns an empty store. It panics when a duration of cfg
// is negative.
func NewMemoryStore(cfg MemoryConfig) *MemoryStore {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		panic(err)
	}
	return &MemoryStore{cfg: cfg, now: time.Now, records: make(map[Key]*memoryRecord)}
}

// Claim implements Store.
func (s *MemoryStore) Claim(_ context.Context, key Key, fingerprint string) (*Response, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.sweep()
	if rec := s.live(key, now); rec != nil {
		switch {
		case rec.fingerprint != fingerprint:
			return nil, ErrKeyReused
		case !rec.done:
			return nil, ErrInProgress
		default:
			resp := rec.resp
			resp.Body = slices.Clone(resp.Body)
			return &resp, nil
		}
	}
	s.put(key, &memoryRecord{fingerprint: fingerprint, expires: now.Add(s.cfg.LockTTL)})
	return nil, nil
}

// Complete implements Store.
func (s *MemoryStore) Complete(_ context.Context, key Key, fingerprint string, resp Response) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.sweep()
	if rec := s.live(key, now); rec != nil {
		if rec.fingerprint != fingerprint {
			return ErrKeyReused
		}
		if rec.done {
			return nil // the first response stays
		}
	}
	resp.Body = slices.Clone(resp.Body)
	s.put(key, &memoryRecord{done: true, fingerprint: fingerprint, resp: resp, expires: now.Add(s.cfg.TTL)})
	return nil
}

// Release implements Store.
func (s *MemoryStore) Release(_ context.Context, key Key, fingerprint string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.sweep()
	if rec := s.live(key, now); rec != nil && !rec.done && rec.fingerprint == fingerprint {
		delete(s.records, key)
	}
	return nil
}

// Remove implements Remover.
func (s *MemoryStore) Remove(_ context.Context, keys ...Key) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.sweep()
	for _, key := range keys {
		if rec := s.live(key, now); rec != nil && rec.done {
			delete(s.records, key)
		}
	}
	return nil
}

// live returns the unexpired record of key, or nil.
func (s *MemoryStore) live(key Key, now time.Time) *memoryRecord {
	rec, ok := s.records[key]
	if !ok {
		return nil
	}
	if !now.Before(rec.expires) {
		delete(s.records, key)
		return nil
	}
	return rec
}

func (s *MemoryStore) put(key Key, rec *memoryRecord) {
	s.records[key] = rec
	q := &s.pending
	if rec.done {
		q = &s.done
	}
	q.push(expiryItem{key: key, expires: rec.expires})
}

// sweep removes up to sweepBatch expired records from each queue and
// returns the time it swept at.
func (s *MemoryStore) sweep() time.Time {
	now := s.now()
	drop := func(key Key) {
		if rec, ok := s.records[key]; ok && !now.Before(rec.expires) {
			delete(s.records, key)
		}
	}
	s.pending.popExpired(now, sweepBatch, drop)
	s.done.popExpired(now, sweepBatch, drop)
	return now
}

type expiryItem struct {
	key     Key
	expires time.Time
}

// expiryQueue is a FIFO of items in expiry order.
type expiryQueue struct {
	items []expiryItem
	head  int
}

func (q *expiryQueue) push(it expiryItem) { q.items = append(q.items, it) }

func (q *expiryQueue) len() int { return len(q.items) - q.head }

// popExpired pops up to limit items expired at now and calls fn with each.
func (q *expiryQueue) popExpired(now time.Time, limit int, fn func(Key)) {
	for range limit {
		if q.head == len(q.items) || now.Before(q.items[q.head].expires) {
			break
		}
		fn(q.items[q.head].key)
		q.items[q.head] = expiryItem{}
		q.head++
	}
	// Compact once half the array is popped (amortised O(1)), and give a
	// burst's array back once the queue has shrunk to a quarter of it.
	if q.head == 0 || q.head*2 < len(q.items) {
		return
	}
	n := len(q.items) - q.head
	if cap(q.items) > 64 && n < cap(q.items)/4 {
		q.items = append(make([]expiryItem, 0, 2*n), q.items[q.head:]...)
	} else {
		copy(q.items, q.items[q.head:])
		clear(q.items[n:])
		q.items = q.items[:n]
	}
	q.head = 0
}

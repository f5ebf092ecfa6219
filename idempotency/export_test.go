package idempotency

import "time"

// RedisKey is the Redis key s stores k under.
func RedisKey(s *RedisStore, k Key) string { return s.key(k) }

// NewMemoryStoreAt returns a MemoryStore that reads the time from now.
func NewMemoryStoreAt(cfg MemoryConfig, now func() time.Time) *MemoryStore {
	s := NewMemoryStore(cfg)
	s.now = now
	return s
}

// MemoryFootprint reports what s holds: records and queued expiry items.
func MemoryFootprint(s *MemoryStore) (records, queued int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.records), s.pending.len() + s.done.len()
}

package idempotency_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/idempotency"
	"github.com/kumiko-go/kumiko/idempotency/idempotencytest"
)

func TestMemoryStore(t *testing.T) {
	t.Parallel()
	idempotencytest.Run(t, func(t *testing.T, ttl, lockTTL time.Duration) idempotency.Store {
		return idempotency.NewMemoryStore(idempotency.MemoryConfig{TTL: ttl, LockTTL: lockTTL})
	})
}

// fakeClock is a time source the test moves by hand.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func TestMemoryStoreDefaults(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	clock := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	s := idempotency.NewMemoryStoreAt(idempotency.MemoryConfig{}, clock.Now)
	claimed, done := idempotency.Key{Key: "claimed"}, idempotency.Key{Key: "done"}

	require.NoError(t, claimErr(s.Claim(ctx, claimed, "fp")))
	require.NoError(t, claimErr(s.Claim(ctx, done, "fp")))
	require.NoError(t, s.Complete(ctx, done, "fp", idempotency.Response{Status: 200}))

	clock.Add(idempotency.DefaultLockTTL - time.Nanosecond)
	require.ErrorIs(t, claimErr(s.Claim(ctx, claimed, "fp")), idempotency.ErrInProgress)
	clock.Add(time.Nanosecond)
	require.NoError(t, claimErr(s.Claim(ctx, claimed, "fp")), "the claim lives DefaultLockTTL")

	clock.Add(idempotency.DefaultTTL - idempotency.DefaultLockTTL - time.Nanosecond)
	resp, err := s.Claim(ctx, done, "fp")
	require.NoError(t, err)
	require.NotNil(t, resp, "the response lives DefaultTTL")
	clock.Add(time.Nanosecond)
	require.NoError(t, claimErr(s.Claim(ctx, done, "fp")), "the response lives DefaultTTL")
}

// TestMemoryStoreSweepsExpired: records nobody asks for again are removed by
// later calls, so a long-running process does not keep every key it saw.
func TestMemoryStoreSweepsExpired(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	clock := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	s := idempotency.NewMemoryStoreAt(idempotency.MemoryConfig{TTL: time.Minute, LockTTL: time.Second}, clock.Now)

	const n = 10_000
	for i := range n {
		key := idempotency.Key{Tenant: "t", User: "u", Key: fmt.Sprint(i)}
		require.NoError(t, claimErr(s.Claim(ctx, key, "fp")))
		switch i % 3 {
		case 0:
			require.NoError(t, s.Complete(ctx, key, "fp", idempotency.Response{Status: 200, Body: []byte("x")}))
		case 1:
			require.NoError(t, s.Release(ctx, key, "fp"))
		}
	}
	records, queued := idempotency.MemoryFootprint(s)
	require.Equal(t, n-n/3, records, "records before expiry") // released ones are gone
	require.Positive(t, queued)

	clock.Add(time.Minute)
	// Steady traffic on other keys, each claim expiring before the next:
	// the sweep must remove the backlog while keeping up with it.
	calls := 0
	for ; calls < n; calls++ {
		key := idempotency.Key{Tenant: "t", User: "u", Key: fmt.Sprint("new-", calls)}
		require.NoError(t, claimErr(s.Claim(ctx, key, "fp")))
		clock.Add(time.Second)
		if records, queued = idempotency.MemoryFootprint(s); records <= 1 && queued <= 1 {
			break
		}
	}
	require.LessOrEqual(t, records, 1, "records left after %d calls", calls)
	require.LessOrEqual(t, queued, 1, "queue items left after %d calls", calls)
	require.Less(t, calls, n/10, "the sweep is too slow")
}

func TestMemoryStoreRejectsNegativeDurations(t *testing.T) {
	t.Parallel()
	require.PanicsWithError(t, "idempotency: MemoryConfig.TTL is negative (-1s)", func() {
		idempotency.NewMemoryStore(idempotency.MemoryConfig{TTL: -time.Second})
	})
	require.PanicsWithError(t, "idempotency: MemoryConfig.LockTTL is negative (-1s)", func() {
		idempotency.NewMemoryStore(idempotency.MemoryConfig{LockTTL: -time.Second})
	})
}

// claimErr drops the replay of a Claim, for calls expected to own the key
// or to fail.
func claimErr(resp *idempotency.Response, err error) error {
	if err == nil && resp != nil {
		return fmt.Errorf("unexpected replay %+v", *resp)
	}
	return err
}

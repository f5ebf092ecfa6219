package http

import (
	"crypto"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/feature"
)

// The cache never holds more than its size, however many tokens arrive.
func TestTokenCacheIsBounded(t *testing.T) {
	t.Parallel()
	tc := newTokenCache(100, time.Minute)
	now := time.Now()
	for i := range 1000 {
		tc.put(fmt.Sprintf("token-%d", i), feature.User{ID: "u"}, now.Add(time.Hour), now, "", nil)
		require.LessOrEqual(t, tc.len(), 100)
	}
	_, _, ok := tc.get("token-999", now, nil)
	require.True(t, ok, "the newest token is cached")
}

// An entry is trusted until the token's exp or the cache's TTL, whichever
// comes first, and, for a key set's token, while the set holds its key;
// after that the token is verified again.
func TestTokenCacheHonoursExpTTLAndKeySet(t *testing.T) {
	t.Parallel()
	tc := newTokenCache(10, time.Minute)
	now := time.Now()
	u := feature.User{ID: "alice", Authenticated: true}

	tc.put("short", u, now.Add(time.Second), now, "", nil)
	got, exp, ok := tc.get("short", now, nil)
	require.True(t, ok)
	require.Equal(t, u, got)
	require.Equal(t, now.Add(time.Second), exp)
	_, _, ok = tc.get("short", now.Add(time.Second), nil)
	require.False(t, ok, "an expired token is not answered from the cache")

	tc.put("long", u, now.Add(time.Hour), now, "", nil)
	_, _, ok = tc.get("long", now.Add(time.Minute-time.Nanosecond), nil)
	require.True(t, ok)
	_, _, ok = tc.get("long", now.Add(time.Minute), nil)
	require.False(t, ok, "past the TTL the token is verified again")
	require.Equal(t, 0, tc.len())

	tc.put("expired", u, now, now, "", nil)
	require.Equal(t, 0, tc.len(), "an expired token is not cached")

	key := new(int) // any comparable public key
	held := true
	holds := func(kid string, k crypto.PublicKey) bool { return held && kid == "r1" && k == crypto.PublicKey(key) }
	tc.put("jwks", u, now.Add(time.Hour), now, "r1", key)
	_, _, ok = tc.get("jwks", now, holds)
	require.True(t, ok)
	held = false // the key set was fetched without r1
	_, _, ok = tc.get("jwks", now, holds)
	require.False(t, ok, "a token of a key the set lost is verified again")
}

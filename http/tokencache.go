package http

import (
	"crypto"
	"crypto/sha256"
	"sync"
	"time"

	"github.com/kumiko-go/kumiko/feature"
)

// Bounds of the verified-token cache: at most tokenCacheSize tokens, each
// trusted for at most tokenCacheTTL after its verification and never past
// its exp. A token verified with a JWKS key is trusted only while the
// server's key set still holds that key under its kid: once the set is
// fetched without it, the token is verified again and refused. Between the
// provider revoking a key and the server fetching the set anew (at most
// Config.JWKSRefresh, or sooner on an unknown kid), a cached token lives at
// most tokenCacheTTL longer than an uncached one would.
const (
	tokenCacheSize = 10_000
	tokenCacheTTL  = 30 * time.Second
)

// tokenCache remembers the callers of verified bearer tokens, keyed by the
// SHA-256 of the token string, so a client sending the same token again is
// not verified (signature, claims) again. It is safe for concurrent use.
type tokenCache struct {
	mu      sync.Mutex
	entries map[[sha256.Size]byte]cachedToken
	size    int
	ttl     time.Duration
}

// cachedToken is a verified token's caller, trusted until until.
type cachedToken struct {
	user  feature.User
	exp   time.Time // the token's exp
	until time.Time // min(exp, verification + ttl)
	// kid and key verified the token when it came from a key set; key is
	// nil for the HS256 secret.
	kid string
	key crypto.PublicKey
}

func newTokenCache(size int, ttl time.Duration) *tokenCache {
	return &tokenCache{entries: make(map[[sha256.Size]byte]cachedToken), size: size, ttl: ttl}
}

// get returns the caller of token and its expiry when token was verified
// and is still trusted at now; holds says whether a key set still holds the
// key that verified it.
func (tc *tokenCache) get(token string, now time.Time, holds func(kid string, key crypto.PublicKey) bool) (feature.User, time.Time, bool) {
	k := sha256.Sum256([]byte(token))
	tc.mu.Lock()
	defer tc.mu.Unlock()
	e, ok := tc.entries[k]
	if !ok {
		return feature.User{}, time.Time{}, false
	}
	if !now.Before(e.until) || e.key != nil && !holds(e.kid, e.key) {
		delete(tc.entries, k)
		return feature.User{}, time.Time{}, false
	}
	return e.user, e.exp, true
}

// put remembers that token, verified at now (by key of kid, nil for the
// secret), names u and expires at exp. A full cache first drops the entries
// no longer trusted, then, when still full, half of the others.
func (tc *tokenCache) put(token string, u feature.User, exp, now time.Time, kid string, key crypto.PublicKey) {
	until := now.Add(tc.ttl)
	if exp.Before(until) {
		until = exp
	}
	if !now.Before(until) {
		return
	}
	k := sha256.Sum256([]byte(token))
	tc.mu.Lock()
	defer tc.mu.Unlock()
	if len(tc.entries) >= tc.size {
		for key, e := range tc.entries {
			if !now.Before(e.until) {
				delete(tc.entries, key)
			}
		}
		for key := range tc.entries {
			if len(tc.entries) < tc.size/2+1 {
				break
			}
			delete(tc.entries, key)
		}
	}
	tc.entries[k] = cachedToken{user: u, exp: exp, until: until, kid: kid, key: key}
}

// len is the number of cached tokens.
func (tc *tokenCache) len() int {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	return len(tc.entries)
}

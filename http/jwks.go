package http

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/kumiko-go/kumiko/kumikotype"
	"github.com/kumiko-go/kumiko/pipeline"
)

// Defaults of the JWKS cache.
const (
	// DefaultJWKSRefresh is Config.JWKSRefresh: how old the cached keys may
	// get before the next token fetches them again.
	DefaultJWKSRefresh = time.Hour
	// DefaultJWKSMinRefetch is Config.JWKSMinRefetch: the shortest time
	// between two fetches a token with an unknown kid may cause.
	DefaultJWKSMinRefetch = 30 * time.Second
	// jwksFetchTimeout bounds one fetch of the discovery document or the
	// key set.
	jwksFetchTimeout = 5 * time.Second
	// jwksMaxBody is the largest discovery document or key set read.
	jwksMaxBody = 1 << 20
)

// keySet is a cache of the public keys of a JWKS URL, or of the jwks_uri an
// OIDC issuer's discovery document names. Keys are fetched on first use,
// again when they are older than refresh, and again for a kid they lack,
// at most once per minRefetch: a stream of tokens with made-up kids cannot
// turn into a stream of fetches. A failed fetch keeps the keys it had.
type keySet struct {
	url, issuer          string // one of them is set
	client               *http.Client
	refresh, minRefetch  time.Duration
	fetchMu              sync.Mutex // one fetch at a time
	mu                   sync.RWMutex
	keys                 map[string]crypto.PublicKey
	fetched, lastAttempt time.Time
}

func newKeySet(url, issuer string, client *http.Client, refresh, minRefetch time.Duration) *keySet {
	if client == nil {
		client = &http.Client{Timeout: jwksFetchTimeout}
	}
	return &keySet{url: url, issuer: strings.TrimSuffix(issuer, "/"), client: client, refresh: refresh, minRefetch: minRefetch}
}

// key returns the key kid names, fetching the set when the cache is empty,
// stale, or lacks kid (rate limited).
func (k *keySet) key(ctx context.Context, kid string) (crypto.PublicKey, error) {
	key, fresh := k.cached(kid)
	if key != nil && fresh {
		return key, nil
	}
	k.fetchMu.Lock()
	defer k.fetchMu.Unlock()
	// Another request may have fetched while this one waited.
	key, fresh = k.cached(kid)
	if key != nil && fresh {
		return key, nil
	}
	k.mu.RLock()
	empty, allowed := k.keys == nil, k.lastAttempt.IsZero() || time.Since(k.lastAttempt) >= k.minRefetch
	k.mu.RUnlock()
	var err error
	if allowed {
		err = k.fetch(ctx)
		empty = empty && err != nil
		key, _ = k.cached(kid)
	}
	switch {
	case key != nil:
		return key, nil // a failed or skipped refresh keeps serving the cached key
	case empty && err == nil:
		err = errors.New("no key set fetched yet; the last fetch failed moments ago")
		fallthrough
	case empty:
		return nil, newAPIError(pipeline.CodeUnavailable, kumikotype.ReasonJWKSUnavailable, "the signing keys cannot be fetched; retry later").WithCause(err)
	}
	return nil, nil // kid unknown to the set
}

// cached is the cached key of kid (nil when absent) and whether the cache
// is younger than refresh.
func (k *keySet) cached(kid string) (crypto.PublicKey, bool) {
	k.mu.RLock()
	defer k.mu.RUnlock()
	return k.keys[kid], k.keys != nil && time.Since(k.fetched) < k.refresh
}

// holds reports whether the cached set still maps kid to key: a token
// verified with a key the set has since lost is verified again.
func (k *keySet) holds(kid string, key crypto.PublicKey) bool {
	k.mu.RLock()
	defer k.mu.RUnlock()
	return k.keys[kid] == key
}

// fetch replaces the cache with the keys the set serves now.
func (k *keySet) fetch(ctx context.Context) error {
	k.mu.Lock()
	k.lastAttempt = time.Now()
	k.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), jwksFetchTimeout)
	defer cancel()
	url := k.url
	if url == "" {
		var disc struct {
			Issuer  string `json:"issuer"`
			JWKSURI string `json:"jwks_uri"`
		}
		if err := k.getJSON(ctx, k.issuer+"/.well-known/openid-configuration", &disc); err != nil {
			return err
		}
		if strings.TrimSuffix(disc.Issuer, "/") != k.issuer || disc.JWKSURI == "" {
			return fmt.Errorf("discovery document of %s names issuer %q and jwks_uri %q", k.issuer, disc.Issuer, disc.JWKSURI)
		}
		url = disc.JWKSURI
	}
	var set struct {
		Keys []jwk `json:"keys"`
	}
	if err := k.getJSON(ctx, url, &set); err != nil {
		return err
	}
	keys := map[string]crypto.PublicKey{}
	for _, j := range set.Keys {
		if pk, err := j.public(); err == nil && j.Kid != "" {
			keys[j.Kid] = pk // keys of other kinds or uses are skipped
		}
	}
	k.mu.Lock()
	k.keys, k.fetched = keys, time.Now()
	k.mu.Unlock()
	return nil
}

func (k *keySet) getJSON(ctx context.Context, url string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", contentTypeJSON)
	resp, err := k.client.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, jwksMaxBody)).Decode(v); err != nil {
		return fmt.Errorf("GET %s: %w", url, err)
	}
	return nil
}

// jwk is one key of a JWK set (RFC 7517): RSA or EC P-256 signing keys.
type jwk struct {
	Kid string `json:"kid"`
	Kty string `json:"kty"`
	Use string `json:"use"`
	Crv string `json:"crv"`
	N   string `json:"n"`
	E   string `json:"e"`
	X   string `json:"x"`
	Y   string `json:"y"`
}

func (j jwk) public() (crypto.PublicKey, error) {
	if j.Use != "" && j.Use != "sig" {
		return nil, errors.New("not a signing key")
	}
	b64 := base64.RawURLEncoding.DecodeString
	switch j.Kty {
	case "RSA":
		n, err1 := b64(j.N)
		e, err2 := b64(j.E)
		if err := errors.Join(err1, err2); err != nil || len(n) == 0 || len(e) == 0 || len(e) > 4 {
			return nil, errors.New("malformed RSA key")
		}
		exp := int(new(big.Int).SetBytes(e).Int64())
		return &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: exp}, nil
	case "EC":
		x, err1 := b64(j.X)
		y, err2 := b64(j.Y)
		if err := errors.Join(err1, err2); err != nil || j.Crv != "P-256" || len(x) != 32 || len(y) != 32 {
			return nil, errors.New("malformed or unsupported EC key")
		}
		return ecdsa.ParseUncompressedPublicKey(elliptic.P256(), append(append([]byte{4}, x...), y...))
	}
	return nil, fmt.Errorf("unsupported key type %q", j.Kty)
}

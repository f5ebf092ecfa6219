package http_test

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"math/big"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"

	khttp "github.com/kumiko-go/kumiko/http"
)

// idp is a local identity provider: an OIDC discovery document and a JWK
// set whose keys a test rotates, counting the fetches of the set.
type idp struct {
	srv     *httptest.Server
	mu      sync.Mutex
	keys    map[string]crypto.Signer // kid → private key served as public
	fetches atomic.Int64
	down    atomic.Bool
}

func newIDP(t *testing.T) *idp {
	t.Helper()
	p := &idp{keys: map[string]crypto.Signer{}}
	mux := http.NewServeMux()
	mux.HandleFunc("/.well-known/openid-configuration", func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]string{"issuer": p.srv.URL, "jwks_uri": p.srv.URL + "/jwks"})
	})
	mux.HandleFunc("/jwks", func(w http.ResponseWriter, _ *http.Request) {
		p.fetches.Add(1)
		if p.down.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		var keys []map[string]string
		for kid, k := range p.keys {
			b64 := base64.RawURLEncoding.EncodeToString
			switch pub := k.Public().(type) {
			case *rsa.PublicKey:
				keys = append(keys, map[string]string{"kid": kid, "kty": "RSA", "use": "sig",
					"n": b64(pub.N.Bytes()), "e": b64(big.NewInt(int64(pub.E)).Bytes())})
			case *ecdsa.PublicKey:
				raw, err := pub.Bytes()
				if err != nil {
					panic(err)
				}
				keys = append(keys, map[string]string{"kid": kid, "kty": "EC", "crv": "P-256",
					"x": b64(raw[1:33]), "y": b64(raw[33:])})
			}
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"keys": keys})
	})
	p.srv = httptest.NewServer(mux)
	t.Cleanup(p.srv.Close)
	return p
}

// serve makes the set hold exactly keys.
func (p *idp) serve(keys map[string]crypto.Signer) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.keys = keys
}

// sign signs a token for user u of tenant A with key under kid; iss is the
// provider unless change sets another.
func (p *idp) sign(t *testing.T, kid string, key crypto.Signer, change func(jwt.MapClaims)) string {
	t.Helper()
	c := valid(func(c jwt.MapClaims) { c["iss"] = p.srv.URL; c["aud"] = "kumiko-api" })
	if change != nil {
		change(c)
	}
	method := jwt.SigningMethod(jwt.SigningMethodRS256)
	if _, ok := key.(*ecdsa.PrivateKey); ok {
		method = jwt.SigningMethodES256
	}
	tok := jwt.NewWithClaims(method, c)
	tok.Header["kid"] = kid
	s, err := tok.SignedString(key)
	require.NoError(t, err)
	return s
}

func rsaKey(t *testing.T) *rsa.PrivateKey {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	return k
}

func ecKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	return k
}

// TestOIDCKeyRotation verifies RS256 and ES256 tokens against a local
// provider found by discovery: keys are cached, a rotation's new kid is
// fetched, the old key stops working, iss and aud are checked, the
// algorithm must match the key, HS256 is refused without a secret, and the
// provider being down answers 503 only while no key is cached.
func TestOIDCKeyRotation(t *testing.T) {
	t.Parallel()
	p := newIDP(t)
	r1, e1, r2 := rsaKey(t), ecKey(t), rsaKey(t)
	p.serve(map[string]crypto.Signer{"r1": r1, "e1": e1})
	e := newEnv(t, func(c *khttp.Config) {
		c.JWTSecret, c.OIDCIssuer, c.Audience = nil, p.srv.URL, "kumiko-api"
		c.JWKSMinRefetch = time.Nanosecond // every unknown kid may refetch
	})
	list := `{"type":"task.list","payload":{}}`
	okWith := func(tok string) {
		t.Helper()
		r := e.post("/api/query", tok, list)
		require.Equal(t, http.StatusOK, r.status, r.String())
	}
	refused := func(tok string) {
		t.Helper()
		requireProblem(t, e.post("/api/query", tok, list), http.StatusUnauthorized, "unauthenticated", "invalid_token")
	}

	for range 5 {
		okWith(p.sign(t, "r1", r1, nil))
		okWith(p.sign(t, "e1", e1, nil))
	}
	require.Equal(t, int64(1), p.fetches.Load(), "known kids are served from the cache")

	refused(p.sign(t, "r1", r1, func(c jwt.MapClaims) { c["iss"] = "https://other.example" }))
	refused(p.sign(t, "r1", r1, func(c jwt.MapClaims) { c["aud"] = "another-api" }))
	refused(p.sign(t, "e1", r1, nil)) // an RS256 token naming an EC key
	refused(signed(t, valid(nil)))    // HS256: no secret configured
	require.Equal(t, int64(1), p.fetches.Load())

	// Rotation: r2 replaces r1. Its kid is unknown, so the set is fetched.
	p.serve(map[string]crypto.Signer{"r2": r2, "e1": e1})
	okWith(p.sign(t, "r2", r2, nil))
	require.Equal(t, int64(2), p.fetches.Load())
	refused(p.sign(t, "r1", r1, nil)) // retired: refetched, still unknown
	require.Equal(t, int64(3), p.fetches.Load())

	// The provider goes down: cached keys keep working, an unknown kid is refused.
	p.down.Store(true)
	okWith(p.sign(t, "r2", r2, nil))
	refused(p.sign(t, "r9", rsaKey(t), nil))
}

// TestJWKSRefetchRateLimit: tokens with made-up kids cause at most one
// fetch per JWKSMinRefetch, and a provider that cannot be reached before
// any key is cached answers 503 unavailable.
func TestJWKSRefetchRateLimit(t *testing.T) {
	t.Parallel()
	p := newIDP(t)
	r1 := rsaKey(t)
	p.serve(map[string]crypto.Signer{"r1": r1})
	e := newEnv(t, func(c *khttp.Config) {
		c.JWKSURL, c.JWKSMinRefetch = p.srv.URL+"/jwks", time.Hour
	})
	list := `{"type":"task.list","payload":{}}`
	p.down.Store(true)
	r := e.post("/api/query", p.sign(t, "r1", r1, nil), list)
	requireProblem(t, r, http.StatusServiceUnavailable, "unavailable", "jwks_unavailable")
	r = e.post("/api/query", p.sign(t, "r1", r1, nil), list)
	requireProblem(t, r, http.StatusServiceUnavailable, "unavailable", "jwks_unavailable")
	require.Equal(t, int64(1), p.fetches.Load(), "a failed fetch is not retried within the period")

	// A server with the provider up: one fetch, then made-up kids fetch nothing.
	p.down.Store(false)
	e2 := newEnv(t, func(c *khttp.Config) {
		c.JWKSURL, c.JWKSMinRefetch = p.srv.URL+"/jwks", time.Hour
	})
	okTok := p.sign(t, "r1", r1, nil)
	require.Equal(t, http.StatusOK, e2.post("/api/query", okTok, list).status)
	for i := range 20 {
		tok := p.sign(t, "made-up-"+string(rune('a'+i)), r1, nil)
		requireProblem(t, e2.post("/api/query", tok, list), http.StatusUnauthorized, "unauthenticated", "invalid_token")
	}
	require.Equal(t, int64(2), p.fetches.Load())
	// HS256 still works next to the key set: the env's secret is set.
	require.Equal(t, http.StatusOK, e2.post("/api/query", token(t, "u", tenantA, "User"), list).status)
}

// TestCORS: off by default; with an allow-list, a preflight from a listed
// origin is answered and an unlisted origin gets no allow header.
func TestCORS(t *testing.T) {
	t.Parallel()
	off := newEnv(t)
	pre := request{method: http.MethodOptions, path: "/api/write", header: map[string]string{
		"Origin": "https://app.example.com", "Access-Control-Request-Method": "POST",
		"Access-Control-Request-Headers": "authorization,content-type,idempotency-key",
	}}
	r := off.do(pre)
	require.Empty(t, r.header.Get("Access-Control-Allow-Origin"))

	on := newEnv(t, func(c *khttp.Config) { c.CORSOrigins = []string{"https://app.example.com"} })
	r = on.do(pre)
	require.Equal(t, http.StatusNoContent, r.status, r.String())
	require.Equal(t, "https://app.example.com", r.header.Get("Access-Control-Allow-Origin"))
	require.Contains(t, r.header.Get("Access-Control-Allow-Headers"), "Idempotency-Key")

	pre.header["Origin"] = "https://evil.example.com"
	r = on.do(pre)
	require.Empty(t, r.header.Get("Access-Control-Allow-Origin"))

	w := on.post("/api/write", token(t, "u", tenantA, "User"), `{"type":"task.create","payload":{"title":"x"}}`,
		"Origin", "https://app.example.com")
	require.Equal(t, http.StatusOK, w.status)
	require.Equal(t, "https://app.example.com", w.header.Get("Access-Control-Allow-Origin"))
	require.Contains(t, w.header.Get("Access-Control-Expose-Headers"), khttp.HeaderRequestID)
}

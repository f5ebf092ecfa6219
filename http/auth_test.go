package http_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/eventstore"
	khttp "github.com/kumiko-go/kumiko/http"
)

// signed signs claims with the test secret, for tokens IssueToken would not
// issue.
func signed(t *testing.T, claims jwt.MapClaims) string {
	t.Helper()
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(secret)
	require.NoError(t, err)
	return tok
}

// valid are the claims of a good token for a User of tenant A; each case
// of a test changes some.
func valid(change func(jwt.MapClaims)) jwt.MapClaims {
	now := time.Now()
	c := jwt.MapClaims{
		"sub": "alice", "tid": tenantA.String(), "roles": []string{"User"},
		"iat": now.Unix(), "exp": now.Add(time.Hour).Unix(),
	}
	if change != nil {
		change(c)
	}
	return c
}

// Tokens naming the system tenant, with time claims that are not numbers,
// or with claims the database cannot store are refused with 401 before any
// SQL runs; numeric time claims pass, iat and nbf being optional.
func TestTokenClaims(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	future := time.Now().Add(time.Hour).Unix()
	past := time.Now().Add(-time.Minute).Unix()
	write := `{"type":"task.create","payload":{"title":"t"}}`

	refused := map[string]jwt.MapClaims{
		"system tenant":     valid(func(c jwt.MapClaims) { c["tid"] = eventstore.SystemTenant.String() }),
		"string exp":        valid(func(c jwt.MapClaims) { c["exp"] = "9999999999" }),
		"string nbf":        valid(func(c jwt.MapClaims) { c["nbf"] = "1000000000" }),
		"string iat":        valid(func(c jwt.MapClaims) { c["iat"] = "1000000000" }),
		"null iat":          valid(func(c jwt.MapClaims) { c["iat"] = nil }),
		"bool nbf":          valid(func(c jwt.MapClaims) { c["nbf"] = false }),
		"string Exp":        valid(func(c jwt.MapClaims) { delete(c, "exp"); c["Exp"] = "9999999999" }),
		"missing exp":       valid(func(c jwt.MapClaims) { delete(c, "exp") }),
		"NUL in sub":        valid(func(c jwt.MapClaims) { c["sub"] = "ali\x00ce" }),
		"NUL in a role":     valid(func(c jwt.MapClaims) { c["roles"] = []string{"User", "Ad\x00min"} }),
		"NUL in tid":        valid(func(c jwt.MapClaims) { c["tid"] = tenantA.String() + "\x00" }),
		"sub too long":      valid(func(c jwt.MapClaims) { c["sub"] = strings.Repeat("a", 257) }),
		"role too long":     valid(func(c jwt.MapClaims) { c["roles"] = []string{"User", strings.Repeat("r", 129)} }),
		"too many roles":    valid(func(c jwt.MapClaims) { c["roles"] = append(make([]string, 64), "User") }),
		"nbf in the future": valid(func(c jwt.MapClaims) { c["nbf"] = future }),
		"expired":           valid(func(c jwt.MapClaims) { c["exp"] = past }),
	}
	for name, claims := range refused {
		t.Run(name, func(t *testing.T) {
			r := doOn(t, e.srv, post("/api/write", signed(t, claims), write))
			reason := "invalid_token"
			if name == "expired" {
				reason = "token_expired"
			}
			p := requireProblem(t, r, http.StatusUnauthorized, "unauthenticated", reason)
			require.NotContains(t, p["detail"], "\x00")
			require.Contains(t, r.header.Get("WWW-Authenticate"), `error="invalid_token"`)
		})
	}
	require.Zero(t, e.events(), "no refused token wrote anything")
	require.Empty(t, e.logs.lines(map[string]any{"level": "ERROR"}), "no refusal is a server error")

	accepted := map[string]jwt.MapClaims{
		"no iat, no nbf":   valid(func(c jwt.MapClaims) { delete(c, "iat") }),
		"numeric nbf":      valid(func(c jwt.MapClaims) { c["nbf"] = past }),
		"fractional times": valid(func(c jwt.MapClaims) { c["exp"] = float64(future) + 0.5; c["iat"] = float64(past) + 0.25 }),
		"roles at limits": valid(func(c jwt.MapClaims) {
			c["roles"] = append(make([]string, 63), "User")
			c["sub"] = strings.Repeat("a", 256)
		}),
		"unchecked iss": valid(func(c jwt.MapClaims) { c["iss"] = "anyone"; c["aud"] = "anything" }),
	}
	for name, claims := range accepted {
		t.Run(name, func(t *testing.T) {
			r := doOn(t, e.srv, post("/api/write", signed(t, claims), write))
			require.Equal(t, http.StatusOK, r.status, r.String())
		})
	}
}

// With Config.Issuer and Config.Audience set, iss must match and aud must
// name the audience.
func TestTokenIssuerAndAudience(t *testing.T) {
	t.Parallel()
	const iss, aud = "https://idp.example", "kumiko-api"
	e := newEnv(t, func(c *khttp.Config) { c.Issuer, c.Audience = iss, aud })
	write := `{"type":"task.create","payload":{"title":"t"}}`

	for name, claims := range map[string]jwt.MapClaims{
		"no iss":      valid(func(c jwt.MapClaims) { c["aud"] = aud }),
		"no aud":      valid(func(c jwt.MapClaims) { c["iss"] = iss }),
		"wrong iss":   valid(func(c jwt.MapClaims) { c["iss"] = "https://evil.example"; c["aud"] = aud }),
		"wrong aud":   valid(func(c jwt.MapClaims) { c["iss"] = iss; c["aud"] = "other-api" }),
		"wrong auds":  valid(func(c jwt.MapClaims) { c["iss"] = iss; c["aud"] = []string{"a", "b"} }),
		"iss as list": valid(func(c jwt.MapClaims) { c["iss"] = []string{iss}; c["aud"] = aud }),
	} {
		t.Run(name, func(t *testing.T) {
			requireProblem(t, doOn(t, e.srv, post("/api/write", signed(t, claims), write)), http.StatusUnauthorized, "unauthenticated", "invalid_token")
		})
	}
	require.Zero(t, e.events())

	tok, err := khttp.IssueToken(secret, "alice", tenantA.String(), []string{"User"}, time.Minute,
		khttp.TokenIssuer(iss), khttp.TokenAudience(aud))
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, e.post("/api/write", tok, write).status)
	list := signed(t, valid(func(c jwt.MapClaims) { c["iss"] = iss; c["aud"] = []string{"other-api", aud} }))
	require.Equal(t, http.StatusOK, e.post("/api/write", list, write).status, "aud may be a list naming the audience")
}

// App-wide state needs the operator role: a tenant's Admin is refused
// consumers, projections and metrics; the role's name is configurable.
func TestOperatorRole(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	admin := token(t, "ada", tenantA, "Admin", "User")
	operator := token(t, "olga", tenantB, "Operator")
	routes := []string{"/api/consumers", "/api/projections", "/metrics"}
	for _, path := range routes {
		p := requireProblem(t, e.do(get(path, admin)), http.StatusForbidden, "access_denied", "")
		require.Contains(t, p["detail"], "Operator", path)
		requireProblem(t, e.do(get(path, "")), http.StatusUnauthorized, "unauthenticated", "")
		require.Equal(t, http.StatusOK, e.do(get(path, operator)).status, path)
	}

	sre := newEnv(t, func(c *khttp.Config) { c.OperatorRole = "SRE" })
	for _, path := range routes {
		requireProblem(t, sre.do(get(path, operator)), http.StatusForbidden, "access_denied", "")
		require.Equal(t, http.StatusOK, sre.do(get(path, token(t, "sam", tenantA, "SRE"))).status, path)
	}
}

// With SeparateMetrics the API handler serves no /metrics: the process
// serves the gatherer on a listener of its own.
func TestSeparateMetrics(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *khttp.Config) { c.SeparateMetrics = true })
	operator := token(t, "olga", tenantA, "Operator")
	requireProblem(t, e.do(get("/metrics", operator)), http.StatusNotFound, "not_found", "")
	require.Equal(t, http.StatusOK, e.do(get("/api/consumers", operator)).status)
}

// IssueToken refuses the reserved system tenant and claims the server
// would refuse.
func TestIssueTokenRefusesWhatTheServerRefuses(t *testing.T) {
	t.Parallel()
	for want, issue := range map[string]func() (string, error){
		"system tenant": func() (string, error) {
			return khttp.IssueToken(secret, "u", eventstore.SystemTenant.String(), nil, time.Hour)
		},
		"NUL": func() (string, error) {
			return khttp.IssueToken(secret, "u\x00", uuid.NewString(), nil, time.Hour)
		},
		"roles": func() (string, error) {
			return khttp.IssueToken(secret, "u", uuid.NewString(), []string{"\x00"}, time.Hour)
		},
	} {
		_, err := issue()
		require.ErrorContains(t, err, want)
	}
}

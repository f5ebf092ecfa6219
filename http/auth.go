package http

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/kumikotype"
	"github.com/kumiko-go/kumiko/pipeline"
)

// Bounds of the identity claims: they end up in event metadata and audit
// columns, so a token cannot smuggle in megabytes of text per request.
const (
	maxSubjectLen = 256
	maxRoles      = 64
	maxRoleLen    = 128
)

// keyTokenExpiry is where authenticate leaves the expiry of the caller's
// token on the echo.Context (a time.Time; absent for anonymous callers).
const keyTokenExpiry = "kumiko.token_expiry"

// claims are the token claims the adapter reads: sub (user id), tid (tenant
// UUID), roles, and the registered claims (exp is required; nbf and iat are
// optional; iss and aud are checked when configured).
type claims struct {
	Tenant string   `json:"tid"`
	Roles  []string `json:"roles,omitempty"`
	jwt.RegisteredClaims
}

// UnmarshalJSON refuses time claims that are not JSON numbers: the jwt
// library would read "exp":"1700000000" (a string) as a date. Keys are
// compared case-insensitively, as encoding/json matches them to fields.
func (cl *claims) UnmarshalJSON(b []byte) error {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	for k, v := range raw {
		if !strings.EqualFold(k, "exp") && !strings.EqualFold(k, "nbf") && !strings.EqualFold(k, "iat") {
			continue
		}
		if v = bytes.TrimSpace(v); len(v) == 0 || (v[0] != '-' && (v[0] < '0' || v[0] > '9')) {
			return fmt.Errorf("claim %s must be a number, got %.20s", k, v)
		}
	}
	type plain claims // no UnmarshalJSON: decodes the fields
	return json.Unmarshal(b, (*plain)(cl))
}

// TokenOption adds a claim to a token IssueToken signs.
type TokenOption func(*claims)

// TokenIssuer sets the iss claim, for a server whose Config.Issuer is set.
func TokenIssuer(iss string) TokenOption {
	return func(cl *claims) { cl.Issuer = iss }
}

// TokenAudience sets the aud claim, for a server whose Config.Audience is set.
func TokenAudience(aud string) TokenOption {
	return func(cl *claims) { cl.Audience = jwt.ClaimStrings{aud} }
}

// IssueToken signs an HS256 token for user in tenant with roles, valid for
// ttl: what the server accepts as `Authorization: Bearer <token>`. For
// development (make run prints one) and tests; production tokens come from
// the identity provider, signed with the same secret. It refuses what the
// server would refuse: an empty user, a tenant that is not a UUID, the nil
// UUID or the reserved system tenant (eventstore.SystemTenant), and a user
// or roles with NUL characters.
func IssueToken(secret []byte, user, tenant string, roles []string, ttl time.Duration, opts ...TokenOption) (string, error) {
	switch {
	case len(secret) == 0:
		return "", errors.New("http: IssueToken: the secret is empty")
	case user == "":
		return "", errors.New("http: IssueToken: the user is empty")
	case ttl <= 0:
		return "", fmt.Errorf("http: IssueToken: ttl must be positive, got %s", ttl)
	}
	if tid, err := uuid.Parse(tenant); err != nil || tid == uuid.Nil {
		return "", fmt.Errorf("http: IssueToken: tenant %q is not a non-nil UUID", tenant)
	}
	now := time.Now()
	cl := claims{
		Tenant: tenant,
		Roles:  roles,
		RegisteredClaims: jwt.RegisteredClaims{
			Subject:   user,
			IssuedAt:  jwt.NewNumericDate(now),
			ExpiresAt: jwt.NewNumericDate(now.Add(ttl)),
		},
	}
	for _, o := range opts {
		o(&cl)
	}
	if _, err := cl.identity(); err != nil {
		return "", fmt.Errorf("http: IssueToken: %s", err.Detail())
	}
	return jwt.NewWithClaims(jwt.SigningMethodHS256, cl).SignedString(secret)
}

// identity is the user the claims name, or why they name none the server
// accepts. Every string checked here reaches the database (event metadata,
// audit columns), which cannot store NUL.
func (cl *claims) identity() (feature.User, *apiError) {
	switch {
	case cl.Subject == "":
		return feature.User{}, unauthenticated(kumikotype.ReasonInvalidToken, "the token names no user (sub)", nil)
	case len(cl.Subject) > maxSubjectLen || strings.ContainsRune(cl.Subject, 0):
		return feature.User{}, unauthenticated(kumikotype.ReasonInvalidToken,
			fmt.Sprintf("the token's user (sub) must be at most %d bytes without NUL characters", maxSubjectLen), nil)
	case len(cl.Roles) > maxRoles:
		return feature.User{}, unauthenticated(kumikotype.ReasonInvalidToken, fmt.Sprintf("the token names more than %d roles", maxRoles), nil)
	}
	for _, r := range cl.Roles {
		if len(r) > maxRoleLen || strings.ContainsRune(r, 0) {
			return feature.User{}, unauthenticated(kumikotype.ReasonInvalidToken,
				fmt.Sprintf("the token's roles must be at most %d bytes each without NUL characters", maxRoleLen), nil)
		}
	}
	tid, err := uuid.Parse(cl.Tenant)
	switch {
	case err != nil || tid == uuid.Nil:
		return feature.User{}, unauthenticated(kumikotype.ReasonInvalidToken, "the token names no tenant UUID (tid)", err)
	case tid == eventstore.SystemTenant:
		return feature.User{}, unauthenticated(kumikotype.ReasonInvalidToken, "the token names the reserved system tenant (tid)", nil)
	}
	return feature.User{ID: cl.Subject, TenantID: tid, Roles: cl.Roles, Authenticated: true}, nil
}

// authenticator verifies bearer tokens.
type authenticator struct {
	secret []byte  // HS256; nil: refused
	keys   *keySet // RS256 and ES256; nil: refused
	parser *jwt.Parser
	// verified remembers verified tokens (see tokenCache for its bounds).
	verified *tokenCache
}

// newAuthenticator verifies HS256 tokens signed with cfg.JWTSecret and
// RS256/ES256 tokens whose kid the key set of cfg.JWKSURL or
// cfg.OIDCIssuer holds; a non-empty issuer or audience must match the
// token's iss or aud. With an OIDC issuer and no Issuer, iss must name the
// OIDC issuer.
func newAuthenticator(cfg Config) *authenticator {
	a := &authenticator{verified: newTokenCache(tokenCacheSize, tokenCacheTTL)}
	var methods []string
	if len(cfg.JWTSecret) > 0 {
		a.secret = slices.Clone(cfg.JWTSecret)
		methods = append(methods, jwt.SigningMethodHS256.Alg())
	}
	if cfg.JWKSURL != "" || cfg.OIDCIssuer != "" {
		a.keys = newKeySet(cfg.JWKSURL, cfg.OIDCIssuer, cfg.JWKSClient, cfg.JWKSRefresh, cfg.JWKSMinRefetch)
		methods = append(methods, jwt.SigningMethodRS256.Alg(), jwt.SigningMethodES256.Alg())
	}
	opts := []jwt.ParserOption{
		jwt.WithValidMethods(methods), // refuses "none", HS384/512, RS384…, PS*, and what is not configured
		jwt.WithExpirationRequired(),
		jwt.WithStrictDecoding(),
	}
	issuer := cfg.Issuer
	if issuer == "" && cfg.OIDCIssuer != "" {
		issuer = cfg.OIDCIssuer
	}
	if issuer != "" {
		opts = append(opts, jwt.WithIssuer(issuer))
	}
	if cfg.Audience != "" {
		opts = append(opts, jwt.WithAudience(cfg.Audience))
	}
	a.parser = jwt.NewParser(opts...)
	return a
}

// keyFor returns the key that verifies t: the secret for HS256, the key
// set's key of t's kid for RS256 and ES256, of the matching kind.
func (a *authenticator) keyFor(ctx context.Context, t *jwt.Token) (any, error) {
	if t.Method == jwt.SigningMethodHS256 {
		return a.secret, nil
	}
	kid, _ := t.Header["kid"].(string)
	if kid == "" {
		return nil, errors.New("the token names no key (kid)")
	}
	key, err := a.keys.key(ctx, kid)
	if err != nil {
		return nil, err
	}
	switch key.(type) {
	case *rsa.PublicKey:
		if t.Method == jwt.SigningMethodRS256 {
			return key, nil
		}
	case *ecdsa.PublicKey:
		if t.Method == jwt.SigningMethodES256 {
			return key, nil
		}
	case nil:
		return nil, fmt.Errorf("no key %q in the key set", kid)
	}
	return nil, fmt.Errorf("key %q does not verify %s", kid, t.Method.Alg())
}

// user returns the caller an Authorization header names and when its token
// expires: the anonymous user (and the zero time) when there is none, an
// unauthenticated error when it is not a valid bearer token. A token
// verified within tokenCacheTTL and not expired is answered from the cache.
func (a *authenticator) user(ctx context.Context, header string) (feature.User, time.Time, error) {
	if header == "" {
		return feature.User{}, time.Time{}, nil
	}
	scheme, token, _ := strings.Cut(header, " ")
	token = strings.TrimSpace(token)
	if !strings.EqualFold(scheme, "Bearer") || token == "" {
		return feature.User{}, time.Time{}, unauthenticated(kumikotype.ReasonAuthorizationHeader, "the Authorization header must be `Bearer <token>`", nil)
	}
	now := time.Now()
	if u, exp, ok := a.verified.get(token, now, a.keys.holds); ok {
		return u, exp, nil
	}
	var (
		cl  claims
		kid string
		key crypto.PublicKey // nil: the secret
	)
	keyFunc := func(t *jwt.Token) (any, error) {
		k, err := a.keyFor(ctx, t)
		if t.Method != jwt.SigningMethodHS256 {
			kid, _ = t.Header["kid"].(string)
			key = k
		}
		return k, err
	}
	if _, err := a.parser.ParseWithClaims(token, &cl, keyFunc); err != nil {
		var unavailable *apiError
		if errors.As(err, &unavailable) {
			return feature.User{}, time.Time{}, unavailable
		}
		if errors.Is(err, jwt.ErrTokenExpired) {
			return feature.User{}, time.Time{}, unauthenticated(kumikotype.ReasonTokenExpired, "the token has expired", err)
		}
		return feature.User{}, time.Time{}, unauthenticated(kumikotype.ReasonInvalidToken, "the token is invalid", err)
	}
	u, err := cl.identity()
	if err != nil {
		return feature.User{}, time.Time{}, err
	}
	a.verified.put(token, u, cl.ExpiresAt.Time, now, kid, key)
	return u, cl.ExpiresAt.Time, nil
}

// unauthenticated is a 401; its WWW-Authenticate challenge follows the
// reason (see challenge).
func unauthenticated(reason kumikotype.Reason, detail string, cause error) *apiError {
	return newAPIError(pipeline.CodeUnauthenticated, reason, detail).WithCause(cause)
}

// authenticate resolves the caller of an /api request; requests without a
// token continue as the anonymous user, and the pipeline answers
// unauthenticated where a rule needs one.
func (s *Server) authenticate(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		u, exp, err := s.auth.user(c.Request().Context(), c.Request().Header.Get(echo.HeaderAuthorization))
		if err != nil {
			return err
		}
		c.Set(keyUser, u)
		if u.Authenticated {
			c.Set(keyTokenExpiry, exp)
		}
		return next(c)
	}
}

// requireOperator refuses callers without the OperatorRole: app-wide state
// (every tenant's consumers, projections, metrics, error texts) is not any
// tenant's to see. what names the state, for the error.
func (s *Server) requireOperator(c echo.Context, what string) error {
	u := userOf(c)
	switch {
	case !u.Authenticated:
		return unauthenticated("", "sign in to see "+what, nil)
	case !u.HasRole(s.cfg.OperatorRole):
		return newAPIError(pipeline.CodeAccessDenied, "", "seeing "+what+" needs the role "+s.cfg.OperatorRole)
	}
	return nil
}

// tokenExpiryOf is when the caller's token expires; ok is false for an
// anonymous caller.
func tokenExpiryOf(c echo.Context) (exp time.Time, ok bool) {
	exp, ok = c.Get(keyTokenExpiry).(time.Time)
	return exp, ok
}

func userOf(c echo.Context) feature.User {
	u, _ := c.Get(keyUser).(feature.User)
	return u
}

// caller is the pipeline caller of a request.
func callerOf(c echo.Context) pipeline.Caller {
	info := infoOf(c)
	return pipeline.Caller{
		User:           userOf(c),
		RequestID:      info.id,
		CorrelationID:  info.correlation,
		IdempotencyKey: info.idempotencyKey,
		RequestHash:    info.requestHash,
	}
}

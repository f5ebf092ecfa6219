package http

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/pipeline"
)

// claims are the token claims the adapter reads: sub (user id), tid (tenant
// UUID), roles, and the registered time claims (exp is required).
type claims struct {
	Tenant string   `json:"tid"`
	Roles  []string `json:"roles,omitempty"`
	jwt.RegisteredClaims
}

// IssueToken signs an HS256 token for user in tenant with roles, valid for
// ttl: what the server accepts as `Authorization: Bearer <token>`. For
// development (make run prints one) and tests; production tokens come from
// the identity provider, signed with the same secret.
func IssueToken(secret []byte, user, tenant string, roles []string, ttl time.Duration) (string, error) {
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
	return jwt.NewWithClaims(jwt.SigningMethodHS256, claims{
		Tenant: tenant,
		Roles:  roles,
		RegisteredClaims: jwt.RegisteredClaims{
			Subject:   user,
			IssuedAt:  jwt.NewNumericDate(now),
			ExpiresAt: jwt.NewNumericDate(now.Add(ttl)),
		},
	}).SignedString(secret)
}

// authenticator verifies bearer tokens.
type authenticator struct {
	secret []byte
	parser *jwt.Parser
}

func newAuthenticator(secret []byte) *authenticator {
	return &authenticator{secret: secret, parser: jwt.NewParser(
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}), // refuses "none", RS*, ES*, HS384/512
		jwt.WithExpirationRequired(),
		jwt.WithStrictDecoding(),
	)}
}

// user returns the caller an Authorization header names: the anonymous user
// when there is none, an unauthenticated error when it is not a valid
// bearer token.
func (a *authenticator) user(header string) (feature.User, error) {
	if header == "" {
		return feature.User{}, nil
	}
	scheme, token, _ := strings.Cut(header, " ")
	token = strings.TrimSpace(token)
	if !strings.EqualFold(scheme, "Bearer") || token == "" {
		return feature.User{}, unauthenticated(reasonAuthorizationHeader, "the Authorization header must be `Bearer <token>`", nil)
	}
	var cl claims
	if _, err := a.parser.ParseWithClaims(token, &cl, func(*jwt.Token) (any, error) { return a.secret, nil }); err != nil {
		if errors.Is(err, jwt.ErrTokenExpired) {
			return feature.User{}, unauthenticated(reasonTokenExpired, "the token has expired", err)
		}
		return feature.User{}, unauthenticated(reasonInvalidToken, "the token is invalid", err)
	}
	if cl.Subject == "" {
		return feature.User{}, unauthenticated(reasonInvalidToken, "the token names no user (sub)", nil)
	}
	tid, err := uuid.Parse(cl.Tenant)
	if err != nil || tid == uuid.Nil {
		return feature.User{}, unauthenticated(reasonInvalidToken, "the token names no tenant UUID (tid)", err)
	}
	return feature.User{ID: cl.Subject, TenantID: tid, Roles: cl.Roles, Authenticated: true}, nil
}

func unauthenticated(reason, detail string, cause error) *apiError {
	e := newAPIError(pipeline.CodeUnauthenticated, reason, detail).withCause(cause)
	e.challenge = `Bearer realm="kumiko"`
	if reason != pipeline.CodeUnauthenticated {
		e.challenge += `, error="invalid_token"`
	}
	return e
}

// authenticate resolves the caller of an /api request; requests without a
// token continue as the anonymous user, and the pipeline answers
// unauthenticated where a rule needs one.
func (s *Server) authenticate(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		u, err := s.auth.user(c.Request().Header.Get(echo.HeaderAuthorization))
		if err != nil {
			return err
		}
		c.Set(keyUser, u)
		return next(c)
	}
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

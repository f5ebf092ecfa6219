package http

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/kumikotype"
)

// TokenUser verifies a bearer token the way the API's authentication does
// and returns its user and when the token expires: for a handler that takes
// the token in another way than the Authorization header, such as the ops
// console's login form. An invalid or expired token is an error with the
// API's code (unauthenticated).
func (s *Server) TokenUser(ctx context.Context, token string) (feature.User, time.Time, error) {
	if token == "" {
		return feature.User{}, time.Time{}, unauthenticated(kumikotype.ReasonInvalidToken, "the token is empty", nil)
	}
	return s.auth.user(ctx, "Bearer "+token)
}

// MountConsole serves h under prefix (the path itself and everything below
// it, any method) without the API's bearer authentication: h authenticates
// its callers itself, as the ops console does with its session cookie
// (TokenUser verifies the token). The request-id, logging and metrics
// middleware and the central error handler still apply; the request
// timeout does not, since h may stream. Call it before the server serves.
func (s *Server) MountConsole(prefix string, h http.Handler) {
	prefix = "/" + strings.Trim(prefix, "/")
	serve := func(c echo.Context) error {
		h.ServeHTTP(c.Response(), c.Request())
		return nil
	}
	for _, path := range []string{prefix, prefix + "/*"} {
		s.e.Any(path, serve)
		s.routes[path] = true
	}
}

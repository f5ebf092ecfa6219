package http

import (
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"
)

// MountOperator serves h under prefix (the path itself and everything
// below it, any method) to the OperatorRole only, with the API's
// authentication: a bearer token naming the role; anonymous callers get
// 401 unauthenticated, other users 403 access_denied. h sees the full
// request path. For operator tools next to the API, such as River's UI
// (jobs.UIPath). Call it before the server serves.
func (s *Server) MountOperator(prefix string, h http.Handler) {
	prefix = "/" + strings.Trim(prefix, "/")
	serve := func(c echo.Context) error {
		if err := s.requireOperator(c, prefix); err != nil {
			return err
		}
		h.ServeHTTP(c.Response(), c.Request())
		return nil
	}
	for _, path := range []string{prefix, prefix + "/*"} {
		s.e.Any(path, serve, s.deadline, s.authenticate)
		s.routes[path] = true
	}
}

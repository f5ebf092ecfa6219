package http

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/kumiko-go/kumiko/pipeline"
)

// GET /api/projections: every inline projection and table-backed
// multi-stream projection — name, kind, status (ready, rebuilding, failed),
// cursor, head, lag, lastRebuildAt, lastError — as {"data": […]}, for the
// AdminRole. Projections belong to the app, not to a tenant.
func (s *Server) projections(c echo.Context) error {
	u := userOf(c)
	switch {
	case !u.Authenticated:
		return unauthenticated(pipeline.CodeUnauthenticated, "sign in to list projections", nil)
	case !u.HasRole(s.cfg.AdminRole):
		return newAPIError(pipeline.CodeAccessDenied, "", "listing projections needs the role "+s.cfg.AdminRole)
	}
	list, err := s.d.ProjectionStatuses(c.Request().Context())
	if err != nil {
		return pipeline.AsError(err)
	}
	return respond(c, http.StatusOK, data{list})
}

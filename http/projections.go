package http

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/kumiko-go/kumiko/pipeline"
)

// GET /api/projections: every inline projection and table-backed
// multi-stream projection — name, kind, status (ready, rebuilding, failed),
// cursor, head, lag, lastRebuildAt, lastError — as {"data": […]}, for the
// OperatorRole. Projections belong to the app, not to a tenant.
func (s *Server) projections(c echo.Context) error {
	if err := s.requireOperator(c, "the projections"); err != nil {
		return err
	}
	list, err := s.d.ProjectionStatuses(c.Request().Context())
	if err != nil {
		return pipeline.AsError(err)
	}
	return respond(c, http.StatusOK, data{list})
}

package http

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/kumiko-go/kumiko/pipeline"
)

// GET /api/consumers: every consumer shard of the async event dispatcher —
// name, instanceId, cursor, head, lagEvents, lagSeconds, status, attempts,
// lastError, updatedAt — as {"data": […]}, for the AdminRole. Consumer state
// belongs to the app, not to a tenant: an admin of any tenant sees all of it.
func (s *Server) consumers(c echo.Context) error {
	u := userOf(c)
	switch {
	case !u.Authenticated:
		return unauthenticated(pipeline.CodeUnauthenticated, "sign in to list consumers", nil)
	case !u.HasRole(s.cfg.AdminRole):
		return newAPIError(pipeline.CodeAccessDenied, "", "listing consumers needs the role "+s.cfg.AdminRole)
	}
	// ConsumerOps holds nothing but the store and its statements: building it
	// per request costs nothing worth caching.
	list, err := pipeline.NewConsumerOps(s.store).List(c.Request().Context())
	if err != nil {
		return pipeline.AsError(err)
	}
	return respond(c, http.StatusOK, data{list})
}

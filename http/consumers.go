package http

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/kumiko-go/kumiko/consumer"
	"github.com/kumiko-go/kumiko/pipeline"
)

// GET /api/consumers: every consumer shard of the async event dispatcher —
// name, instanceId, cursor, head, lagEvents, lagSeconds, status (idle,
// catching_up, stuck, dead, disabled or expired), expiredUpTo, liveness (of
// a per-instance shard's process: live, stale or unknown), lastSeen,
// attempts, lastError, gapWaitSeconds, gapBackends, updatedAt, and for a
// stuck shard stuckSince, stuckSeconds, stuckEventId and stuckInstanceId
// (see consumer.ShardStatus) — as {"data": […]},
// for the OperatorRole. Consumer state belongs to the app, not to a tenant:
// a tenant's admin does not see it.
func (s *Server) consumers(c echo.Context) error {
	if err := s.requireOperator(c, "the consumers"); err != nil {
		return err
	}
	// consumer.Ops holds nothing but the store and its statements: building it
	// per request costs nothing worth caching.
	list, err := consumer.NewOps(s.store).List(c.Request().Context())
	if err != nil {
		return pipeline.AsError(err)
	}
	return respond(c, http.StatusOK, data{list})
}

package http

import (
	"context"
	"net/http"
	"net/url"

	"github.com/labstack/echo/v4"

	"github.com/kumiko-go/kumiko/consumer"
	"github.com/kumiko-go/kumiko/pipeline"
)

// GET /api/consumers: every consumer shard of the async event dispatcher —
// name, instanceId, cursor, head, lagEvents, lagSeconds, status (idle,
// catching_up, stuck, dead, disabled or expired), expiredUpTo, liveness (of
// a per-instance shard's process: live, stale or unknown), lastSeen,
// attempts, lastError, gapWaitSeconds, gapBackends, updatedAt, for a
// stuck shard stuckSince, stuckSeconds, stuckEventId and stuckInstanceId,
// for a partition partition, partitions and owner, and the parked streams'
// count parked (see consumer.ShardStatus) — as {"data": […]},
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

// GET /api/consumers/parked: the parked streams of every consumer — name,
// shard, stream, eventId, eventType, lastError, attempts, since and the
// action an operator asked for ("retry", "skip" or "") (see
// consumer.ParkedStream) — as {"data": […]}, for the OperatorRole.
func (s *Server) parkedStreams(c echo.Context) error {
	if err := s.requireOperator(c, "the parked streams"); err != nil {
		return err
	}
	list, err := consumer.NewOps(s.store).Parked(c.Request().Context(), "")
	if err != nil {
		return pipeline.AsError(err)
	}
	return respond(c, http.StatusOK, data{list})
}

// POST /api/consumers/{name}/parked/{stream}/retry and …/skip: asks for the
// parked stream to be retried from its failing event, or for that event to
// be skipped; the next pass of the stream's shard carries it out, in
// whichever process passes it. 202 {"data": the parked stream with its
// action}; a stream not parked is 404 stream_not_parked. For the
// OperatorRole.
func (s *Server) parkedAction(act func(o *consumer.Ops, ctx context.Context, name, stream string) (consumer.ParkedStream, error)) echo.HandlerFunc {
	return func(c echo.Context) error {
		if err := s.requireOperator(c, "the parked streams"); err != nil {
			return err
		}
		name, err := pathParam(c, "name")
		if err != nil {
			return err
		}
		stream, err := pathParam(c, "stream")
		if err != nil {
			return err
		}
		p, err := act(consumer.NewOps(s.store), c.Request().Context(), name, stream)
		if err != nil {
			return pipeline.AsError(err)
		}
		return respond(c, http.StatusAccepted, data{p})
	}
}

// pathParam is the path parameter name of c's route, unescaped: Echo routes
// on the raw path when it has escapes that the decoded one would lose (a
// stream key with a "/" sent as %2F), and then hands its parameters over
// escaped.
func pathParam(c echo.Context, name string) (string, error) {
	v := c.Param(name)
	if c.Request().URL.RawPath == "" {
		return v, nil
	}
	v, err := url.PathUnescape(v)
	if err != nil {
		return "", newAPIError(pipeline.CodeValidation, "", "the path parameter "+name+" is not a valid path segment")
	}
	return v, nil
}

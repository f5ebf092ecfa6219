package http

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/kumiko-go/kumiko/kumikotype"
	"github.com/kumiko-go/kumiko/pipeline"
	"github.com/kumiko-go/kumiko/registry"
)

// data is the body of a successful API response.
type data struct {
	Data any `json:"data"`
}

// respond writes v as JSON with status.
func respond(c echo.Context, status int, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode response: %w", err)
	}
	return c.Blob(status, contentTypeJSON, b)
}

// POST /api/write: {"type","payload"} → 200 {"data": row}.
func (s *Server) write(c echo.Context) error {
	req, err := requestOf(c)
	if err != nil {
		return err
	}
	out, err := s.d.Write(c.Request().Context(), callerOf(c), req)
	if err != nil {
		return err
	}
	return respond(c, http.StatusOK, data{out})
}

// POST /api/batch: {"commands":[…]} → 200 {"data": [result, …]}.
func (s *Server) batch(c echo.Context) error {
	reqs, err := requestsOf(c)
	if err != nil {
		return err
	}
	out, err := s.d.Batch(c.Request().Context(), callerOf(c), reqs)
	if err != nil {
		return err
	}
	return respond(c, http.StatusOK, data{out})
}

// POST /api/query: {"type","payload"} → 200 {"data": …} ({"data": null}
// for the detail of a missing or foreign row).
func (s *Server) query(c echo.Context) error {
	req, err := requestOf(c)
	if err != nil {
		return err
	}
	out, err := s.d.Query(c.Request().Context(), callerOf(c), req)
	if err != nil {
		return err
	}
	return respond(c, http.StatusOK, data{out})
}

// POST /api/command: {"type","payload"} → 200 {"data": the handler's
// result}, once the command has committed.
func (s *Server) command(c echo.Context) error {
	req, err := requestOf(c)
	if err != nil {
		return err
	}
	out, err := s.d.Command(c.Request().Context(), callerOf(c), req)
	if err != nil {
		return err
	}
	return respond(c, http.StatusOK, data{out})
}

// GET /api/inspect/:aggregateType/:id: the stream's timeline, for the
// AdminRole, confined to the caller's tenant. Another tenant's stream, a
// stream of another type and a missing stream all answer 404.
func (s *Server) inspect(c echo.Context) error {
	u := userOf(c)
	switch {
	case !u.Authenticated:
		return unauthenticated("", "sign in to inspect streams", nil)
	case !u.HasRole(s.cfg.AdminRole):
		return newAPIError(pipeline.CodeAccessDenied, "", "inspecting streams needs the role "+s.cfg.AdminRole)
	}
	typ := c.Param("aggregateType")
	id, err := uuid.Parse(c.Param("id"))
	if err != nil || id == uuid.Nil {
		return invalidInput(kumikotype.ReasonInvalidID, "the id must be a non-nil UUID",
			registry.FieldError{Path: "id", Code: string(kumikotype.FieldCodeType), Message: "must be a non-nil UUID"})
	}
	out, err := pipeline.Inspect(c.Request().Context(), s.store, u.TenantID, typ, id, time.Time{})
	if err != nil {
		return pipeline.AsError(err)
	}
	return respond(c, http.StatusOK, data{out})
}

// GET /healthz: 200 while the process serves.
func (s *Server) healthz(c echo.Context) error {
	return respond(c, http.StatusOK, map[string]string{"status": "ok"})
}

// GET /readyz: 200 when Ready passes, 503 unavailable (not_ready) while it
// fails.
func (s *Server) readyz(c echo.Context) error {
	if s.cfg.Ready != nil {
		ctx, cancel := context.WithTimeout(c.Request().Context(), readyTimeout)
		defer cancel()
		if err := s.cfg.Ready(ctx); err != nil {
			return newAPIError(pipeline.CodeUnavailable, kumikotype.ReasonNotReady, "the service is not ready; retry later").WithCause(err)
		}
	}
	return respond(c, http.StatusOK, map[string]string{"status": "ready"})
}

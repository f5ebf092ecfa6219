package http

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/kumiko-go/kumiko/eventstore"
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

// POST /api/command: {"type","payload"} → 202 {"ok": true}.
func (s *Server) command(c echo.Context) error {
	req, err := requestOf(c)
	if err != nil {
		return err
	}
	if _, err := s.d.Command(c.Request().Context(), callerOf(c), req); err != nil {
		return err
	}
	return respond(c, http.StatusAccepted, map[string]bool{"ok": true})
}

// timeline is the inspect answer: a stream with every event, archived or
// not, as stored and as read.
type timeline struct {
	AggregateID   uuid.UUID       `json:"aggregateId"`
	AggregateType string          `json:"aggregateType"`
	Version       int             `json:"version"`
	Archived      bool            `json:"archived"`
	Events        []timelineEvent `json:"events"`
}

type timelineEvent struct {
	ID      int64  `json:"id"`
	Version int    `json:"version"`
	Type    string `json:"type"`
	// EventVersion and Payload are upcast to the current version;
	// StoredEventVersion and RawPayload are the row as written.
	EventVersion       int                 `json:"eventVersion"`
	Payload            json.RawMessage     `json:"payload"`
	StoredEventVersion int                 `json:"storedEventVersion"`
	RawPayload         json.RawMessage     `json:"rawPayload"`
	Metadata           eventstore.Metadata `json:"metadata"`
	CreatedAt          time.Time           `json:"createdAt"`
	CreatedBy          string              `json:"createdBy"`
}

// GET /api/inspect/:aggregateType/:id: the stream's timeline, for the
// AdminRole, confined to the caller's tenant. Another tenant's stream, a
// stream of another type and a missing stream all answer 404.
func (s *Server) inspect(c echo.Context) error {
	u := userOf(c)
	switch {
	case !u.Authenticated:
		return unauthenticated(pipeline.CodeUnauthenticated, "sign in to inspect streams", nil)
	case !u.HasRole(s.cfg.AdminRole):
		return newAPIError(pipeline.CodeAccessDenied, "", "inspecting streams needs the role "+s.cfg.AdminRole)
	}
	typ := c.Param("aggregateType")
	id, err := uuid.Parse(c.Param("id"))
	if err != nil || id == uuid.Nil {
		return invalidInput("invalid_id", "the id must be a non-nil UUID",
			registry.FieldError{Path: "id", Code: "type", Message: "must be a non-nil UUID"})
	}
	ctx := c.Request().Context()
	evs, err := s.store.Load(ctx, u.TenantID, id, eventstore.LoadOptions{IncludeArchived: true})
	if err != nil {
		return pipeline.AsError(err)
	}
	if len(evs) == 0 || evs[0].AggregateType != typ {
		return newAPIError(pipeline.CodeNotFound, "aggregate_not_found", fmt.Sprintf("no %s %s", typ, id))
	}
	info, err := s.store.StreamInfo(ctx, u.TenantID, id)
	if err != nil {
		return pipeline.AsError(err)
	}
	out := timeline{
		AggregateID: id, AggregateType: typ, Version: evs[len(evs)-1].Version, Archived: info.Archived,
		Events: make([]timelineEvent, len(evs)),
	}
	for i, e := range evs {
		out.Events[i] = timelineEvent{
			ID: e.ID, Version: e.Version, Type: e.Type,
			EventVersion: e.EventVersion, Payload: e.Payload,
			StoredEventVersion: e.StoredEventVersion, RawPayload: e.StoredPayload,
			Metadata: e.Metadata, CreatedAt: e.CreatedAt, CreatedBy: e.CreatedBy,
		}
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
			return newAPIError(pipeline.CodeUnavailable, "not_ready", "the service is not ready; retry later").withCause(err)
		}
	}
	return respond(c, http.StatusOK, map[string]string{"status": "ready"})
}

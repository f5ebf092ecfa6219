package pipeline

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"time"

	"github.com/google/uuid"

	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/kumikotype"
)

// Timeline is a stream's history as an operator inspects it: every event,
// upcast and as stored, with its metadata.
type Timeline struct {
	AggregateID   uuid.UUID       `json:"aggregateId"`
	AggregateType string          `json:"aggregateType"`
	TenantID      uuid.UUID       `json:"tenantId"`
	Version       int             `json:"version"`
	Archived      bool            `json:"archived"`
	Events        []TimelineEvent `json:"events"`
}

// TimelineEvent is one event of a Timeline. EventVersion and Payload are
// upcast to the current version; StoredEventVersion and RawPayload are the
// row as written.
type TimelineEvent struct {
	ID                 int64               `json:"id"`
	Version            int                 `json:"version"`
	Type               string              `json:"type"`
	EventVersion       int                 `json:"eventVersion"`
	Payload            json.RawMessage     `json:"payload"`
	StoredEventVersion int                 `json:"storedEventVersion"`
	RawPayload         json.RawMessage     `json:"rawPayload"`
	Metadata           eventstore.Metadata `json:"metadata"`
	CreatedAt          time.Time           `json:"createdAt"`
	CreatedBy          string              `json:"createdBy"`
}

// Inspect reads the tenant's stream of aggregateType, archived or not, up to
// asOf (zero = now). A missing stream, another tenant's and one of another
// aggregate type all answer not_found (aggregate_not_found).
func Inspect(ctx context.Context, store *eventstore.Store, tenant uuid.UUID, aggregateType string, id uuid.UUID, asOf time.Time) (Timeline, error) {
	evs, err := store.Load(ctx, tenant, id, eventstore.LoadOptions{IncludeArchived: true, AsOf: asOf})
	if err != nil {
		return Timeline{}, err
	}
	if len(evs) == 0 || evs[0].AggregateType != aggregateType {
		if !asOf.IsZero() {
			return Timeline{}, notFoundf(kumikotype.ReasonAggregateNotFound, "no %s %s as of %s", aggregateType, id, asOf.Format(time.RFC3339))
		}
		return Timeline{}, notFoundf(kumikotype.ReasonAggregateNotFound, "no %s %s", aggregateType, id)
	}
	info, err := store.StreamInfo(ctx, tenant, id)
	if err != nil {
		return Timeline{}, err
	}
	out := Timeline{
		AggregateID: id, AggregateType: aggregateType, TenantID: tenant, Version: evs[len(evs)-1].Version,
		Archived: info.Archived, Events: make([]TimelineEvent, len(evs)),
	}
	for i, e := range evs {
		out.Events[i] = TimelineEvent{
			ID: e.ID, Version: e.Version, Type: e.Type,
			EventVersion: e.EventVersion, Payload: e.Payload,
			StoredEventVersion: e.StoredEventVersion, RawPayload: e.StoredPayload,
			Metadata: e.Metadata, CreatedAt: e.CreatedAt, CreatedBy: e.CreatedBy,
		}
	}
	return out, nil
}

// States is the state of tl's aggregate after each of its events, as an
// entity's detail would show it at that version (nil entries where it did
// not exist, or was deleted); nil when the aggregate type is not an entity
// of the app, whose streams have events but no state the framework keeps.
func (d *Executor) States(tl Timeline) ([]map[string]any, error) {
	t := d.proj.Entity(tl.AggregateType)
	if t == nil {
		return nil, nil
	}
	out := make([]map[string]any, len(tl.Events))
	var state map[string]any
	for i, e := range tl.Events {
		ev := eventstore.Event{ID: e.ID, AggregateID: tl.AggregateID, AggregateType: tl.AggregateType, TenantID: tl.TenantID,
			Version: e.Version, Type: e.Type, EventVersion: e.EventVersion, Payload: e.Payload, CreatedAt: e.CreatedAt}
		var err error
		if state, err = t.Fold(state, []eventstore.Event{ev}); err != nil {
			return nil, fmt.Errorf("state of %s %s at version %d: %w", tl.AggregateType, tl.AggregateID, e.Version, err)
		}
		out[i] = maps.Clone(state)
	}
	return out, nil
}

package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/internal/projection"
	"github.com/kumiko-go/kumiko/registry"
)

// commandContext is the feature.CommandContext of one request.
type commandContext struct {
	ctx     context.Context
	tx      pgx.Tx
	d       *Executor
	c       *Caller
	feature string
	// causation is the id of the event being applied, for events a
	// consumer appends in reaction; "" in requests.
	causation string
	// source is the stream of the event being applied (see StreamKey),
	// the ordering key of what is published in reaction; "" in requests.
	source string
	// handler is the command or query a request runs, whose caller's field
	// rules apply to what it appends and reads; "" for the system's own
	// code (multi-stream projections, jobs, integration handlers).
	handler string
	// refused is the field write the handler tried and was refused: it
	// fails the command even when the handler goes on.
	refused *Error
	// read are the streams loaded whole in this transaction: their events
	// were upcast, so an append to them needs no check of unknown versions.
	read map[uuid.UUID]bool
}

var _ feature.CommandContext = (*commandContext)(nil)

func (d *Executor) newCommandContext(ctx context.Context, tx pgx.Tx, c *Caller, h registry.Handler) *commandContext {
	return &commandContext{ctx: ctx, tx: tx, d: d, c: c, feature: h.Feature, handler: h.Name}
}

func (cc *commandContext) Context() context.Context { return cc.ctx }
func (cc *commandContext) DB() feature.DB           { return cc.tx }
func (cc *commandContext) User() feature.User       { return cc.c.User }
func (cc *commandContext) Tenant() uuid.UUID        { return cc.c.User.TenantID }
func (cc *commandContext) RequestID() string        { return cc.c.RequestID }
func (cc *commandContext) CorrelationID() string    { return cc.c.CorrelationID }

// tenantFor is the tenant of aggregateType's streams: the system tenant for
// system-stream entities, the caller's otherwise.
func (cc *commandContext) tenantFor(aggregateType string) uuid.UUID {
	return cc.d.tenantOf(cc.d.proj.Entity(aggregateType), cc.c)
}

func (cc *commandContext) LoadAggregate(id uuid.UUID, aggregateType string, opts feature.LoadOptions) (feature.Aggregate, error) {
	if opts.Version > math.MaxInt32 {
		opts.Version = 0 // past the integer version column: no stream is that long
	}
	ctx, span := cc.d.tracer.Start(cc.ctx, "load", trace.WithAttributes(attribute.String("kumiko.aggregate_type", aggregateType)))
	evs, err := cc.d.store.LoadTx(ctx, cc.tx, cc.tenantFor(aggregateType), id,
		eventstore.LoadOptions{AsOf: opts.AsOf, UpToVersion: opts.Version})
	span.SetAttributes(attribute.Int("kumiko.events", len(evs)))
	endSpan(span, err)
	if err != nil {
		return nil, err
	}
	cc.d.metrics.load(aggregateType, len(evs))
	if opts == (feature.LoadOptions{}) {
		if cc.read == nil {
			cc.read = map[uuid.UUID]bool{}
		}
		cc.read[id] = true
	}
	return cc.newAggregate(id, aggregateType, nil, evs)
}

func (cc *commandContext) FetchForWriting(id uuid.UUID, aggregateType string, expectedVersion int) (feature.Aggregate, error) {
	agg, err := cc.LoadAggregate(id, aggregateType, feature.LoadOptions{})
	if err != nil {
		return nil, err
	}
	switch v := agg.Version(); {
	case expectedVersion == feature.AnyVersion:
	case v == 0 && expectedVersion > 0:
		archived, err := cc.IsStreamArchived(id)
		if err != nil {
			return nil, err
		}
		if archived {
			return nil, fmt.Errorf("%w: %s", eventstore.ErrStreamArchived, id)
		}
		return nil, fmt.Errorf("%w: %s", eventstore.ErrAggregateNotFound, id)
	case v != expectedVersion:
		return nil, &eventstore.VersionConflictError{AggregateID: id, Expected: expectedVersion, Current: v}
	}
	return agg, nil
}

func (cc *commandContext) LoadAggregateWithSnapshot(id uuid.UUID, aggregateType string, snapshotVersion int) (feature.Snapshot, feature.Aggregate, error) {
	ctx, span := cc.d.tracer.Start(cc.ctx, "load", trace.WithAttributes(attribute.String("kumiko.aggregate_type", aggregateType)))
	snap, evs, err := cc.d.store.LoadWithSnapshotTx(ctx, cc.tx, cc.tenantFor(aggregateType), id, snapshotVersion, eventstore.LoadOptions{})
	span.SetAttributes(attribute.Int("kumiko.events", len(evs)))
	endSpan(span, err)
	if err != nil {
		return feature.Snapshot{}, nil, err
	}
	cc.d.metrics.load(aggregateType, len(evs))
	var fs feature.Snapshot
	if snap != nil {
		if snap.AggregateType != aggregateType {
			return feature.Snapshot{}, cc.emptyAggregate(id, aggregateType), nil
		}
		fs = feature.Snapshot{Version: snap.Version, State: snap.State, SnapshotVersion: snap.SnapshotVersion, CreatedAt: snap.CreatedAt}
	}
	agg, err := cc.newAggregate(id, aggregateType, snap, evs)
	return fs, agg, err
}

func (cc *commandContext) SnapshotAggregate(spec feature.SnapshotSpec) error {
	tenant := cc.tenantFor(spec.AggregateType)
	t := cc.d.proj.Entity(spec.AggregateType)
	if spec.State == nil {
		if t == nil {
			return fmt.Errorf("snapshot %s: State is required for %s, which is not an entity", spec.AggregateID, spec.AggregateType)
		}
		evs, err := cc.d.store.LoadTx(cc.ctx, cc.tx, tenant, spec.AggregateID, eventstore.LoadOptions{UpToVersion: spec.Version})
		if err != nil {
			return err
		}
		if spec.State, err = t.Fold(nil, evs); err != nil {
			return err
		}
	}
	raw, err := json.Marshal(spec.State)
	if err != nil {
		return fmt.Errorf("snapshot %s: %w", spec.AggregateID, err)
	}
	personal := spec.Personal
	if t != nil {
		// An entity's state holds its personal fields: sealed as its
		// events' are.
		var state map[string]any
		_ = json.Unmarshal(raw, &state)
		personal = entityPersonal(t.Definition(), state)
	}
	return cc.d.saveSnapshot(cc.ctx, cc.tx, eventstore.Snapshot{
		TenantID: tenant, AggregateID: spec.AggregateID, AggregateType: spec.AggregateType,
		Version: spec.Version, State: raw, SnapshotVersion: spec.SnapshotVersion, Personal: personal,
	})
}

func (cc *commandContext) AppendEvent(spec feature.AppendSpec) (feature.EventRef, error) {
	ev, err := cc.appendSpec(cc.tx, spec)
	if err != nil {
		return feature.EventRef{}, err
	}
	return eventRef(ev), nil
}

func (cc *commandContext) TryAppendEvent(spec feature.AppendSpec) (feature.EventRef, bool, error) {
	sp, err := cc.tx.Begin(cc.ctx) // a savepoint: losing the race must not abort the request
	if err != nil {
		return feature.EventRef{}, false, err
	}
	ev, err := cc.appendSpec(sp, spec)
	if errors.Is(err, eventstore.ErrVersionConflict) {
		if rbErr := sp.Rollback(cc.ctx); rbErr != nil {
			return feature.EventRef{}, false, rbErr
		}
		return feature.EventRef{}, false, nil
	}
	if err != nil {
		_ = sp.Rollback(cc.ctx)
		return feature.EventRef{}, false, err
	}
	if err := sp.Commit(cc.ctx); err != nil {
		return feature.EventRef{}, false, err
	}
	return eventRef(ev), true, nil
}

func (cc *commandContext) QueryProjection(name string) feature.ProjectionQuery {
	return cc.d.proj.Query(cc.ctx, cc.tx, cc.c.User, name, cc.handler != "")
}

func (cc *commandContext) Search(name string, req feature.SearchRequest) (feature.SearchResults, error) {
	payload, err := json.Marshal(req)
	if err != nil {
		return feature.SearchResults{}, err
	}
	out, err := cc.d.Query(cc.ctx, *cc.c, Request{Type: registry.VerbSearch.HandlerName(name), Payload: payload})
	if err != nil {
		return feature.SearchResults{}, err
	}
	res, ok := out.(feature.SearchResults)
	if !ok {
		return feature.SearchResults{}, fmt.Errorf("%s is not a search", name)
	}
	return res, nil
}

func (cc *commandContext) ArchiveStream(id uuid.UUID, reason string) error {
	return cc.d.store.ArchiveTx(cc.ctx, cc.tx, cc.c.User.TenantID, id, cc.c.User.ID, reason)
}

func (cc *commandContext) RestoreStream(id uuid.UUID) error {
	return cc.d.store.RestoreTx(cc.ctx, cc.tx, cc.c.User.TenantID, id)
}

func (cc *commandContext) IsStreamArchived(id uuid.UUID) (bool, error) {
	return cc.d.store.IsArchivedTx(cc.ctx, cc.tx, cc.c.User.TenantID, id)
}

func eventRef(ev eventstore.Event) feature.EventRef {
	return feature.EventRef{ID: ev.ID, AggregateID: ev.AggregateID, Version: ev.Version, Type: ev.Type, EventVersion: ev.EventVersion}
}

// aggregate is a loaded stream.
type aggregate struct {
	cc      *commandContext
	id      uuid.UUID
	typ     string
	version int
	events  []feature.Event
	state   map[string]any
	entity  *projection.Entity
}

func (cc *commandContext) emptyAggregate(id uuid.UUID, typ string) *aggregate {
	return &aggregate{cc: cc, id: id, typ: typ, entity: cc.d.proj.Entity(typ)}
}

// newAggregate builds an aggregate from an optional snapshot and the events
// after it. Events of another aggregate type mean the id is not a stream of
// this type: the aggregate is empty.
func (cc *commandContext) newAggregate(id uuid.UUID, typ string, snap *eventstore.Snapshot, evs []eventstore.Event) (*aggregate, error) {
	a := cc.emptyAggregate(id, typ)
	if len(evs) > 0 && evs[0].AggregateType != typ {
		return a, nil
	}
	if snap != nil {
		a.version = snap.Version
		if a.entity != nil {
			if err := json.Unmarshal(snap.State, &a.state); err != nil {
				return nil, fmt.Errorf("snapshot of %s: %w", id, err)
			}
		}
	}
	for _, e := range evs {
		a.events = append(a.events, e)
		a.version = e.Version
	}
	if a.entity != nil {
		var err error
		if a.state, err = a.entity.Fold(a.state, evs); err != nil {
			return nil, err
		}
	}
	return a, nil
}

func (a *aggregate) ID() uuid.UUID           { return a.id }
func (a *aggregate) Type() string            { return a.typ }
func (a *aggregate) Version() int            { return a.version }
func (a *aggregate) Events() []feature.Event { return slices.Clone(a.events) }

func (a *aggregate) State() map[string]any {
	if a.state == nil {
		return nil
	}
	out := make(map[string]any, len(a.state))
	for k, v := range a.state {
		out[k] = v
	}
	return out
}

func (a *aggregate) Append(eventType string, payload any) error {
	ev, err := a.cc.appendSpec(a.cc.tx, feature.AppendSpec{
		AggregateID: a.id, AggregateType: a.typ, Type: eventType, Payload: payload, ExpectedVersion: a.version,
	})
	if err != nil {
		return err
	}
	// Keep the aggregate current, so a second Append expects the new version.
	if a.entity != nil {
		if a.state, err = a.entity.Fold(a.state, []eventstore.Event{ev}); err != nil {
			return err
		}
	}
	a.events = append(a.events, ev)
	a.version = ev.Version
	return nil
}

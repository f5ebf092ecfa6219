package pipeline

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/internal/projection"
	"github.com/kumiko-go/kumiko/kumikotype"
	"github.com/kumiko-go/kumiko/registry"
)

// crud executes a generated CRUD write: one event on the entity's stream,
// applied to its read row and inline projections in the same transaction.
func (d *Executor) crud(ctx context.Context, tx pgx.Tx, c *Caller, h registry.Handler, in any) (any, error) {
	t := d.proj.Entity(h.Entity)
	stream := eventstore.Stream{TenantID: d.tenantOf(t, c), AggregateType: h.Entity}
	var (
		expected int
		payload  any = map[string]any{}
	)
	switch h.Verb {
	case registry.VerbCreate:
		in := in.(registry.CreateInput)
		stream.AggregateID, payload = in.ID, in.Fields
	case registry.VerbUpdate:
		in := in.(registry.UpdateInput)
		stream.AggregateID, expected, payload = in.ID, in.Version, in.Changes
	case registry.VerbDelete, registry.VerbRestore:
		// The row lock orders concurrent deletes and restores; the version
		// read under it is the stream's, since every event moves it. A
		// version the client sent is checked by the append instead, like an
		// update's.
		in := in.(registry.IDInput)
		stream.AggregateID = in.ID
		v, err := t.LockRow(ctx, tx, stream.AggregateID, stream.TenantID, h.Verb == registry.VerbRestore)
		if err != nil {
			return nil, err
		}
		expected = cmp.Or(in.Version, v)
	default:
		return nil, fmt.Errorf("crud: verb %q is not a write", h.Verb)
	}
	raw, err := json.Marshal(payload)
	if err != nil {
		return nil, err
	}
	fields, _ := payload.(map[string]any) // the codec's normalised values: what decoding raw gives
	ev, row, err := d.appendValid(ctx, tx, c, stream, expected, h.Verb.EventType(h.Entity), raw, fields, "", nil, false)
	if err != nil {
		return nil, err
	}
	if h.Verb == registry.VerbDelete && !t.SoftDelete() {
		// The row is gone: what is left is the stream, at the delete
		// event's version.
		return map[string]any{"id": ev.AggregateID.String(), "version": ev.Version}, nil
	}
	if row == nil {
		// An update of a deleted entity: the stream exists, the row does not.
		return nil, notFoundf(kumikotype.ReasonAggregateNotFound, "no %s %s", h.Entity, stream.AggregateID)
	}
	return t.Visible(row, c.User), nil
}

// appendSpec validates an event a handler or consumer appends and writes it
// in db: the event must be one the feature may emit, its payload must pass
// the event's validation, and a command may only set the entity fields its
// caller may write (see checkAuthoring); otherwise nothing is written.
func (cc *commandContext) appendSpec(db pgx.Tx, spec feature.AppendSpec) (eventstore.Event, error) {
	d := cc.d
	et, ok := d.reg.Event(spec.Type)
	switch {
	case !ok:
		return eventstore.Event{}, newError(CodeInternal, kumikotype.ReasonUnknownEvent, "internal error",
			fmt.Errorf("feature %s appends undefined event %q", cc.feature, spec.Type))
	case !d.reg.CanEmit(cc.feature, spec.Type):
		return eventstore.Event{}, newError(CodeInternal, kumikotype.ReasonForeignEvent, "internal error",
			fmt.Errorf("feature %s appends event %q of feature %s", cc.feature, spec.Type, et.Feature))
	}
	aggType := spec.AggregateType
	if et.Entity != "" {
		if aggType != "" && aggType != et.Entity {
			return eventstore.Event{}, fmt.Errorf("event %s belongs to %s streams, not %s", spec.Type, et.Entity, aggType)
		}
		aggType = et.Entity
	}
	if aggType == "" {
		return eventstore.Event{}, fmt.Errorf("append %s: AggregateType is empty", spec.Type)
	}
	raw, err := encodeAny(spec.Payload)
	if err != nil {
		return eventstore.Event{}, err
	}
	decoded, err := d.reg.DecodePayload(spec.Type, raw)
	if err != nil {
		return eventstore.Event{}, err
	}
	if err := cc.checkAuthoring(et, raw); err != nil {
		cc.refused = err
		return eventstore.Event{}, err
	}
	if raw, err = json.Marshal(decoded); err != nil {
		return eventstore.Event{}, err
	}
	// An entity's created or updated event decodes to its normalised
	// fields: the row is built from them, as a CRUD write's is.
	fields, _ := decoded.(map[string]any)
	stream := eventstore.Stream{TenantID: cc.tenantFor(aggType), AggregateType: aggType, AggregateID: spec.AggregateID}
	ev, _, err := d.appendValid(cc.ctx, db, cc.c, stream, spec.ExpectedVersion, spec.Type, raw, fields, cc.causation, spec.Headers,
		spec.ExpectedVersion > 0 && cc.read[spec.AggregateID])
	return ev, err
}

// checkAuthoring applies the entity's field write rules to an event a
// command appends. The fields an event changes are the keys of the payload
// raw, as the handler wrote it, of the entity's created or updated event
// that name entity fields: only these two events set fields (every other
// event on an entity stream only moves its version). A field the caller
// may not write is refused unless the field names the running command in
// WrittenBy. The system's own code (handler "") is not checked: it runs as
// the user who caused it, without that user's roles, and what it writes is
// the feature's decision.
func (cc *commandContext) checkAuthoring(et registry.EventType, raw json.RawMessage) *Error {
	t := cc.d.proj.Entity(et.Entity)
	if cc.handler == "" || t == nil || !t.RestrictsWrites() || (et.Verb != registry.VerbCreate && et.Verb != registry.VerbUpdate) {
		return nil
	}
	var keys map[string]json.RawMessage
	_ = json.Unmarshal(raw, &keys) // decoded successfully before
	return t.CheckWrite(cc.c.User, slices.Collect(maps.Keys(keys)), cc.handler)
}

// appendValid appends one validated event and projects it; it returns the
// stored event and, for entity streams, the entity's row afterwards. fields,
// when not nil, is payload as decoded already (a CRUD write's normalised
// fields), so the row is built without decoding it again.
//
// An append to an existing stream is refused with an
// *eventstore.UnknownEventVersionError when the stream holds an event of a
// newer version than the registry's (a newer release wrote it, during a
// rolling deploy): this binary would write over history it cannot read. The
// check travels with the append, no round trip of its own; read reports a
// stream loaded whole in this transaction, whose events the load upcast
// already, so it is not checked again.
func (d *Executor) appendValid(ctx context.Context, tx pgx.Tx, c *Caller, stream eventstore.Stream, expected int, typ string, payload json.RawMessage, fields map[string]any, causation string, headers map[string]string, read bool) (eventstore.Event, map[string]any, error) {
	et, _ := d.reg.Event(typ)
	if expected != 0 && !read && stream.AggregateID != uuid.Nil {
		if err := d.store.RefuseUnknownVersionsTx(ctx, tx, stream.TenantID, stream.AggregateID, d.known); err != nil {
			return eventstore.Event{}, nil, err
		}
	}
	if t := d.proj.Entity(et.Entity); t != nil && t.ChecksReferences() && (et.Verb == registry.VerbCreate || et.Verb == registry.VerbUpdate) {
		if err := d.proj.CheckReferences(ctx, tx, c.User, t, payload, fields); err != nil {
			return eventstore.Event{}, nil, err
		}
	}
	if len(headers) > 0 {
		merged := maps.Clone(c.Headers)
		if merged == nil {
			merged = map[string]string{}
		}
		maps.Copy(merged, headers)
		headers = merged
	} else {
		headers = c.Headers
	}
	headers = withTraceparent(ctx, headers)
	personal, err := d.personalOf(ctx, tx, et, stream, payload, fields)
	if err != nil {
		return eventstore.Event{}, nil, err
	}
	actx, span := d.tracer.Start(ctx, "event.append", trace.WithAttributes(
		attribute.String("kumiko.event_type", typ), attribute.String("kumiko.aggregate_type", stream.AggregateType)))
	start := time.Now()
	res, err := d.store.AppendTx(actx, tx, stream, expected, eventstore.NewEvent{
		Type: typ, EventVersion: et.Version, Payload: payload, Personal: personal,
		Metadata: eventstore.Metadata{
			UserID: c.User.ID, RequestID: c.RequestID, CorrelationID: c.CorrelationID,
			CausationID: causation, IdempotencyKey: c.IdempotencyKey, Headers: headers,
		},
	})
	if err != nil {
		endSpan(span, err)
		return eventstore.Event{}, nil, err
	}
	d.metrics.appendTime.Observe(time.Since(start).Seconds())
	ev := res.Events[0]
	span.SetAttributes(attribute.Int64("kumiko.event_id", ev.ID), attribute.String("kumiko.aggregate_id", ev.AggregateID.String()),
		attribute.Int("kumiko.version", ev.Version))
	span.End()
	c.appended = append(c.appended, ev)
	pctx, pspan := d.tracer.Start(ctx, "project")
	row, err := d.project(pctx, tx, ev, fields)
	endSpan(pspan, err)
	return ev, row, err
}

// project applies a freshly appended event inside its transaction: to the
// entity's read row (and an automatic snapshot every SnapshotEvery events),
// then to every inline projection fed by the stream's aggregate type.
// fields is the event's payload decoded, or nil.
func (d *Executor) project(ctx context.Context, tx pgx.Tx, ev eventstore.Event, fields map[string]any) (map[string]any, error) {
	var row map[string]any
	if t := d.proj.Entity(ev.AggregateType); t != nil {
		var err error
		if row, err = t.ApplyDecoded(ctx, tx, ev, fields); err != nil {
			return nil, t.UniqueViolation(err)
		}
		if every := t.Definition().SnapshotEvery(); every > 0 && ev.Version%every == 0 {
			if err := d.snapshotEntity(ctx, tx, t, ev.TenantID, ev.AggregateID); err != nil {
				return nil, err
			}
		}
	}
	if err := d.proj.ApplyInline(ctx, tx, ev); err != nil {
		return nil, err
	}
	return row, nil
}

// SnapshotEntity folds an entity's stream and stores a snapshot at its head,
// in its own transaction; it returns the snapshot's version. Loads then
// start from it. A missing, foreign or deleted entity answers
// aggregate_not_found.
func (d *Executor) SnapshotEntity(ctx context.Context, tenant uuid.UUID, entity string, id uuid.UUID) (int, error) {
	t := d.proj.Entity(entity)
	if t == nil {
		return 0, notFoundf(kumikotype.ReasonHandlerNotFound, "%s is not an entity", entity)
	}
	if t.Definition().SystemStream() {
		tenant = eventstore.SystemTenant
	}
	var version int
	err := d.store.WithTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		state, v, err := d.loadEntity(ctx, tx, t, tenant, id)
		if err != nil {
			return err
		}
		if state == nil {
			return notFoundf(kumikotype.ReasonAggregateNotFound, "no %s %s", entity, id)
		}
		version = v
		return d.snapshotEntity(ctx, tx, t, tenant, id)
	})
	if err != nil {
		return 0, AsError(err)
	}
	return version, nil
}

// snapshotEntity folds the stream (from its newest snapshot) and stores the
// state as a snapshot at the head.
func (d *Executor) snapshotEntity(ctx context.Context, tx pgx.Tx, t *projection.Entity, tenant, id uuid.UUID) error {
	state, version, err := d.loadEntity(ctx, tx, t, tenant, id)
	if err != nil || state == nil {
		return err
	}
	raw, err := json.Marshal(state)
	if err != nil {
		return err
	}
	return d.saveSnapshot(ctx, tx, eventstore.Snapshot{
		TenantID: tenant, AggregateID: id, AggregateType: t.Definition().Name(),
		Version: version, State: raw, SnapshotVersion: t.Definition().SnapshotVersion(),
		Personal: entityPersonal(t.Definition(), state),
	})
}

// saveSnapshot stores snap in tx and counts it.
func (d *Executor) saveSnapshot(ctx context.Context, tx pgx.Tx, snap eventstore.Snapshot) error {
	if err := d.store.SaveSnapshotTx(ctx, tx, snap); err != nil {
		return err
	}
	d.metrics.snapshots.WithLabelValues(snap.AggregateType).Inc()
	return nil
}

// loadEntity folds an entity stream from its newest snapshot of the current
// generation plus the events after it; the result equals the full fold.
func (d *Executor) loadEntity(ctx context.Context, tx pgx.Tx, t *projection.Entity, tenant, id uuid.UUID) (map[string]any, int, error) {
	lctx, span := d.tracer.Start(ctx, "load", trace.WithAttributes(attribute.String("kumiko.aggregate_type", t.Definition().Name())))
	snap, evs, err := d.store.LoadWithSnapshotTx(lctx, tx, tenant, id, t.Definition().SnapshotVersion(), eventstore.LoadOptions{})
	span.SetAttributes(attribute.Int("kumiko.events", len(evs)))
	endSpan(span, err)
	if err != nil {
		return nil, 0, err
	}
	d.metrics.load(t.Definition().Name(), len(evs))
	var state map[string]any
	version := 0
	if snap != nil {
		if err := json.Unmarshal(snap.State, &state); err != nil {
			return nil, 0, fmt.Errorf("snapshot of %s: %w", id, err)
		}
		version = snap.Version
	}
	if len(evs) > 0 {
		if evs[0].AggregateType != t.Definition().Name() {
			return nil, 0, nil
		}
		version = evs[len(evs)-1].Version
	}
	state, err = t.Fold(state, evs)
	return state, version, err
}

// encodeAny returns v as JSON: a json.RawMessage or []byte as is.
func encodeAny(v any) (json.RawMessage, error) {
	switch x := v.(type) {
	case json.RawMessage:
		return x, nil
	case []byte:
		return x, nil
	case nil:
		return json.RawMessage(`{}`), nil
	}
	return json.Marshal(v)
}

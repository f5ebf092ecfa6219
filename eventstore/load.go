package eventstore

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"math"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// LoadOptions bound a stream read. The zero value reads the whole stream.
type LoadOptions struct {
	// AfterVersion skips events up to and including this version.
	AfterVersion int
	// UpToVersion stops after this version; 0 = no bound.
	UpToVersion int
	// AsOf reads the stream as it was at this time; zero = now.
	AsOf time.Time
	// IncludeArchived reads an archived stream instead of treating it as empty
	// (inspection and restore tooling).
	IncludeArchived bool
}

func (o LoadOptions) args(tenant, id uuid.UUID) []any {
	upTo := o.UpToVersion
	if upTo <= 0 {
		upTo = math.MaxInt32
	}
	var asOf *time.Time
	if !o.AsOf.IsZero() {
		asOf = &o.AsOf
	}
	return []any{[16]byte(id), [16]byte(tenant), o.AfterVersion, upTo, asOf, o.IncludeArchived}
}

// Load reads a tenant's stream in version order, upcast to current event
// versions. A missing stream, another tenant's stream and an archived stream
// all read as no events.
func (s *Store) Load(ctx context.Context, tenant, id uuid.UUID, opts LoadOptions) ([]Event, error) {
	return translated(s.load(ctx, s.pool, tenant, id, opts))
}

// LoadTx is Load inside the caller's transaction: it sees the transaction's
// own uncommitted events.
func (s *Store) LoadTx(ctx context.Context, tx pgx.Tx, tenant, id uuid.UUID, opts LoadOptions) ([]Event, error) {
	return translated(s.load(ctx, tx, tenant, id, opts))
}

func (s *Store) load(ctx context.Context, q querier, tenant, id uuid.UUID, opts LoadOptions) ([]Event, error) {
	rows, err := q.Query(ctx, s.sql.load, opts.args(tenant, id)...)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", id, err)
	}
	evs, err := s.scanEvents(ctx, rows)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", id, err)
	}
	return evs, nil
}

// StreamInfo describes a stream as its tenant sees it.
type StreamInfo struct {
	AggregateID   uuid.UUID
	AggregateType string
	Version       int
	Archived      bool
}

// StreamInfo returns the stream's head. A missing stream and another tenant's
// stream answer ErrAggregateNotFound alike.
func (s *Store) StreamInfo(ctx context.Context, tenant, id uuid.UUID) (StreamInfo, error) {
	return translated(s.streamInfo(ctx, s.pool, tenant, id))
}

// StreamTenant returns the tenant a stream belongs to, looked up across
// tenants: for operator tools given an aggregate id alone (aggregate ids are
// unique across tenants). Request paths never use it; they address streams
// within the caller's tenant. A missing stream answers ErrAggregateNotFound.
func (s *Store) StreamTenant(ctx context.Context, id uuid.UUID) (uuid.UUID, error) {
	h, err := s.head(ctx, s.pool, id)
	if err != nil {
		return uuid.Nil, TranslateError(fmt.Errorf("stream %s: %w", id, err))
	}
	if !h.exists {
		return uuid.Nil, fmt.Errorf("%w: %s", ErrAggregateNotFound, id)
	}
	return h.owner, nil
}

// StreamInfoTx is StreamInfo inside the caller's transaction.
func (s *Store) StreamInfoTx(ctx context.Context, tx pgx.Tx, tenant, id uuid.UUID) (StreamInfo, error) {
	return translated(s.streamInfo(ctx, tx, tenant, id))
}

func (s *Store) streamInfo(ctx context.Context, q querier, tenant, id uuid.UUID) (StreamInfo, error) {
	h, err := s.head(ctx, q, id)
	if err != nil {
		return StreamInfo{}, fmt.Errorf("stream %s: %w", id, err)
	}
	if !h.exists || h.owner != tenant {
		return StreamInfo{}, fmt.Errorf("%w: %s", ErrAggregateNotFound, id)
	}
	return StreamInfo{AggregateID: id, AggregateType: h.aggregateType, Version: h.version, Archived: h.archived}, nil
}

// ReadFilter narrows ReadAll. The zero value reads every event of every tenant.
type ReadFilter struct {
	// TenantID, when set, reads only that tenant's events.
	TenantID uuid.UUID
	// AggregateTypes, when set, reads only these aggregate types.
	AggregateTypes []string
	// Types, when set, reads only these event types.
	Types []string
	// PageSize is the number of events fetched per round trip; default 500.
	PageSize int
}

// ReadAll yields the events after the global position `after` in id order,
// upcast, fetching one page at a time so memory stays bounded however long
// the log is. Iteration stops at the first error, which is yielded.
//
// ReadAll shows what is committed when each page is read. Ids are allocated
// before commit, so an event with a lower id can still appear after a higher
// one was yielded; consumers that must not miss events need the gap handling
// of the event dispatcher, not a bare cursor over ReadAll.
func (s *Store) ReadAll(ctx context.Context, after int64, f ReadFilter) iter.Seq2[Event, error] {
	size := f.PageSize
	if size <= 0 {
		size = 500
	}
	filter := f.args()
	return func(yield func(Event, error) bool) {
		for {
			rows, err := s.pool.Query(ctx, s.sql.readAll, append(append([]any{after}, filter...), size)...)
			if err != nil {
				yield(Event{}, TranslateError(fmt.Errorf("read all after %d: %w", after, err)))
				return
			}
			page, err := s.scanEvents(ctx, rows)
			if err != nil {
				yield(Event{}, TranslateError(fmt.Errorf("read all after %d: %w", after, err)))
				return
			}
			for _, e := range page {
				if !yield(e, nil) {
					return
				}
				after = e.ID
			}
			if len(page) < size {
				return
			}
		}
	}
}

func nilIfEmpty(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return s
}

// scanEvents reads event rows (eventColumns), opens their sealed personal
// fields and upcasts each.
func (s *Store) scanEvents(ctx context.Context, rows pgx.Rows) ([]Event, error) {
	defer rows.Close()
	var evs []Event
	var raw eventRow
	for rows.Next() {
		if len(evs) == cap(evs) {
			evs = slices.Grow(evs, max(len(evs), 16)) // double: long streams copy less
		}
		evs = evs[:len(evs)+1]
		e := &evs[len(evs)-1]
		if err := rows.Scan(raw.dest(e)...); err != nil {
			return nil, err
		}
		e.StoredPayload = json.RawMessage(raw.payload)
		raw.payload = nil
		if raw.personal != nil {
			opened, err := s.openSealed(ctx, e.StoredPayload, raw.personal, raw.keys, eventPlace(e.TenantID, e.AggregateID, e.Version, e.Type))
			if err != nil {
				return nil, fmt.Errorf("event %d personal fields: %w", e.ID, err)
			}
			e.StoredPayload = opened
		}
		if err := decodeMetadata(raw.meta, &e.Metadata); err != nil {
			return nil, fmt.Errorf("event %d metadata: %w", e.ID, err)
		}
		if err := s.upcast(e); err != nil {
			return nil, err
		}
	}
	return evs, rows.Err()
}

// eventRow holds the columns of an event row (eventColumns) that are not
// scanned into the Event itself. The JSON columns scan as bytes: a
// json.RawMessage destination would have pgx validate each payload with
// encoding/json.
type eventRow struct {
	payload, meta, personal, keys []byte
}

// dest is the scan destinations of an event row into e and r.
func (r *eventRow) dest(e *Event) []any {
	return []any{&e.ID, (*[16]byte)(&e.AggregateID), &e.AggregateType, (*[16]byte)(&e.TenantID), &e.Version, &e.Type,
		&e.StoredEventVersion, &r.payload, &r.meta, &e.CreatedAt, &e.CreatedBy, &r.personal, &r.keys}
}

// upcast sets the event's current version and payload from its stored form.
func (s *Store) upcast(e *Event) error {
	e.EventVersion, e.Payload = e.StoredEventVersion, e.StoredPayload
	if s.cfg.Upcaster == nil {
		return nil
	}
	v, p, err := s.cfg.Upcaster.Upcast(e.Type, e.StoredEventVersion, e.StoredPayload)
	if err != nil {
		return fmt.Errorf("event %d (%s v%d): %w", e.ID, e.Type, e.StoredEventVersion, err)
	}
	e.EventVersion, e.Payload = v, p
	return nil
}

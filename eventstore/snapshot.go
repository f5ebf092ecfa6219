package eventstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Snapshot is a cached fold of a stream up to Version. Snapshots are a cache:
// one written with another SnapshotVersion (the reducer generation) is
// ignored, and the state loaded from a snapshot plus the events after it
// always equals the full fold.
type Snapshot struct {
	TenantID        uuid.UUID
	AggregateID     uuid.UUID
	AggregateType   string
	Version         int
	State           json.RawMessage
	SnapshotVersion int
	CreatedAt       time.Time
	// Personal names the state's personal fields (top-level JSON names)
	// and their subjects, as NewEvent.Personal does for a payload: they are
	// stored sealed and read back open while the subject's key exists,
	// null once it is forgotten. Loads leave it nil.
	Personal map[string]string
}

// SaveSnapshot stores a snapshot of the tenant's stream at snap.Version (an
// existing event of that stream; else ErrAggregateNotFound). Saving the same
// version again replaces the state. SnapshotVersion 0 means 1.
func (s *Store) SaveSnapshot(ctx context.Context, snap Snapshot) error {
	return TranslateError(s.saveSnapshot(ctx, s.pool, snap))
}

// SaveSnapshotTx is SaveSnapshot inside the caller's transaction.
func (s *Store) SaveSnapshotTx(ctx context.Context, tx pgx.Tx, snap Snapshot) error {
	return TranslateError(s.saveSnapshot(ctx, tx, snap))
}

func (s *Store) saveSnapshot(ctx context.Context, q querier, snap Snapshot) error {
	if !json.Valid(snap.State) {
		return invalidf("snapshot of %s: state is not JSON", snap.AggregateID)
	}
	state, personal, err := s.sealSnapshot(ctx, q, snap)
	if err != nil {
		return err
	}
	var aggType string
	err = q.QueryRow(ctx, s.sql.saveSnap, snap.AggregateID, snap.TenantID, snap.Version,
		state, max(snap.SnapshotVersion, 1), personal).Scan(&aggType)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%w: %s has no version %d", ErrAggregateNotFound, snap.AggregateID, snap.Version)
	}
	if err != nil {
		return fmt.Errorf("save snapshot %s: %w", snap.AggregateID, err)
	}
	return nil
}

// LoadWithSnapshot reads the newest snapshot of generation snapshotVersion at
// or below opts.UpToVersion and the events after it, in one round trip. It
// returns a nil snapshot when none matches (then the events are the whole
// stream). opts.AsOf is not combined with snapshots: with AsOf set it reads the
// full stream up to that time. Missing, foreign and archived streams read as
// (nil, nil).
func (s *Store) LoadWithSnapshot(ctx context.Context, tenant, id uuid.UUID, snapshotVersion int, opts LoadOptions) (*Snapshot, []Event, error) {
	snap, evs, err := s.loadWithSnapshot(ctx, s.pool, tenant, id, snapshotVersion, opts)
	return snap, evs, TranslateError(err)
}

// LoadWithSnapshotTx is LoadWithSnapshot inside the caller's transaction.
func (s *Store) LoadWithSnapshotTx(ctx context.Context, tx pgx.Tx, tenant, id uuid.UUID, snapshotVersion int, opts LoadOptions) (*Snapshot, []Event, error) {
	snap, evs, err := s.loadWithSnapshot(ctx, tx, tenant, id, snapshotVersion, opts)
	return snap, evs, TranslateError(err)
}

func (s *Store) loadWithSnapshot(ctx context.Context, q querier, tenant, id uuid.UUID, snapshotVersion int, opts LoadOptions) (*Snapshot, []Event, error) {
	if !opts.AsOf.IsZero() || opts.AfterVersion > 0 || opts.IncludeArchived {
		evs, err := s.load(ctx, q, tenant, id, opts)
		return nil, evs, err
	}
	upTo := opts.UpToVersion
	if upTo <= 0 {
		upTo = math.MaxInt32
	}
	snapshotVersion = max(snapshotVersion, 1)
	b := &pgx.Batch{}
	b.Queue(s.sql.loadSnapshot, [16]byte(id), [16]byte(tenant), snapshotVersion, upTo)
	b.Queue(s.sql.loadAfterSnapshot, [16]byte(id), [16]byte(tenant), snapshotVersion, upTo)
	br := q.SendBatch(ctx, b)
	defer br.Close()

	snap := &Snapshot{TenantID: tenant, AggregateID: id}
	var state, personal, keys []byte
	err := br.QueryRow().Scan(&snap.AggregateType, &snap.Version, &state, &snap.SnapshotVersion, &snap.CreatedAt, &personal, &keys)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		snap = nil
	case err != nil:
		return nil, nil, fmt.Errorf("load snapshot %s: %w", id, err)
	default:
		snap.State = state
		if personal != nil {
			if snap.State, err = s.openSealed(ctx, state, personal, keys, snapshotPlace(tenant, id, snap.Version)); err != nil {
				return nil, nil, fmt.Errorf("load snapshot %s: personal fields: %w", id, err)
			}
		}
	}
	rows, err := br.Query()
	if err != nil {
		return nil, nil, fmt.Errorf("load %s after snapshot: %w", id, err)
	}
	evs, err := s.scanEvents(ctx, rows)
	if err != nil {
		return nil, nil, fmt.Errorf("load %s after snapshot: %w", id, err)
	}
	return snap, evs, nil
}

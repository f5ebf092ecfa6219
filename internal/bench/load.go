package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/kumiko-go/kumiko/eventstore"
)

// snapshotEvery is the snapshot cadence of the seeded streams.
const snapshotEvery = 100

// loadRows compares stream loads, with and without snapshots, with the
// equivalent SELECTs scanned into the same Go types. Both sides read the same
// rows of the store's tables. The seeded streams hold 100, 10,000 and 10,099
// events with a snapshot saved every 100 events, so the snapshot loads read
// the snapshot and 0, 0 and 99 events after it.
func (b *bench) loadRows(ctx context.Context) ([]row, error) {
	fmt.Fprintln(os.Stderr, "  seeding streams for loads …")
	ids := map[int]uuid.UUID{}
	for _, n := range []int{100, 10_000, 10_099} {
		id, err := b.seedStream(ctx, n)
		if err != nil {
			return nil, fmt.Errorf("seed %d-event stream: %w", n, err)
		}
		ids[n] = id
	}
	for _, table := range []string{b.fwEvents, b.fwSnaps} {
		if _, err := b.pool.Exec(ctx, "ANALYZE "+table); err != nil {
			return nil, err
		}
	}

	pairs := []pair{
		b.loadPair("load 100 events", ids[100], 100),
		b.loadSnapshotPair("load 100 events, snapshot at 100", ids[100], 100),
		b.loadPair("load 10,000 events", ids[10_000], 10_000),
		b.loadSnapshotPair("load 10,000 events, snapshot at 10,000", ids[10_000], 10_000),
		b.loadSnapshotPair("load 10,099 events, snapshot at 10,000", ids[10_099], 10_099),
	}
	pairs[2].goal = atLeastOfRaw(1 / 1.3) // at most 1.3x the time of the raw read
	var rows []row
	for _, p := range pairs {
		p.unit, p.workers = "loads/s", 1
		r, err := b.compare(ctx, p)
		if err != nil {
			return rows, err
		}
		rows = append(rows, r)
	}

	// Load time of a long stream with snapshots relative to the plain load of
	// a 100-event stream: the time ratio is the inverse rate ratio.
	flat := goal{text: "≤ 2.00x", met: func(fw, _ float64) bool { return fw <= 2 }}
	base := rows[0]
	for i, name := range []string{"load time 10,000+snapshot / 100 events", "load time 10,099+snapshot / 100 events"} {
		long := rows[3+i]
		rows = append(rows, row{name: name, unit: "x", fw: base.fw / long.fw, raw: base.raw / long.raw, goal: flat})
	}
	return rows, nil
}

// seedStream appends n events to a new stream, 100 per append, and saves a
// snapshot every snapshotEvery events.
func (b *bench) seedStream(ctx context.Context, n int) (uuid.UUID, error) {
	st := eventstore.Stream{TenantID: b.tenant, AggregateType: aggType, AggregateID: uuid.Must(uuid.NewV7())}
	ev := benchEvent()
	for version := 0; version < n; {
		chunk := repeat(ev, min(snapshotEvery, n-version))
		res, err := b.store.Append(ctx, st, version, chunk...)
		if err != nil {
			return uuid.Nil, err
		}
		version = res.Version
		if version%snapshotEvery != 0 {
			continue
		}
		state := fmt.Sprintf(`{"title":"write the benchmark","priority":3,"done":false,"tags":["bench","kumiko"],"events":%d}`, version)
		if err := b.store.SaveSnapshot(ctx, eventstore.Snapshot{
			TenantID: b.tenant, AggregateID: st.AggregateID, Version: version, State: json.RawMessage(state),
		}); err != nil {
			return uuid.Nil, err
		}
	}
	return st.AggregateID, nil
}

const eventColumns = `id, aggregate_id, aggregate_type, tenant_id, version, type, event_version, payload, metadata, created_at, created_by`

// loadPair compares Store.Load with a SELECT of the stream's rows.
func (b *bench) loadPair(name string, id uuid.UUID, want int) pair {
	query := `SELECT ` + eventColumns + ` FROM ` + b.fwEvents + ` WHERE aggregate_id = $1 AND tenant_id = $2 ORDER BY version`
	return pair{
		name: name,
		fw: func(ctx context.Context, _ int) (int, error) {
			evs, err := b.store.Load(ctx, b.tenant, id, eventstore.LoadOptions{})
			return 1, expect(err, 0, len(evs), want)
		},
		raw: func(ctx context.Context, _ int) (int, error) {
			rows, err := b.pool.Query(ctx, query, [16]byte(id), [16]byte(b.tenant))
			if err != nil {
				return 0, err
			}
			evs, err := scanEvents(rows)
			return 1, expect(err, 0, len(evs), want)
		},
	}
}

// loadSnapshotPair compares Store.LoadWithSnapshot with the newest snapshot
// and the events after it, read in one round trip as the store does.
func (b *bench) loadSnapshotPair(name string, id uuid.UUID, want int) pair {
	snapQuery := `SELECT aggregate_type, version, state, snapshot_version, created_at FROM ` + b.fwSnaps + `
WHERE aggregate_id = $1 AND tenant_id = $2 AND snapshot_version = 1 ORDER BY version DESC LIMIT 1`
	afterQuery := `SELECT ` + eventColumns + ` FROM ` + b.fwEvents + `
WHERE aggregate_id = $1 AND tenant_id = $2
	AND version > COALESCE((SELECT max(version) FROM ` + b.fwSnaps + ` WHERE aggregate_id = $1 AND tenant_id = $2 AND snapshot_version = 1), 0)
ORDER BY version`
	return pair{
		name: name,
		fw: func(ctx context.Context, _ int) (int, error) {
			snap, evs, err := b.store.LoadWithSnapshot(ctx, b.tenant, id, 1, eventstore.LoadOptions{})
			if err == nil && snap == nil {
				err = fmt.Errorf("stream %s: no snapshot", id)
			}
			if err != nil {
				return 0, err
			}
			return 1, expect(nil, snap.Version, len(evs), want)
		},
		raw: func(ctx context.Context, _ int) (int, error) {
			batch := &pgx.Batch{}
			batch.Queue(snapQuery, [16]byte(id), [16]byte(b.tenant))
			batch.Queue(afterQuery, [16]byte(id), [16]byte(b.tenant))
			br := b.pool.SendBatch(ctx, batch)
			defer br.Close()
			snap := eventstore.Snapshot{TenantID: b.tenant, AggregateID: id}
			var state []byte
			if err := br.QueryRow().Scan(&snap.AggregateType, &snap.Version, &state, &snap.SnapshotVersion, &snap.CreatedAt); err != nil {
				return 0, err
			}
			snap.State = state
			rows, err := br.Query()
			if err != nil {
				return 0, err
			}
			evs, err := scanEvents(rows)
			return 1, expect(err, snap.Version, len(evs), want)
		},
	}
}

// expect checks that a load saw the whole stream: the snapshot's version plus
// the events read after it.
func expect(err error, snapVersion, events, want int) error {
	if err == nil && snapVersion+events != want {
		err = fmt.Errorf("load saw snapshot %d + %d events, want %d", snapVersion, events, want)
	}
	return err
}

// scanEvents scans event rows into the store's Event type as raw bytes: the
// payload as sent by the server, the metadata column read and left undecoded
// (what a hand-written SELECT needs, not what an event store must do).
func scanEvents(rows pgx.Rows) ([]eventstore.Event, error) {
	defer rows.Close()
	var evs []eventstore.Event
	var payload, meta []byte
	for rows.Next() {
		var e eventstore.Event
		if err := rows.Scan(&e.ID, (*[16]byte)(&e.AggregateID), &e.AggregateType, (*[16]byte)(&e.TenantID), &e.Version, &e.Type,
			&e.StoredEventVersion, &payload, &meta, &e.CreatedAt, &e.CreatedBy); err != nil {
			return nil, err
		}
		e.StoredPayload, payload = payload, nil
		e.EventVersion, e.Payload = e.StoredEventVersion, e.StoredPayload
		evs = append(evs, e)
	}
	return evs, rows.Err()
}

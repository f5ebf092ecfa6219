package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kumiko-go/kumiko/eventstore"
)

// The one event shape every append writes, through the store and raw alike.
const (
	aggType      = "bench_task"
	eventType    = "bench_task.created"
	benchUser    = "bench-user"
	benchPayload = `{"title":"write the benchmark","priority":3,"done":false,"tags":["bench","kumiko"]}`
)

func benchEvent() eventstore.NewEvent {
	return eventstore.NewEvent{
		Type:     eventType,
		Payload:  json.RawMessage(benchPayload),
		Metadata: eventstore.Metadata{UserID: benchUser, RequestID: "req-0001", CorrelationID: "corr-0001"},
	}
}

// benchMetadata is the metadata column the store writes for benchEvent.
func benchMetadata() string {
	b, err := json.Marshal(benchEvent().Metadata)
	if err != nil {
		panic(err) // a constant struct of strings
	}
	return string(b)
}

// rawWake is the store's post-commit wake-up done by hand for the raw
// baselines that do an append's whole work: at most one pg_notify in flight
// and one per 2 ms, sent beside the writes.
type rawWake struct {
	pool *pgxpool.Pool
	mu   sync.Mutex
	last time.Time
	busy bool
	wg   sync.WaitGroup
}

func newRawWake(pool *pgxpool.Pool) *rawWake { return &rawWake{pool: pool} }

// committed sends a notification for id unless one is in flight or went out
// less than 2 ms ago.
func (w *rawWake) committed(id int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.busy || time.Since(w.last) < 2*time.Millisecond {
		return
	}
	w.busy, w.last = true, time.Now()
	w.wg.Go(func() {
		_, _ = w.pool.Exec(context.Background(), `SELECT pg_notify($1, $2)`, rawWakeChannel, strconv.FormatInt(id, 10))
		w.mu.Lock()
		w.busy = false
		w.mu.Unlock()
	})
}

// wait waits for the notification in flight.
func (w *rawWake) wait() { w.wg.Wait() }

// rawWakeChannel is the channel of rawWake's notifications.
const rawWakeChannel = "kumiko_bench_raw"

// listenRaw receives rawWake's notifications on a connection of its own, as
// a process with consumers would, until stop is called.
func listenRaw(ctx context.Context, pool *pgxpool.Pool) (stop func(), err error) {
	conn, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig.Copy())
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, `LISTEN `+rawWakeChannel); err != nil {
		return nil, errors.Join(err, conn.Close(ctx))
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			if _, err := conn.WaitForNotification(ctx); err != nil {
				return
			}
		}
	}()
	return func() {
		cancel()
		<-done
		_ = conn.Close(context.Background())
	}, nil
}

// appendRows compares single-event appends with an autocommitted INSERT of
// the same row, to new streams and to existing streams, at 1 and 16 writers;
// each also with the raw insert doing the same work (see appendPair).
func (b *bench) appendRows(ctx context.Context) ([]row, error) {
	wake := newRawWake(b.pool)
	var rows []row
	for _, workers := range []int{1, 16} {
		for _, existing := range []bool{false, true} {
			for _, same := range []bool{false, true} {
				r, err := b.compare(ctx, b.appendPair(workers, existing, same, wake))
				wake.wait()
				if err != nil {
					return rows, err
				}
				rows = append(rows, r)
			}
		}
	}
	return rows, nil
}

// appendPair compares one-event appends, to a new stream each time or to a
// stream each worker owns per side (created by its first append, extended
// with the expected version after that), with the plain insert of the row;
// or, when same, with the insert doing what Append must besides (no target:
// it tells the framework's own cost from that work's): answer the id and
// creation time, check an existing stream's expected version and archive,
// and wake other processes (at most one pg_notify per 2 ms, as the store).
func (b *bench) appendPair(workers int, existing, same bool, wake *rawWake) pair {
	const columns = ` (aggregate_id, aggregate_type, tenant_id, version, type, event_version, payload, metadata, created_by)`
	insert := `INSERT INTO ` + b.rawEvents + columns + `
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`
	checked := `INSERT INTO ` + b.rawEvents + columns + `
SELECT $1, $2, $3, $4, $5, $6, $7::jsonb, $8::jsonb, $9
WHERE EXISTS (SELECT 1 FROM ` + b.rawEvents + ` e WHERE e.aggregate_id = $1 AND e.version = $4 - 1 AND e.tenant_id = $3)
	AND NOT EXISTS (SELECT 1 FROM ` + b.rawArchived + ` a WHERE a.aggregate_id = $1)`
	const returning = `
RETURNING id, created_at`
	ev, meta := benchEvent(), benchMetadata()
	fwStreams, rawStreams := ownStreams(workers), ownStreams(workers)
	// own is the worker's stream of a side; nil for a new stream each time.
	own := func(streams []stream, w int) *stream {
		if !existing {
			return nil
		}
		return &streams[w]
	}
	p := pair{
		name:    "append 1 event/tx, new stream, " + writers(workers),
		unit:    "events/s",
		workers: workers,
		goal:    atLeastOfRaw(0.90), // target: a one-event append ≥ 90 % of raw
		fw: func(ctx context.Context, w int) (int, error) {
			st, expected := eventstore.Stream{TenantID: b.tenant, AggregateType: aggType}, 0
			s := own(fwStreams, w)
			if s != nil {
				st.AggregateID, expected = s.id, s.version
			}
			res, err := b.store.Append(ctx, st, expected, ev)
			if err != nil {
				return 0, err
			}
			if s != nil {
				s.version = res.Version
			}
			return 1, nil
		},
		raw: func(ctx context.Context, w int) (int, error) {
			id, version := uuid.Must(uuid.NewV7()), 1
			s := own(rawStreams, w)
			if s != nil {
				id, version = s.id, s.version+1
			}
			args := []any{[16]byte(id), aggType, [16]byte(b.tenant), version, eventType, 1, benchPayload, meta, benchUser}
			if same {
				stmt := insert + returning
				if version > 1 {
					stmt = checked + returning
				}
				var eventID int64
				var at time.Time
				if err := b.pool.QueryRow(ctx, stmt, args...).Scan(&eventID, &at); err != nil {
					return 0, err
				}
				wake.committed(eventID)
			} else if _, err := b.pool.Exec(ctx, insert, args...); err != nil {
				return 0, err
			}
			if s != nil {
				s.version = version
			}
			return 1, nil
		},
	}
	if existing {
		p.name = "append 1 event/tx, existing stream, " + writers(workers)
	}
	if same {
		p.name, p.goal = p.name+", vs raw + RETURNING + wake-up", goal{}
		if existing {
			p.name = strings.Replace(p.name, "raw +", "raw + check +", 1)
		}
	}
	return p
}

func writers(n int) string {
	if n == 1 {
		return "1 writer"
	}
	return fmt.Sprintf("%d writers", n)
}

// stream is a stream a worker appends to, and the version it is at.
type stream struct {
	id      uuid.UUID
	version int
}

func ownStreams(n int) []stream {
	s := make([]stream, n)
	for i := range s {
		s[i].id = uuid.Must(uuid.NewV7())
	}
	return s
}

// batchRows compares 100-event appends (one stream, and 100 new streams of
// one event) with one multi-row INSERT … SELECT FROM unnest of the same rows.
func (b *bench) batchRows(ctx context.Context) ([]row, error) {
	const n = 100
	from := `INSERT INTO ` + b.rawEvents + ` (aggregate_id, aggregate_type, tenant_id, version, type, event_version, payload, metadata, created_by)
SELECT id, atype, tenant, version, type, evversion, payload::jsonb, metadata::jsonb, by
FROM unnest($1::uuid[], $2::text[], $3::uuid[], $4::int[], $5::text[], $6::int[], $7::text[], $8::text[], $9::text[])`
	insert := from + `
	AS u(id, atype, tenant, version, type, evversion, payload, metadata, by)`
	// The same insert answering what Append answers: ids in the events'
	// order, creation times.
	returning := from + ` WITH ORDINALITY
	AS u(id, atype, tenant, version, type, evversion, payload, metadata, by, ord)
ORDER BY ord RETURNING id, aggregate_id, version, created_at`

	ev, meta := benchEvent(), benchMetadata()
	events := make([]eventstore.NewEvent, n)
	for i := range events {
		events[i] = ev
	}
	// Columns that are the same in every raw batch.
	var (
		aggTypes, types, payloads, metas, users = repeat(aggType, n), repeat(eventType, n), repeat(benchPayload, n), repeat(meta, n), repeat(benchUser, n)
		tenants                                 = repeat([16]byte(b.tenant), n)
		evVersions, ones, seq                   = repeat(int32(1), n), repeat(int32(1), n), make([]int32, n)
	)
	for i := range seq {
		seq[i] = int32(i + 1)
	}
	rawBatch := func(ctx context.Context, ids [][16]byte, versions []int32) (int, error) {
		_, err := b.pool.Exec(ctx, insert, ids, aggTypes, tenants, versions, types, evVersions, payloads, metas, users)
		return n, err
	}

	oneStream := pair{
		name: "append 100 events, 1 stream (Append)",
		fw: func(ctx context.Context, _ int) (int, error) {
			_, err := b.store.Append(ctx, eventstore.Stream{TenantID: b.tenant, AggregateType: aggType}, 0, events...)
			return n, err
		},
		raw: func(ctx context.Context, _ int) (int, error) {
			return rawBatch(ctx, repeat([16]byte(uuid.Must(uuid.NewV7())), n), seq)
		},
	}
	manyStreams := pair{
		name: "append 100 streams x 1 event (AppendBatch)",
		fw: func(ctx context.Context, _ int) (int, error) {
			batch := make([]eventstore.StreamAppend, n)
			for i := range batch {
				batch[i] = eventstore.StreamAppend{
					Stream:   eventstore.Stream{TenantID: b.tenant, AggregateType: aggType},
					Expected: 0,
					Events:   []eventstore.NewEvent{ev},
				}
			}
			_, err := b.store.AppendBatch(ctx, batch)
			return n, err
		},
		raw: func(ctx context.Context, _ int) (int, error) {
			ids := make([][16]byte, n)
			for i := range ids {
				ids[i] = uuid.Must(uuid.NewV7())
			}
			return rawBatch(ctx, ids, ones)
		},
	}

	// That insert, waking other processes as the store does; no target.
	wake := newRawWake(b.pool)
	sameWork := pair{
		name: "append 100 events, 1 stream, vs raw + RETURNING + wake-up",
		fw:   oneStream.fw,
		raw: func(ctx context.Context, _ int) (int, error) {
			rows, err := b.pool.Query(ctx, returning, repeat([16]byte(uuid.Must(uuid.NewV7())), n), aggTypes, tenants, seq, types, evVersions, payloads, metas, users)
			if err != nil {
				return 0, err
			}
			var (
				id, last int64
				aggID    [16]byte
				version  int32
				at       time.Time
			)
			if _, err := pgx.ForEachRow(rows, []any{&id, &aggID, &version, &at}, func() error { last = id; return nil }); err != nil {
				return 0, err
			}
			wake.committed(last)
			return n, nil
		},
	}

	oneStream.goal, manyStreams.goal = atLeastOfRaw(0.85), atLeastOfRaw(0.85)
	var rows []row
	for _, p := range []pair{oneStream, manyStreams, sameWork} {
		p.unit, p.workers = "events/s", 1
		r, err := b.compare(ctx, p)
		if err != nil {
			return rows, err
		}
		rows = append(rows, r)
	}
	wake.wait()
	return rows, nil
}

func repeat[T any](v T, n int) []T {
	s := make([]T, n)
	for i := range s {
		s[i] = v
	}
	return s
}

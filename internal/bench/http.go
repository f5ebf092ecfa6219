package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/kumiko-go/kumiko/eventstore"
	khttp "github.com/kumiko-go/kumiko/http"
	"github.com/kumiko-go/kumiko/kumiko"
	"github.com/kumiko-go/kumiko/pipeline"
	"github.com/kumiko-go/kumiko/registry"
)

// defaultRedisURL is the idempotency store of the HTTP rows when REDIS_URL
// is not set.
const defaultRedisURL = "redis://127.0.0.1:6379/0"

// httpRows compares a CRUD create through a real kumiko server (loopback
// TCP, bearer token, body checks, validation, an Idempotency-Key claimed and
// completed in Redis and recorded in the write transaction, the event and the
// read row) with the raw transaction of the dispatcher rows (event and read
// row), at 1 and 16 writers. The load generator is a net/http client in this
// process; only 200 answers count, anything else stops the run. Both sides
// also report their p50 and p99 latency per write.
func (b *bench) httpRows(ctx context.Context) ([]row, error) {
	fwSchema := b.store.Schema() + "_http"
	rawSchema := fwSchema + "_raw"
	fmt.Fprintf(os.Stderr, "  starting a kumiko server in schema %s, raw schema %s …\n", fwSchema, rawSchema)
	reg, err := registry.Build(benchFeature)
	if err != nil {
		return nil, err
	}
	rawStore, err := eventstore.New(b.pool, eventstore.Config{Schema: rawSchema, Upcaster: reg})
	if err != nil {
		return nil, err
	}
	// Registered first, so it runs after the server stopped; rawStore never
	// appends: nothing to wait for.
	tracedSchema := fwSchema + "_traced"
	defer dropSchemas(b.pool, rawStore, fwSchema, rawSchema, tracedSchema)
	if err := migrateAll(ctx, rawStore); err != nil {
		return nil, err
	}
	rd, err := pipeline.New(reg, rawStore, pipeline.Config{})
	if err != nil {
		return nil, err
	}
	if err := rd.EnsureSchema(ctx); err != nil {
		return nil, err
	}

	app, post, err := b.startServer(ctx, reg, fwSchema, nil)
	if err != nil {
		return nil, err
	}
	defer stopServer(app)
	handler := registry.VerbCreate.HandlerName("bench_item")

	// The raw transaction of the dispatcher rows, on the raw schema's tables.
	in, err := reg.DecodePayload(handler, json.RawMessage(createPayload))
	if err != nil {
		return nil, err
	}
	fields := in.(registry.CreateInput).Fields
	payload, err := json.Marshal(fields)
	if err != nil {
		return nil, err
	}
	evType := registry.VerbCreate.EventType("bench_item")
	et, _ := reg.Event(evType)
	evVersion := max(et.Version, 1)
	meta := benchMetadata()
	insertEvent := `INSERT INTO ` + pgx.Identifier{rawSchema, "kumiko_events"}.Sanitize() + ` (aggregate_id, aggregate_type, tenant_id, version, type, event_version, payload, metadata, created_by)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`
	insertRow := `INSERT INTO ` + pgx.Identifier{rawSchema, "read_bench_item"}.Sanitize() + ` (id, tenant_id, version, done, priority, title, created_at, updated_at)
VALUES ($1, $2, $3, $4, $5, $6, now(), now())`
	raw := func(ctx context.Context, _ int) (int, error) {
		return 1, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
			id, tenant := [16]byte(uuid.Must(uuid.NewV7())), [16]byte(b.tenant)
			if _, err := tx.Exec(ctx, insertEvent, id, "bench_item", tenant, 1, evType, evVersion, string(payload), meta, benchUser); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, insertRow, id, tenant, 1, fields["done"], fields["priority"], fields["title"])
			return err
		})
	}

	// The same write served by hand: what any HTTP service doing this work
	// costs, next to which the framework's own cost shows, and which the
	// hand-written service itself reaches of the raw transaction.
	bearer := "Bearer " + randomHex(16)
	body := []byte(`{"type":"` + handler + `","payload":` + createPayload + `}`)
	hand, handURL, err := startHandService(ctx, bearer, false, func(ctx context.Context, _ string) (any, error) {
		_, err := raw(ctx, 0)
		return nil, err
	})
	if err != nil {
		return nil, err
	}
	defer hand.stop()
	handPost := poster(handURL, bearer, body)

	// And the service by hand doing the framework's whole work: the key's
	// record with the request's fingerprint in Redis (what a replay and a
	// reused key need), the key also recorded in the write transaction, the
	// new row answered and stored for replays, and the coalesced post-commit
	// wake-up that a listening process receives.
	keys := pgx.Identifier{rawSchema, "kumiko_idempotency_keys"}.Sanitize()
	wake := newRawWake(b.pool)
	defer wake.wait()
	stopListen, err := listenRaw(ctx, b.pool)
	if err != nil {
		return nil, err
	}
	defer stopListen()
	same, sameURL, err := startHandService(ctx, bearer, true, func(ctx context.Context, key string) (any, error) {
		var eventID int64
		id, tenant := uuid.Must(uuid.NewV7()), [16]byte(b.tenant)
		var created time.Time
		err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `INSERT INTO `+keys+` (tenant_id, user_id, key) VALUES ($1, $2, $3)`, tenant, benchUser, key); err != nil {
				return err
			}
			if err := tx.QueryRow(ctx, insertEvent+` RETURNING id, created_at`, [16]byte(id), "bench_item", tenant, 1, evType, evVersion, string(payload), meta, benchUser).Scan(&eventID, &created); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, insertRow, [16]byte(id), tenant, 1, fields["done"], fields["priority"], fields["title"])
			return err
		})
		if err != nil {
			return nil, err
		}
		wake.committed(eventID)
		row := map[string]any{"id": id.String(), "version": 1, "createdAt": created, "updatedAt": created}
		for k, v := range fields {
			row[k] = v
		}
		return row, nil
	})
	if err != nil {
		return nil, err
	}
	defer same.stop()
	samePost := poster(sameURL, bearer, body)
	comparisons := []struct {
		name, prefix string
		fw, raw      opFunc
		goal         goal
	}{
		{"HTTP create, 3-field entity (auth, idempotency key)", "HTTP create", post, raw, atLeastOfRaw(0.60)}, // the HTTP target
		{"HTTP create vs by hand (net/http, Redis SET NX, pgx)", "HTTP create vs by hand", post, handPost, goal{}},
		{"HTTP create by hand vs raw transaction", "HTTP create by hand vs raw", handPost, raw, goal{}},
		{"HTTP create vs by hand doing the same work (+ key in PostgreSQL, wake-up)", "HTTP create vs same work by hand", post, samePost, goal{}},
	}
	var rows []row
	for _, c := range comparisons {
		for _, workers := range []int{1, 16} {
			rs, err := b.compareLatency(ctx, pair{
				name: c.name + ", " + writers(workers), unit: "writes/s", workers: workers, goal: c.goal, fw: c.fw, raw: c.raw,
			}, c.prefix)
			rows = append(rows, rs...)
			if err != nil {
				return rows, err
			}
		}
	}

	// The same write with every span recorded and handed to an exporter
	// that drops it, next to the server without tracing.
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithBatcher(discardSpans{}))
	defer func() { _ = tp.Shutdown(context.WithoutCancel(ctx)) }()
	traced, tracedPost, err := b.startServer(ctx, reg, tracedSchema, tp)
	if err != nil {
		return rows, err
	}
	defer stopServer(traced)
	r, err := b.compare(ctx, pair{
		name:    "HTTP create traced (no-op exporter) vs untraced, " + writers(16),
		unit:    "writes/s",
		workers: 16,
		goal:    atLeastOfRaw(0.95), // tracing costs at most 5 %
		fw:      tracedPost,
		raw:     post,
	})
	return append(rows, r), err
}

// discardSpans is a span exporter that drops every span: what tracing costs
// the server without the cost of a backend.
type discardSpans struct{}

func (discardSpans) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardSpans) Shutdown(context.Context) error                             { return nil }

// startServer starts a kumiko server for reg in schema, traced by tp (nil:
// not traced), and returns it with an operation that posts one create
// through it (loopback TCP, bearer token, a fresh Idempotency-Key claimed in
// Redis).
func (b *bench) startServer(ctx context.Context, reg *registry.Registry, schema string, tp trace.TracerProvider) (*kumiko.App, opFunc, error) {
	redisURL := os.Getenv("REDIS_URL")
	if redisURL == "" {
		redisURL = defaultRedisURL
	}
	secret := randomHex(32)
	app, err := kumiko.BuildServer(ctx, kumiko.Config{
		DatabaseURL:    b.pool.Config().ConnString(),
		Schema:         schema,
		JWTSecret:      secret,
		Addr:           "127.0.0.1:0",
		InstanceID:     "bench",
		RedisURL:       redisURL,
		Logger:         serverLogger(),
		TracerProvider: tp,
	}, benchFeature)
	if err != nil {
		return nil, nil, err
	}
	if err := app.Start(ctx); err != nil {
		return nil, nil, err
	}
	token, err := khttp.IssueToken([]byte(secret), benchUser, b.tenant.String(), []string{"User"}, time.Hour)
	if err != nil {
		stopServer(app)
		return nil, nil, err
	}
	handler := registry.VerbCreate.HandlerName("bench_item")
	body := []byte(`{"type":"` + handler + `","payload":` + createPayload + `}`)
	return app, poster("http://"+app.Addr()+"/api/write", "Bearer "+token, body), nil
}

// poster returns the load generator's write: POST body to url with the
// bearer token and a fresh Idempotency-Key, over a keep-alive client with a
// connection per writer; only a fresh 200 counts.
func poster(url, bearer string, body []byte) opFunc {
	transport := &http.Transport{ // no proxy; keep-alive on; a connection per writer
		MaxIdleConns:        16,
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     time.Minute,
	}
	client := &http.Client{Transport: transport}
	// Keys are unique per request and per run: a key of an earlier run still
	// in Redis would be replayed instead of written.
	keyPrefix := "bench-" + randomHex(8) + "-"
	var keySeq atomic.Uint64
	return func(ctx context.Context, _ int) (int, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
		if err != nil {
			return 0, err
		}
		req.Header.Set("Authorization", bearer)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(khttp.HeaderIdempotencyKey, keyPrefix+strconv.FormatUint(keySeq.Add(1), 10))
		resp, err := client.Do(req)
		if err != nil {
			return 0, err
		}
		err = written(resp)
		if cerr := resp.Body.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return 0, err
		}
		return 1, nil
	}
}

// written checks that resp answers a fresh write (200, not a replay) and
// drains its body, so the connection is reused.
func written(resp *http.Response) error {
	switch {
	case resp.StatusCode != http.StatusOK:
		problem, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		return fmt.Errorf("POST /api/write: %s: %s", resp.Status, bytes.TrimSpace(problem))
	case resp.Header.Get(khttp.HeaderIdempotentReplayed) != "":
		return errors.New("POST /api/write: a fresh key was answered with a replay")
	}
	_, err := io.Copy(io.Discard, resp.Body)
	return err
}

// compareLatency is compare that also times every operation of the measured
// rounds: it returns p's row, then rows of both sides' p50 and p99 latency
// (in µs, no target), named after prefix.
func (b *bench) compareLatency(ctx context.Context, p pair, prefix string) ([]row, error) {
	// compare's own warm-up would be timed too: warm up here, untimed, and
	// let compare run only the measured rounds.
	for _, op := range []opFunc{p.fw, p.raw} {
		if _, err := runFor(ctx, p.workers, b.cfg.warmup, op); err != nil {
			return nil, fmt.Errorf("%s: warm-up: %w", p.name, err)
		}
	}
	fw, raw := newLatencies(p.workers), newLatencies(p.workers)
	p.fw, p.raw = fw.timed(p.fw), raw.timed(p.raw)
	measured := *b
	measured.cfg.warmup = 0
	r, err := measured.compare(ctx, p)
	if err != nil {
		return nil, err
	}
	rows := []row{r}
	for _, q := range []float64{0.50, 0.99} {
		rows = append(rows, row{
			name: fmt.Sprintf("%s p%.0f latency, %s", prefix, q*100, writers(p.workers)),
			unit: "µs",
			fw:   micros(fw.quantile(q)),
			raw:  micros(raw.quantile(q)),
		})
	}
	return rows, nil
}

// latencies are the durations of one side's operations, per worker, so
// workers append without sharing.
type latencies struct {
	workers [][]time.Duration
}

func newLatencies(workers int) *latencies {
	return &latencies{workers: make([][]time.Duration, workers)}
}

// timed returns op, recording the duration of every call that succeeds.
func (l *latencies) timed(op opFunc) opFunc {
	return func(ctx context.Context, w int) (int, error) {
		start := time.Now()
		n, err := op(ctx, w)
		if err == nil {
			l.workers[w] = append(l.workers[w], time.Since(start))
		}
		return n, err
	}
}

// quantile returns the q-quantile (nearest rank) of every recorded duration.
// It must not run while operations are recorded.
func (l *latencies) quantile(q float64) time.Duration {
	all := slices.Concat(l.workers...)
	if len(all) == 0 {
		return 0
	}
	slices.Sort(all)
	i := int(math.Ceil(q*float64(len(all)))) - 1
	return all[min(max(i, 0), len(all)-1)]
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// serverLogger is the bench server's logger. Every record at Info and above
// is formatted as JSON, as a production server would, but into io.Discard (a
// line per request would bury the table); warnings and errors, among them
// every 5xx with its cause, also go to stderr.
func serverLogger() *slog.Logger {
	return slog.New(slog.NewMultiHandler(
		slog.NewJSONHandler(io.Discard, nil),
		slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}),
	))
}

// stopServer stops app with a context of its own: the run's context may be
// cancelled by a signal.
func stopServer(app *kumiko.App) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := app.Stop(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "bench: stop the server: %v\n", err)
	}
}

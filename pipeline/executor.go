package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/internal/author"
	"github.com/kumiko-go/kumiko/internal/projection"
	"github.com/kumiko-go/kumiko/jobs"
	"github.com/kumiko-go/kumiko/kumikotype"
	"github.com/kumiko-go/kumiko/registry"
	"github.com/kumiko-go/kumiko/search"
)

// MaxBatch is the most requests one Batch accepts.
const MaxBatch = 100

// Config configures a Executor. The zero value is usable.
type Config struct {
	// Logger receives what cannot be returned. Default slog.Default().
	Logger *slog.Logger
	// Metrics registers the executor's Prometheus series
	// (kumiko_events_appended_total, kumiko_events_appended_duration_seconds,
	// kumiko_aggregate_load_events, kumiko_snapshot_write_total,
	// kumiko_projection_rebuild_duration_seconds and
	// kumiko_projection_lag_seconds, read from the database at each scrape);
	// nil keeps them unregistered.
	Metrics prometheus.Registerer
	// TracerProvider makes the executor's spans (see TracerName). Default:
	// no spans.
	TracerProvider trace.TracerProvider
	// MetricsTenantLabel adds a tenant label to kumiko_events_appended_total.
	// Off by default: a series per tenant can be many series.
	MetricsTenantLabel bool
	// AsOfConcurrency bounds how many lists with "asOf" run at once in this
	// process: such a list folds the entity's whole history in the caller's
	// tenant. One more is refused at once with unavailable (reason
	// as_of_busy; HTTP 503 with Retry-After). Default
	// DefaultAsOfConcurrencyFor(runtime.GOMAXPROCS(0)): one per four
	// cores, at least 1 and at most DefaultAsOfConcurrency, so folds never
	// take every core from the other tenants' requests; negative: no bound.
	AsOfConcurrency int
	// AsOfTimeout bounds one list with "asOf": past it its reads are
	// cancelled in the database and it fails with unavailable (reason
	// as_of_timeout). Default 5s; negative: no bound.
	AsOfTimeout time.Duration
	// SearchEngines are the search engines that searches declared with
	// feature.SearchEngine run on, by the names they give; the executor's
	// Consumers include the consumers that feed them. A search naming an
	// engine missing here fails New.
	SearchEngines map[string]search.Engine
}

// Defaults of Config. DefaultAsOfConcurrency is the most the derived
// default of Config.AsOfConcurrency allows (see DefaultAsOfConcurrencyFor).
const (
	DefaultAsOfConcurrency = projection.DefaultAsOfConcurrency
	DefaultAsOfTimeout     = projection.DefaultAsOfTimeout
)

// DefaultAsOfConcurrencyFor is the default of Config.AsOfConcurrency for a
// process running Go code on procs cores (runtime.GOMAXPROCS): procs/4,
// at least 1 and at most DefaultAsOfConcurrency. One as-of list keeps about
// a core busy between this process (decoding and folding) and its
// PostgreSQL backend (reading the events), so on a 2-core machine a second
// one would leave other tenants' requests no core of their own.
func DefaultAsOfConcurrencyFor(procs int) int {
	return projection.DefaultAsOfConcurrencyFor(procs)
}

// Executor runs writes, batches, queries and commands. Build it once per
// process; it is safe for concurrent use.
type Executor struct {
	reg     *registry.Registry
	store   *eventstore.Store
	pool    *pgxpool.Pool
	schema  string
	log     *slog.Logger
	metrics *metrics
	tracer  trace.Tracer
	sql     queries
	// proj is the read side: read tables, projections, reads, rebuilds.
	proj *projection.Side
	// known is every event type of the registry at its newest version: an
	// append to a stream holding a newer one is refused (see appendValid).
	known eventstore.KnownVersions
	// jobs runs the registry's jobs; nil when there are none.
	jobs *jobs.Runner
	// forgetSteps run in every forget's transaction (OnForget).
	forgetSteps []ForgetStep
}

// New returns an executor for the registry's features on store. The store
// must upcast with the registry (eventstore.Config{Upcaster: reg}) so every
// read sees current event versions. Call EnsureSchema once at start-up.
func New(reg *registry.Registry, store *eventstore.Store, cfg Config) (*Executor, error) {
	if reg == nil || store == nil {
		return nil, errors.New("pipeline: registry and store are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.TracerProvider == nil {
		cfg.TracerProvider = noop.NewTracerProvider()
	}
	m, err := newMetrics(cfg.Metrics, cfg.MetricsTenantLabel)
	if err != nil {
		return nil, fmt.Errorf("pipeline: metrics: %w", err)
	}
	d := &Executor{
		reg: reg, store: store, pool: store.Pool(), schema: store.Schema(), log: cfg.Logger,
		metrics: m, tracer: cfg.TracerProvider.Tracer(TracerName), sql: newQueries(store.Schema()),
	}
	d.proj, err = projection.New(reg, store, projection.Config{
		Logger: cfg.Logger, Metrics: cfg.Metrics, AsOfConcurrency: cfg.AsOfConcurrency, AsOfTimeout: cfg.AsOfTimeout,
		ApplyMSP: d.applyMSP, SearchEngines: cfg.SearchEngines,
	})
	if err != nil {
		return nil, err
	}
	newest := map[string]int{}
	for _, et := range reg.Events() {
		newest[et.Name] = et.Version
	}
	d.known = eventstore.NewKnownVersions(newest)
	return d, nil
}

// Registry returns the registry the executor serves.
func (d *Executor) Registry() *registry.Registry { return d.reg }

// Caller is who sends a request and what travels with it onto every event.
type Caller struct {
	// User is the authenticated caller; User.TenantID is the tenant every
	// read and write is confined to.
	User feature.User
	// RequestID and CorrelationID are stored in each event's metadata;
	// CorrelationID is inherited by events consumers append in reaction.
	RequestID     string
	CorrelationID string
	// IdempotencyKey of the HTTP request, stored in each event's metadata
	// and recorded per (tenant, user) in the write transaction: a second
	// write with the key is refused (idempotency_conflict, reason
	// already_applied, or key_reused when RequestHash differs) even when the
	// HTTP layer's record of the first was lost.
	IdempotencyKey string
	// RequestHash fingerprints the request the key belongs to.
	RequestHash string

	// appended collects the request's events for the metrics after commit.
	appended []eventstore.Event
	// Headers are stored in each event's metadata.
	Headers map[string]string
}

// Request names a handler and carries its JSON payload.
type Request struct {
	Type    string          `json:"type"`
	Payload json.RawMessage `json:"payload"`
}

// Write runs a CRUD write (create, update, delete, restore) and returns the
// entity's row as the caller may see it.
func (d *Executor) Write(ctx context.Context, c Caller, req Request) (any, error) {
	return d.writeOne(ctx, c, req, registry.KindWrite)
}

// Command runs a command handler in a write transaction and returns what the
// handler returned.
func (d *Executor) Command(ctx context.Context, c Caller, req Request) (any, error) {
	return d.writeOne(ctx, c, req, registry.KindCommand)
}

func (d *Executor) writeOne(ctx context.Context, c Caller, req Request, kind registry.HandlerKind) (out any, err error) {
	ctx, span := d.tracer.Start(ctx, "cmd."+req.Type, trace.WithAttributes(attribute.String("kumiko.type", req.Type)))
	defer func() { endSpan(span, err) }()
	h, in, gerr := d.gate(ctx, c, req, kind)
	if gerr != nil {
		return nil, gerr
	}
	werr := d.inWriteTx(ctx, &c, func(ctx context.Context, tx *eventstore.Tx) error {
		var err error
		out, err = d.execute(ctx, tx, &c, h, in)
		return err
	})
	if werr != nil {
		return nil, werr
	}
	return out, nil
}

// Batch runs writes and commands in one transaction: all take effect or none.
// Every request passes its gates before any runs; a failure is an *Error
// whose Details["failedIndex"] names the request.
func (d *Executor) Batch(ctx context.Context, c Caller, reqs []Request) (_ []any, berr error) {
	ctx, span := d.tracer.Start(ctx, "batch", trace.WithAttributes(attribute.Int("kumiko.commands", len(reqs))))
	defer func() { endSpan(span, berr) }()
	if len(reqs) == 0 || len(reqs) > MaxBatch {
		return nil, newError(CodeValidation, "", fmt.Sprintf("a batch holds 1 to %d commands, got %d", MaxBatch, len(reqs)), nil)
	}
	hs := make([]registry.Handler, len(reqs))
	ins := make([]any, len(reqs))
	for i, req := range reqs {
		h, in, gerr := d.gate(ctx, c, req, registry.KindWrite, registry.KindCommand)
		if gerr != nil {
			return nil, gerr.With("failedIndex", i)
		}
		hs[i], ins[i] = h, in
	}
	out := make([]any, len(reqs))
	failed := -1
	err := d.inWriteTx(ctx, &c, func(ctx context.Context, tx *eventstore.Tx) error {
		for i := range reqs {
			res, err := d.execute(ctx, tx, &c, hs[i], ins[i])
			if err == nil {
				// What the request queued (its rows) fails as its own.
				err = tx.Flush(ctx)
			}
			if err != nil {
				if !errors.Is(err, errKeyTaken) { // a refused key is not the request's failure
					failed = i
				}
				return err
			}
			out[i] = res
		}
		return nil
	})
	if err != nil {
		if failed >= 0 {
			_ = err.With("failedIndex", failed)
		}
		return nil, err
	}
	return out, nil
}

// inWriteTx runs fn in a write transaction that first records the caller's
// idempotency key — in one round trip with fn's first statement — and after
// the commit counts the appended events. A refused key is the answer
// whatever fn made of it.
func (d *Executor) inWriteTx(ctx context.Context, c *Caller, fn func(ctx context.Context, tx *eventstore.Tx) error) *Error {
	err := d.store.InTx(ctx, func(ctx context.Context, tx *eventstore.Tx) error {
		d.recordKey(tx, c)
		if err := fn(ctx, tx); err != nil {
			// A handler that failed before its first statement: the key
			// still decides (a retry of an applied request is told so).
			if tx.Flush(ctx) != nil && errors.Is(tx.Err(), errKeyTaken) {
				return tx.Err()
			}
			return err
		}
		return nil
	})
	if errors.Is(err, errKeyTaken) {
		return d.resolveKey(ctx, c)
	}
	if err != nil {
		return writeError(err)
	}
	d.metrics.committed(c.appended)
	return nil
}

// Query runs a CRUD list or detail, a search (an entity's or a projection's)
// or a query handler. Query handlers run in a read-only transaction.
func (d *Executor) Query(ctx context.Context, c Caller, req Request) (_ any, qerr error) {
	ctx, span := d.tracer.Start(ctx, "query."+req.Type, trace.WithAttributes(attribute.String("kumiko.type", req.Type)))
	defer func() { endSpan(span, qerr) }()
	h, in, gerr := d.gate(ctx, c, req, registry.KindQuery)
	if gerr != nil {
		return nil, gerr
	}
	var (
		out any
		err error
	)
	switch h.Verb {
	case registry.VerbList:
		out, err = d.proj.List(ctx, c.User, d.proj.Entity(h.Entity), in.(registry.ListInput))
	case registry.VerbDetail:
		out, err = d.proj.Detail(ctx, c.User, d.proj.Entity(h.Entity), in.(registry.DetailInput))
	case registry.VerbSearch:
		if h.Projection != "" {
			out, err = d.proj.SearchProjection(ctx, c.User, h.Projection, in.(registry.SearchInput))
			break
		}
		out, err = d.proj.Search(ctx, c.User, d.proj.Entity(h.Entity), in.(registry.SearchInput))
	default:
		err = pgx.BeginTxFunc(ctx, d.pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
			return author.Run(d.log, func() (err error) {
				out, err = h.Invoke(d.newCommandContext(ctx, tx, &c, h), in)
				return err
			}, "handler", h.Name, "requestId", c.RequestID)
		})
	}
	if err != nil {
		// list, detail and the read-only transaction run SQL on the pool.
		return nil, AsError(eventstore.TranslateError(err))
	}
	return out, nil
}

// gate runs the checks every request passes before its handler, in order:
// the handler exists (for this kind of request), the caller may call it, the
// payload is valid, and the caller may write the fields it sends.
func (d *Executor) gate(ctx context.Context, c Caller, req Request, kinds ...registry.HandlerKind) (_ registry.Handler, _ any, gerr *Error) {
	_, span := d.tracer.Start(ctx, "validate")
	defer func() {
		if gerr != nil {
			endSpan(span, gerr)
			return
		}
		span.End()
	}()
	h, ok := d.reg.Handler(req.Type)
	if !ok || !slices.Contains(kinds, h.Kind) {
		return h, nil, notFoundf(kumikotype.ReasonHandlerNotFound, "no %s handler %q", kinds[0], req.Type)
	}
	if !h.Access.Allows(c.User) {
		if !c.User.Authenticated {
			return h, nil, newError(CodeUnauthenticated, "", "sign in to call "+h.Name, nil)
		}
		return h, nil, newError(CodeAccessDenied, "", "you may not call "+h.Name, nil)
	}
	in, err := d.reg.DecodePayload(h.Name, req.Payload)
	if err != nil {
		return h, nil, AsError(err)
	}
	if err := d.checkFieldWrite(c.User, h, req.Payload, in); err != nil {
		return h, nil, err
	}
	return h, in, nil
}

// checkFieldWrite refuses a CRUD write that sends a field the caller may not
// write. Defaults the caller did not send are not the caller's writes.
func (d *Executor) checkFieldWrite(u feature.User, h registry.Handler, raw json.RawMessage, in any) *Error {
	t := d.proj.Entity(h.Entity)
	if t == nil || !t.RestrictsWrites() {
		return nil
	}
	var sent []string
	switch in := in.(type) {
	case registry.CreateInput:
		var keys map[string]json.RawMessage
		_ = json.Unmarshal(raw, &keys) // decoded successfully above
		sent = slices.Collect(maps.Keys(keys))
	case registry.UpdateInput:
		sent = slices.Collect(maps.Keys(in.Changes))
	}
	return t.CheckWrite(u, sent, "")
}

// execute runs a gated write or command inside tx. A panic in the handler or
// in an inline projection's apply is an error, so tx rolls back.
func (d *Executor) execute(ctx context.Context, tx pgx.Tx, c *Caller, h registry.Handler, in any) (out any, err error) {
	err = author.Run(d.log, func() (err error) {
		if h.Kind == registry.KindCommand {
			cc := d.newCommandContext(ctx, tx, c, h)
			out, err = h.Invoke(cc, in)
			if cc.refused != nil {
				// A refused field write fails the command even when the
				// handler went on without it.
				err = cc.refused
			}
			if err == nil {
				// The answer is encoded after the commit: a result that
				// cannot be encoded must fail the command before it commits,
				// not tell the client it failed after it did.
				if _, jerr := json.Marshal(out); jerr != nil {
					err = fmt.Errorf("command %s: its result cannot be encoded as JSON: %w", h.Name, jerr)
				}
			}
		} else {
			out, err = d.crud(ctx, tx, c, h, in)
		}
		return err
	}, "handler", h.Name, "requestId", c.RequestID)
	return out, err
}

// tenantOf is the tenant an entity's streams and rows live in for c.
func (d *Executor) tenantOf(t *projection.Entity, c *Caller) uuid.UUID {
	if t != nil {
		return t.Tenant(c.User)
	}
	return c.User.TenantID
}

// Package projection is the read side of the pipeline: the entities' read
// tables and the projections' tables — their DDL, the rows an event writes
// and the folds that rebuild a row from events —, CRUD lists and details
// (as-of reads among them), projection queries with their tenant-safe
// WHERE check, rebuilds and the row feed that live channels follow.
//
// It knows the event store and the registry, never the pipeline: the
// pipeline decides, appends and then applies through it. A multi-stream
// projection's apply function, which may append events of its own, runs
// through the ApplyMSP the pipeline hands over.
package projection

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kumiko-go/kumiko/consumer"
	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/internal/searchsql"
	"github.com/kumiko-go/kumiko/registry"
	"github.com/kumiko-go/kumiko/search"
)

// ApplyMSP runs a multi-stream projection's apply function for ev in tx,
// writing to table (schema-qualified; "" for a side-effect consumer), and
// returns how many events the apply appended.
type ApplyMSP func(ctx context.Context, tx pgx.Tx, m *registry.MSP, table string, ev eventstore.Event) (int, error)

// Config configures a Side.
type Config struct {
	// Logger receives what cannot be returned. Default slog.Default().
	Logger *slog.Logger
	// Metrics registers kumiko_projection_rebuild_duration_seconds and
	// kumiko_projection_lag_seconds; nil keeps them unregistered.
	Metrics prometheus.Registerer
	// AsOfConcurrency, AsOfTimeout: see pipeline.Config.
	AsOfConcurrency int
	AsOfTimeout     time.Duration
	// ApplyMSP runs multi-stream projections' apply functions in a rebuild.
	ApplyMSP ApplyMSP
	// SearchEngines are the search engines searches declared with
	// feature.SearchEngine run on, by the names they give.
	SearchEngines map[string]search.Engine
}

// Defaults of Config (see pipeline.Config).
const (
	DefaultAsOfConcurrency = 2
	DefaultAsOfTimeout     = 5 * time.Second
)

// DefaultAsOfConcurrencyFor is the default of Config.AsOfConcurrency for
// procs cores: procs/4, at least 1 and at most DefaultAsOfConcurrency.
func DefaultAsOfConcurrencyFor(procs int) int {
	return min(max(1, procs/4), DefaultAsOfConcurrency)
}

// Side is the read side of one registry on one store. It is safe for
// concurrent use.
type Side struct {
	reg       *registry.Registry
	store     *eventstore.Store
	pool      *pgxpool.Pool
	schema    string
	log       *slog.Logger
	sql       queries
	applyMSP  ApplyMSP
	rebuilds  *prometheus.HistogramVec
	consumers *consumer.Ops
	entities  map[string]*Entity
	// tables are the searches of projection tables, by projection.
	tables map[string]*tableSearch
	// asOfSlots holds a token per running as-of list; nil: no bound.
	asOfSlots   chan struct{}
	asOfTimeout time.Duration
	// asOfChunk is how many events an as-of list reads and folds between
	// yields (see listAsOf).
	asOfChunk int
	// built holds the names of projections whose tables are known to be
	// complete (see checkBuilt).
	built sync.Map
	// trgm is the schema holding pg_trgm (search.go).
	trgm searchsql.Trgm
}

// New returns the read side of reg's entities and projections on store.
func New(reg *registry.Registry, store *eventstore.Store, cfg Config) (*Side, error) {
	if reg == nil || store == nil {
		return nil, errors.New("projection: registry and store are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Side{
		reg: reg, store: store, pool: store.Pool(), schema: store.Schema(), log: cfg.Logger,
		sql: newQueries(store.Schema()), applyMSP: cfg.ApplyMSP, consumers: consumer.NewOps(store),
		entities: map[string]*Entity{}, asOfTimeout: cfg.AsOfTimeout, asOfChunk: asOfChunkEvents,
		rebuilds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "kumiko_projection_rebuild_duration_seconds",
			Help:    "Time of a successful projection rebuild, from start to swap.",
			Buckets: prometheus.ExponentialBuckets(0.1, 4, 9), // 0.1 s … ~1.8 h
		}, []string{"projection"}),
	}
	if cfg.AsOfConcurrency == 0 {
		cfg.AsOfConcurrency = DefaultAsOfConcurrencyFor(runtime.GOMAXPROCS(0))
	}
	if cfg.AsOfConcurrency > 0 {
		s.asOfSlots = make(chan struct{}, cfg.AsOfConcurrency)
	}
	if s.asOfTimeout == 0 {
		s.asOfTimeout = DefaultAsOfTimeout
	}
	for _, e := range reg.Entities() {
		t := newEntity(s.schema, e)
		var err error
		if t.search, err = newSearchPlan(t, cfg.SearchEngines); err != nil {
			return nil, err
		}
		s.entities[e.Name()] = t
	}
	s.tables = tableSearches(s.schema, reg)
	if cfg.Metrics != nil {
		for _, c := range []prometheus.Collector{s.rebuilds, newProjectionLag(s)} {
			if err := cfg.Metrics.Register(c); err != nil {
				return nil, fmt.Errorf("projection: metrics: %w", err)
			}
		}
	}
	return s, nil
}

// Entity is the read table of the entity called name; nil when there is
// no such entity.
func (s *Side) Entity(name string) *Entity { return s.entities[name] }

// SetAsOfChunk sets how many events as-of lists read and fold between
// yields, so a test can split a small history into many chunks.
func (s *Side) SetAsOfChunk(n int) { s.asOfChunk = n }

// projectionScrapeTimeout bounds the statements one scrape of the
// projection lag runs.
const projectionScrapeTimeout = 2 * time.Second

// projectionLag reports kumiko_projection_lag_seconds{projection} at each
// scrape: how old the oldest event a projection has not applied is (0 when
// it is caught up). A scrape whose statements fail reports no value (and
// logs why), so the rest of /metrics is still served.
type projectionLag struct {
	s    *Side
	desc *prometheus.Desc
}

func newProjectionLag(s *Side) *projectionLag {
	return &projectionLag{s: s, desc: prometheus.NewDesc("kumiko_projection_lag_seconds",
		"Age of the oldest event a projection has not applied yet; 0 when caught up.", []string{"projection"}, nil)}
}

func (p *projectionLag) Describe(ch chan<- *prometheus.Desc) { ch <- p.desc }

func (p *projectionLag) Collect(ch chan<- prometheus.Metric) {
	// The Collector interface passes no context: the scrape is bounded here.
	ctx, cancel := context.WithTimeout(context.Background(), projectionScrapeTimeout)
	defer cancel()
	statuses, err := p.s.ProjectionStatuses(ctx)
	if err != nil {
		p.s.log.Warn("projection: lag for /metrics", slog.Any("error", err))
		return
	}
	for _, st := range statuses {
		ch <- prometheus.MustNewConstMetric(p.desc, prometheus.GaugeValue, st.LagSeconds, st.Name)
	}
}

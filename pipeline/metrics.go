package pipeline

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kumiko-go/kumiko/eventstore"
)

// projectionScrapeTimeout bounds the statements one scrape of the
// projection lag runs.
const projectionScrapeTimeout = 2 * time.Second

// metrics are the executor's Prometheus series (docs/operations.md lists
// them with the alerts to set).
type metrics struct {
	tenantLabel bool
	appended    *prometheus.CounterVec
	appendTime  prometheus.Histogram
	loaded      *prometheus.HistogramVec
	snapshots   *prometheus.CounterVec
	rebuilds    *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer, tenantLabel bool) (*metrics, error) {
	labels := []string{"aggregate_type", "event_type"}
	if tenantLabel {
		labels = append(labels, "tenant")
	}
	m := &metrics{
		tenantLabel: tenantLabel,
		appended: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kumiko_events_appended_total",
			Help: "Events appended by committed requests.",
		}, labels),
		appendTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "kumiko_events_appended_duration_seconds",
			Help:    "Time of one event append statement, in its transaction.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1},
		}),
		loaded: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "kumiko_aggregate_load_events",
			Help:    "Events read to load one aggregate (after its snapshot, when one was used).",
			Buckets: []float64{0, 1, 5, 10, 25, 50, 100, 250, 1000, 10000},
		}, []string{"aggregate_type"}),
		snapshots: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kumiko_snapshot_write_total",
			Help: "Aggregate snapshots written (counted when written, in their transaction).",
		}, []string{"aggregate_type"}),
		rebuilds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "kumiko_projection_rebuild_duration_seconds",
			Help:    "Time of a successful projection rebuild, from start to swap.",
			Buckets: prometheus.ExponentialBuckets(0.1, 4, 9), // 0.1 s … ~1.8 h
		}, []string{"projection"}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.appended, m.appendTime, m.loaded, m.snapshots, m.rebuilds} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// committed counts the events of a committed request.
func (m *metrics) committed(evs []eventstore.Event) {
	for _, e := range evs {
		if m.tenantLabel {
			m.appended.WithLabelValues(e.AggregateType, e.Type, e.TenantID.String()).Inc()
		} else {
			m.appended.WithLabelValues(e.AggregateType, e.Type).Inc()
		}
	}
}

func (m *metrics) load(aggregateType string, n int) {
	m.loaded.WithLabelValues(aggregateType).Observe(float64(n))
}

// projectionLag reports kumiko_projection_lag_seconds{projection} at each
// scrape: how old the oldest event a projection has not applied is (0 when
// it is caught up). A scrape whose statements fail reports no value (and
// logs why), so the rest of /metrics is still served.
type projectionLag struct {
	d    *Executor
	desc *prometheus.Desc
}

func newProjectionLag(d *Executor) *projectionLag {
	return &projectionLag{d: d, desc: prometheus.NewDesc("kumiko_projection_lag_seconds",
		"Age of the oldest event a projection has not applied yet; 0 when caught up.", []string{"projection"}, nil)}
}

func (p *projectionLag) Describe(ch chan<- *prometheus.Desc) { ch <- p.desc }

func (p *projectionLag) Collect(ch chan<- prometheus.Metric) {
	// The Collector interface passes no context: the scrape is bounded here.
	ctx, cancel := context.WithTimeout(context.Background(), projectionScrapeTimeout)
	defer cancel()
	statuses, err := p.d.ProjectionStatuses(ctx)
	if err != nil {
		p.d.log.Warn("pipeline: projection lag for /metrics", slog.Any("error", err))
		return
	}
	for _, s := range statuses {
		ch <- prometheus.MustNewConstMetric(p.desc, prometheus.GaugeValue, s.LagSeconds, s.Name)
	}
}

package pipeline

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kumiko-go/kumiko/eventstore"
)

// metrics are the executor's Prometheus series (docs/operations.md lists
// them with the alerts to set).
type metrics struct {
	tenantLabel bool
	appended    *prometheus.CounterVec
	appendTime  prometheus.Histogram
	loaded      *prometheus.HistogramVec
	snapshots   *prometheus.CounterVec
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
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.appended, m.appendTime, m.loaded, m.snapshots} {
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

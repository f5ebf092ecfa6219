package pipeline

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kumiko-go/kumiko/eventstore"
)

// metrics are the executor's Prometheus series.
type metrics struct {
	appended *prometheus.CounterVec
	loaded   *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		appended: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kumiko_events_appended_total",
			Help: "Events appended by committed requests.",
		}, []string{"aggregate_type", "event_type"}),
		loaded: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "kumiko_aggregate_load_events",
			Help:    "Events read to load one aggregate (after its snapshot, when one was used).",
			Buckets: []float64{0, 1, 5, 10, 25, 50, 100, 250, 1000, 10000},
		}, []string{"aggregate_type"}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.appended, m.loaded} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// committed counts the events of a committed request.
func (m *metrics) committed(evs []eventstore.Event) {
	for _, e := range evs {
		m.appended.WithLabelValues(e.AggregateType, e.Type).Inc()
	}
}

func (m *metrics) load(aggregateType string, n int) {
	m.loaded.WithLabelValues(aggregateType).Observe(float64(n))
}

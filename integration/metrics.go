package integration

import "github.com/prometheus/client_golang/prometheus"

// metrics are the integration events' Prometheus series. The relay's lag is
// the consumer series of its shard (kumiko_event_consumer_lag_events with
// consumer="kumiko.integration-relay").
type metrics struct {
	published, handled, failed, dead *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		published: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kumiko_integration_published_total", Help: "Integration messages the relay handed to the transport and it confirmed.",
		}, []string{"type"}),
		handled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kumiko_integration_handled_total", Help: "Integration messages a handler handled (committed with its inbox row).",
		}, []string{"handler"}),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kumiko_integration_failed_total", Help: "Integration handler attempts that failed.",
		}, []string{"handler"}),
		dead: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kumiko_integration_dead_total", Help: "Integration messages given up on after the last attempt, kept for ops.",
		}, []string{"handler"}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.published, m.handled, m.failed, m.dead} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

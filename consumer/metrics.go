package consumer

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kumiko-go/kumiko/eventstore"
)

// metrics are the event dispatcher's Prometheus series.
type metrics struct {
	instance  string
	processed *prometheus.CounterVec
	failures  *prometheus.CounterVec
	latency   *prometheus.HistogramVec
	delivery  *prometheus.HistogramVec
	position  *prometheus.GaugeVec
	lag       *prometheus.GaugeVec
	gap       *prometheus.GaugeVec
	expiry    *prometheus.GaugeVec
	stale     *prometheus.GaugeVec
	stuckNow  *prometheus.GaugeVec
	parked    *prometheus.GaugeVec
	parkings  *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer, instance string) (*metrics, error) {
	labels := []string{"consumer", "instance_id"}
	m := &metrics{
		instance: instance,
		processed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kumiko_event_consumer_events_processed_total", Help: "Events a consumer applied.",
		}, labels),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kumiko_event_consumer_events_failed_total", Help: "Event applications that failed.",
		}, labels),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "kumiko_event_consumer_delivery_latency_seconds",
			Help: "From the event's created_at — the start of the transaction that appended it, not its commit — to the commit of the pass that applied it. " +
				"Includes the appending transaction's own duration; alert on kumiko_event_consumer_delivery_seconds instead.",
			Buckets: []float64{.001, .0025, .005, .01, .02, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, labels),
		delivery: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "kumiko_event_consumer_delivery_seconds",
			Help: "From when this process learnt that an event was committed (the wake-up by its notification or by an append in this process; " +
				"a poll's start when none came) to the commit of the pass that applied it, held-back time at a gap, a full batch or a failure included.",
			Buckets: []float64{.0005, .001, .002, .005, .01, .02, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, labels),
		position: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kumiko_event_consumer_cursor", Help: "The last event id a consumer shard processed.",
		}, labels),
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kumiko_event_consumer_lag_events",
			Help: "Event ids allocated beyond a consumer shard's cursor (rolled-back ids included), as of its last pass.",
		}, labels),
		gap: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kumiko_event_consumer_gap_wait_seconds",
			Help: "How long a consumer shard has been holding committed events back behind an id that a transaction still open may commit, as of its last pass; 0 when not waiting. GET /api/consumers and `consumer list` name the backend holding it.",
		}, labels),
		expiry: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kumiko_event_consumer_expired",
			Help: "1 while a consumer shard is expired: events after its cursor were pruned, and it delivers nothing until an operator skips it or rebuilds its projection.",
		}, labels),
		stale: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kumiko_instance_stale",
			Help: "Per instance known to the app (by its liveness record or its per-instance consumer shards): 1 when stale or unknown, 0 while it beats. As of this process's last beat.",
		}, []string{"instance_id"}),
		stuckNow: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kumiko_event_consumer_stuck",
			Help: "1 while a handler call of the consumer in this process (instance_id) has run past the consumer's StuckAfter; 0 otherwise. GET /api/consumers and `consumer list` show the shard as stuck, with the event and since when.",
		}, labels),
		parked: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kumiko_event_consumer_parked_streams",
			Help: "Streams parked on a consumer shard (Consumer.Park): an event of each failed every attempt, and the stream's later events wait for an operator's retry or skip. As of the shard's last pass in this process.",
		}, labels),
		parkings: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kumiko_event_consumer_streams_parked_total", Help: "Streams this process parked, by consumer.",
		}, labels),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.processed, m.failures, m.latency, m.delivery, m.position, m.lag, m.gap, m.expiry, m.stale, m.stuckNow, m.parked, m.parkings} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// delivered counts the events a pass applied, once it committed; since is
// when they were known to be committed (see Dispatcher.loop).
func (m *metrics) delivered(consumer string, evs []eventstore.Event, since time.Time) {
	m.processed.WithLabelValues(consumer, m.instance).Add(float64(len(evs)))
	h := m.latency.WithLabelValues(consumer, m.instance)
	d := m.delivery.WithLabelValues(consumer, m.instance)
	took := time.Since(since).Seconds()
	for _, ev := range evs {
		h.Observe(time.Since(ev.CreatedAt).Seconds())
		d.Observe(took)
	}
}

func (m *metrics) failed(consumer string, n int) {
	m.failures.WithLabelValues(consumer, m.instance).Add(float64(n))
}

func (m *metrics) cursor(consumer, instance string, cursor, head int64) {
	m.position.WithLabelValues(consumer, instance).Set(float64(cursor))
	m.lag.WithLabelValues(consumer, instance).Set(float64(max(head-cursor, 0)))
}

func (m *metrics) gapWait(consumer, instance string, wait time.Duration) {
	m.gap.WithLabelValues(consumer, instance).Set(wait.Seconds())
}

func (m *metrics) expired(consumer, instance string, expired bool) {
	m.expiry.WithLabelValues(consumer, instance).Set(gaugeFlag(expired))
}

// parkedNow sets the streams parked on a shard.
func (m *metrics) parkedNow(consumer, instance string, n int) {
	m.parked.WithLabelValues(consumer, instance).Set(float64(n))
}

// parkedOne counts a stream parked by this process.
func (m *metrics) parkedOne(consumer string) {
	m.parkings.WithLabelValues(consumer, m.instance).Inc()
}

// forget drops the series of a shard this process no longer passes (a
// partition now assigned to another process).
func (m *metrics) forget(consumer, instance string) {
	for _, g := range []*prometheus.GaugeVec{m.position, m.lag, m.gap, m.expiry, m.parked} {
		g.DeleteLabelValues(consumer, instance)
	}
}

// stuck sets whether a handler call of consumer in this process runs past
// its threshold.
func (m *metrics) stuck(consumer string, stuck bool) {
	m.stuckNow.WithLabelValues(consumer, m.instance).Set(gaugeFlag(stuck))
}

// gaugeFlag is a 0/1 gauge's value.
func gaugeFlag(on bool) float64 {
	if on {
		return 1
	}
	return 0
}

package jobs

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/riverqueue/rivercontrib/otelriver"
)

// metrics counts attempts by job and outcome and times them:
// kumiko_job_attempts_total{job,outcome} (outcome ok or error) and
// kumiko_job_duration_seconds{job}.
type metrics struct {
	river.MiddlewareDefaults
	attempts *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

// middleware is River's middleware of a runner: spans by River's
// OpenTelemetry middleware, and the Prometheus metrics when configured.
func middleware(cfg Config) []rivertype.Middleware {
	out := []rivertype.Middleware{otelriver.NewMiddleware(&otelriver.MiddlewareConfig{
		TracerProvider:              cfg.TracerProvider,
		EnableTracePropagation:      true,
		EnableWorkSpanJobKindSuffix: true,
	})}
	if cfg.Metrics != nil {
		out = append(out, newMetrics(cfg.Metrics))
	}
	return out
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kumiko_job_attempts_total", Help: "Job attempts by job and outcome (ok, error).",
		}, []string{"job", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "kumiko_job_duration_seconds", Help: "Duration of job attempts.", Buckets: prometheus.DefBuckets,
		}, []string{"job"}),
	}
	reg.MustRegister(m.attempts, m.duration)
	return m
}

func (m *metrics) Work(ctx context.Context, job *rivertype.JobRow, doInner func(context.Context) error) error {
	start := time.Now()
	err := doInner(ctx)
	m.duration.WithLabelValues(job.Kind).Observe(time.Since(start).Seconds())
	outcome := "ok"
	if err != nil {
		outcome = "error"
	}
	m.attempts.WithLabelValues(job.Kind, outcome).Inc()
	return err
}

package pipeline_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/pipeline"
)

// Only committed events are counted; aggregate loads record their size.
func TestMetrics(t *testing.T) {
	t.Parallel()
	app := newNotes(t)
	reg := prometheus.NewRegistry()
	d, err := pipeline.New(app.Registry, app.Store, pipeline.Config{Metrics: reg})
	require.NoError(t, err)

	out, err := d.Write(ctx, alice, req("note.create", `{"title":"x"}`))
	require.NoError(t, err)
	_, err = d.Write(ctx, alice, req("note.create", `{"title":"boom-after"}`))
	require.Error(t, err, "rolled back")
	id := out.(map[string]any)["id"].(string)
	_, err = d.Command(ctx, alice, req("note.flag", `{"id":"`+id+`","version":1,"reason":"r"}`))
	require.NoError(t, err)

	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP kumiko_events_appended_total Events appended by committed requests.
# TYPE kumiko_events_appended_total counter
kumiko_events_appended_total{aggregate_type="note",event_type="note.created"} 1
kumiko_events_appended_total{aggregate_type="note",event_type="note.flagged"} 1
`), "kumiko_events_appended_total"))
	require.Equal(t, 1, testutil.CollectAndCount(reg, "kumiko_aggregate_load_events"))
	_, err = pipeline.New(app.Registry, app.Store, pipeline.Config{Metrics: reg})
	require.Error(t, err, "registering twice on one registry is refused")
}

// The tenant label of kumiko_events_appended_total is opt-in; every append
// is timed.
func TestMetricsTenantLabel(t *testing.T) {
	t.Parallel()
	app := newNotes(t)
	reg := prometheus.NewRegistry()
	d, err := pipeline.New(app.Registry, app.Store, pipeline.Config{Metrics: reg, MetricsTenantLabel: true})
	require.NoError(t, err)
	_, err = d.Write(ctx, alice, req("note.create", `{"title":"x"}`))
	require.NoError(t, err)
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP kumiko_events_appended_total Events appended by committed requests.
# TYPE kumiko_events_appended_total counter
kumiko_events_appended_total{aggregate_type="note",event_type="note.created",tenant="`+alice.User.TenantID.String()+`"} 1
`), "kumiko_events_appended_total"))
	require.Equal(t, 1, testutil.CollectAndCount(reg, "kumiko_events_appended_duration_seconds"))
	statuses, err := d.ProjectionStatuses(ctx)
	require.NoError(t, err)
	require.NotEmpty(t, statuses)
	require.Equal(t, len(statuses), testutil.CollectAndCount(reg, "kumiko_projection_lag_seconds"), "one series per projection")
}

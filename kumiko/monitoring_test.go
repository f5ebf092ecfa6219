package kumiko_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/kumiko"
	"github.com/kumiko-go/kumiko/kumikotest"
	"github.com/kumiko-go/kumiko/pipeline"
	"github.com/kumiko-go/kumiko/samples/tasks"
)

// monitored is a feature that makes every series appear: an entity
// snapshotted at every event, and a consumer that always fails.
var monitored = feature.Define("monitored", func(r *feature.Registrar) {
	r.Entity("gauge", feature.Fields{"n": feature.Number()}, feature.SnapshotEvery(1))
	r.Crud("gauge", feature.Access{Write: feature.AnyUser(), Read: feature.AnyUser()})
	r.MultiStreamProjection(feature.MultiStreamProjection{
		Name: "always-fails",
		Apply: map[string]feature.ApplyFunc{
			"gauge.created": func(feature.ApplyContext, feature.Event) error { return errors.New("refused") },
		},
	})
})

var metricName = regexp.MustCompile(`\bkumiko_[a-z_]+`)

// The Grafana dashboard and the Prometheus alert rules shipped in
// docs/monitoring name only metrics the server exports, and
// docs/operations.md lists every metric it exports.
func TestMonitoringFilesMatchMetrics(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	ctx := context.Background()
	app, err := kumiko.New(ctx, kumiko.Config{DatabaseURL: db.URL, Schema: db.Schema, JWTSecret: secret,
		Addr: "127.0.0.1:0", MetricsAddr: "127.0.0.1:0", InstanceID: "mon-1"}, tasks.Feature, monitored)
	require.NoError(t, err)
	require.NoError(t, app.Start(ctx))
	t.Cleanup(func() { _ = app.Stop(context.Background()) })

	api, user := "http://"+app.Addr()+"/api/", issue(t, []string{"User"})
	out := post(t, api+"write", user, `{"type":"task.create","payload":{"title":"m"}}`, http.StatusOK)
	var task struct{ Data struct{ ID string } }
	require.NoError(t, json.Unmarshal([]byte(out), &task))
	post(t, api+"command", user, `{"type":"task.complete","payload":{"id":"`+task.Data.ID+`","version":1}}`, http.StatusOK)
	post(t, api+"write", user, `{"type":"gauge.create","payload":{"n":1}}`, http.StatusOK)
	_, err = app.Parts().Executor.RebuildProjection(ctx, "tasks_by_month", pipeline.RebuildOptions{})
	require.NoError(t, err)

	// Every series of the server, once the consumers have had their passes.
	exported := map[string]bool{}
	deadline := time.Now().Add(10 * time.Second)
	for {
		status, body := get(t, "http://"+app.MetricsAddr()+"/metrics", "")
		require.Equal(t, http.StatusOK, status)
		clear(exported)
		for _, line := range strings.Split(body, "\n") {
			if name, ok := strings.CutPrefix(line, "# TYPE "); ok && strings.HasPrefix(name, "kumiko_") {
				exported[strings.Fields(name)[0]] = true
			}
		}
		if exported["kumiko_event_consumer_events_failed_total"] && exported["kumiko_event_consumer_delivery_latency_seconds"] {
			break
		}
		require.True(t, time.Now().Before(deadline), "consumer series never appeared: %v", exported)
		time.Sleep(20 * time.Millisecond) // polling a condition with a deadline
	}

	known := func(name string) bool {
		for _, suffix := range []string{"", "_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(name, suffix); ok && exported[base] {
				return true
			}
		}
		return false
	}
	used := map[string]bool{}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	raw, err := os.ReadFile("../docs/monitoring/grafana-dashboard.json")
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &dash))
	require.NotEmpty(t, dash.Panels)
	for _, p := range dash.Panels {
		require.NotEmpty(t, p.Targets, p.Title)
		for _, tg := range p.Targets {
			names := metricName.FindAllString(tg.Expr, -1)
			require.NotEmpty(t, names, p.Title)
			for _, n := range names {
				require.True(t, known(n), "dashboard panel %q names %s, which the server does not export", p.Title, n)
				used[n] = true
			}
		}
	}
	var rules struct {
		Groups []struct {
			Rules []struct{ Alert, Expr string }
		}
	}
	raw, err = os.ReadFile("../docs/monitoring/alerts.yml")
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(raw, &rules))
	require.NotEmpty(t, rules.Groups)
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			names := metricName.FindAllString(r.Expr, -1)
			require.NotEmpty(t, names, r.Alert)
			for _, n := range names {
				require.True(t, known(n), "alert %s names %s, which the server does not export", r.Alert, n)
			}
		}
	}

	ops, err := os.ReadFile("../docs/operations.md")
	require.NoError(t, err)
	for name := range exported {
		require.Contains(t, string(ops), "`"+name, "docs/operations.md lists %s", name)
	}
}

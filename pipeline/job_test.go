package pipeline_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/consumer"
	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/kumikotest"
	"github.com/kumiko-go/kumiko/pipeline"
	"github.com/kumiko-go/kumiko/registry"
)

type ping struct {
	N    int  `json:"n"`
	Fail bool `json:"fail,omitempty"`
}

type remindArgs struct {
	N int `json:"n"`
}

// seenJob is what a job handler saw of its context.
type seenJob struct {
	name, user, corr string
	tenant           [16]byte
	n                int
	event            string // the triggering event's type, read through Event
}

func jobFeature(seen chan<- seenJob) *feature.Feature {
	return feature.Define("pings", func(r *feature.Registrar) {
		r.DefineEvent("ping.sent", ping{})
		r.DefineEvent("ping.reminded", remindArgs{})
		r.IntegrationEvent("ping.announced", remindArgs{})
		r.Command("ping.send", ping{}, feature.Roles("User"), func(ctx feature.CommandContext, in ping) (any, error) {
			if _, err := ctx.AppendEvent(feature.AppendSpec{AggregateType: "ping", Type: "ping.sent", Payload: in}); err != nil {
				return nil, err
			}
			if err := ctx.Enqueue("ping.remind", remindArgs{N: in.N}, time.Time{}); err != nil {
				return nil, err
			}
			if in.Fail {
				return nil, errors.New("refused after the enqueue")
			}
			return nil, nil
		})
		r.Job("ping.remind", remindArgs{}, func(ctx feature.JobContext, a remindArgs) error {
			if _, err := ctx.AppendEvent(feature.AppendSpec{AggregateType: "ping", Type: "ping.reminded", Payload: a}); err != nil {
				return err
			}
			if err := ctx.Publish("ping.announced", a); err != nil {
				return err
			}
			seen <- seenJob{name: "ping.remind", user: ctx.User().ID, corr: ctx.CorrelationID(), tenant: ctx.Tenant(), n: a.N}
			return nil
		})
		r.Job("ping.count", ping{}, func(ctx feature.JobContext, p ping) error {
			ev, _ := ctx.Event()
			seen <- seenJob{name: "ping.count", user: ctx.User().ID, corr: ctx.CorrelationID(), tenant: ctx.Tenant(), n: p.N, event: ev.Type}
			return nil
		}, feature.OnEvent("ping.sent"), feature.JobAttempts(3))
	})
}

// A command enqueues a job in its transaction (none when it fails); the job
// runs as the caller with the request's correlation id, and the events it
// appends carry the request as causation. An event-triggered job gets the
// event's payload and runs as the event's user.
func TestJobsFromCommandsAndEvents(t *testing.T) {
	t.Parallel()
	seen := make(chan seenJob, 8)
	app := kumikotest.NewApp(t, []*feature.Feature{jobFeature(seen)})
	_, err := app.Executor.Command(ctx, alice, req("ping.send", `{"n":1,"fail":true}`))
	require.Error(t, err)
	require.Zero(t, app.Count(t, "SELECT count(*) FROM river_job"), "a command that fails enqueues nothing")

	_, err = app.Executor.Command(ctx, alice, req("ping.send", `{"n":7}`))
	require.NoError(t, err)
	require.Equal(t, 1, app.Count(t, "SELECT count(*) FROM river_job"))

	r := app.Executor.Jobs()
	require.NoError(t, r.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, r.Stop(context.Background())) })
	d, err := consumer.New(app.Store, consumer.Config{InstanceID: "p1", PollInterval: 20 * time.Millisecond}, app.Executor.Consumers()...)
	require.NoError(t, err)
	require.NoError(t, d.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, d.Stop(context.Background())) })

	got := map[string]seenJob{}
	for range 2 {
		select {
		case s := <-seen:
			got[s.name] = s
		case <-time.After(30 * time.Second):
			t.Fatalf("jobs ran: %v", got)
		}
	}
	want := seenJob{user: "alice", corr: "corr-alice", tenant: tenantA, n: 7}
	want.name = "ping.remind"
	require.Equal(t, want, got["ping.remind"])
	want.name, want.event = "ping.count", "ping.sent"
	require.Equal(t, want, got["ping.count"])

	sent := app.Count(t, "SELECT id FROM kumiko_events WHERE type = 'ping.sent'")
	require.Eventually(t, func() bool {
		return app.Count(t, "SELECT count(*) FROM kumiko_events WHERE type = 'ping.reminded'") == 1
	}, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, 1, app.Count(t, `SELECT count(*) FROM kumiko_events WHERE type = 'ping.reminded' AND tenant_id = $1
		AND metadata->>'correlationId' = 'corr-alice' AND metadata->>'causationId' = 'req-alice' AND metadata->>'userId' = 'alice'`, tenantA),
		"the job's event carries the request's correlation and causation")
	require.Equal(t, 1, app.Count(t, `SELECT count(*) FROM kumiko_events WHERE type = 'ping.announced' AND aggregate_type = $1
		AND metadata->>'correlationId' = 'corr-alice' AND tenant_id = $2`, pipeline.MessageStream, tenantA),
		"the job published its integration event in its transaction")
	require.Equal(t, 1, app.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'ping.count' AND args->'cause'->>'causationId' = $1`, strconv.Itoa(sent)),
		"the event-triggered job's cause is the event")
}

func TestJobBootErrors(t *testing.T) {
	t.Parallel()
	_, err := registry.Build(feature.Define("bad", func(r *feature.Registrar) {
		r.Job("bad.handler", remindArgs{}, func(ctx feature.CommandContext, a remindArgs) error { return nil })
		r.Job("bad.event", remindArgs{}, func(ctx feature.JobContext, a remindArgs) error { return nil }, feature.OnEvent("no.such"))
		r.Job("Bad Name", remindArgs{}, func(ctx feature.JobContext, a remindArgs) error { return nil })
		r.Job("bad.args", nil, func(ctx feature.JobContext, a remindArgs) error { return nil })
	}))
	require.Error(t, err)
	for _, want := range []string{`job "bad.handler"`, `"no.such", which no feature defines`, `job "Bad Name"`, `job "bad.args"`} {
		require.ErrorContains(t, err, want)
	}
}

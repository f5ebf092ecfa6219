package notifications_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/kumiko-go/kumiko/consumer"
	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/kumikotest"
	"github.com/kumiko-go/kumiko/pipeline"
	"github.com/kumiko-go/kumiko/samples/notifications"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var user = kumikotest.User(uuid.MustParse("0190a000-0000-7000-8000-00000000000a"), "ann", "User")

// receiver is a local webhook receiver that answers 503 to the first
// failures requests.
func receiver(t *testing.T, failures int32) (*httptest.Server, *atomic.Int32) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) <= failures {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	return srv, &calls
}

func start(t *testing.T, maxAttempts int) *kumikotest.App {
	t.Helper()
	app := kumikotest.NewApp(t, []*feature.Feature{notifications.New(notifications.Config{
		MaxAttempts: maxAttempts,
		Delay:       func(int) time.Duration { return 0 }, // retry at once: the test is about the history, not the wait
	})})
	d, err := consumer.New(app.Store, consumer.Config{InstanceID: "t", PollInterval: 20 * time.Millisecond}, app.Executor.Consumers()...)
	require.NoError(t, err)
	require.NoError(t, d.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, d.Stop(context.Background())) })
	r := app.Executor.Jobs()
	require.NoError(t, r.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, r.Stop(context.Background())) })
	return app
}

func sendTo(t *testing.T, app *kumikotest.App, url string) string {
	t.Helper()
	out, err := app.Executor.Command(context.Background(), user, pipeline.Request{Type: "notification.send",
		Payload: json.RawMessage(`{"url":"` + url + `","message":"Your task is due"}`)})
	require.NoError(t, err)
	return out.(map[string]any)["id"].(uuid.UUID).String()
}

func waitStatus(t *testing.T, app *kumikotest.App, id, state string) notifications.Status {
	t.Helper()
	var st notifications.Status
	require.Eventually(t, func() bool {
		out, err := app.Executor.Query(context.Background(), user, pipeline.Request{Type: "delivery.status", Payload: json.RawMessage(`{"id":"` + id + `"}`)})
		require.NoError(t, err)
		if out == nil {
			return false
		}
		st = out.(notifications.Status)
		return st.State == state
	}, 30*time.Second, 20*time.Millisecond, "delivery %s never reached %s", id, state)
	return st
}

func eventTypes(t *testing.T, app *kumikotest.App, id string) []string {
	t.Helper()
	rows, err := app.Pool.Query(context.Background(), "SELECT type FROM kumiko_events WHERE aggregate_id = $1 ORDER BY version", id)
	require.NoError(t, err)
	var out []string
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		out = append(out, s)
	}
	require.NoError(t, rows.Err())
	return out
}

// A receiver that fails twice gets the notification on the third attempt;
// the delivery's stream tells the whole story.
func TestDeliveryRetriesFromHistory(t *testing.T) {
	t.Parallel()
	app := start(t, 5)
	srv, calls := receiver(t, 2)
	id := sendTo(t, app, srv.URL)
	st := waitStatus(t, app, id, "succeeded")
	require.Equal(t, 3, st.Attempts)
	require.Equal(t, int32(3), calls.Load())
	require.Equal(t, []string{"delivery.requested",
		"delivery.attempted", "delivery.failed", "delivery.retried",
		"delivery.attempted", "delivery.failed", "delivery.retried",
		"delivery.attempted", "delivery.succeeded"}, eventTypes(t, app, id))
}

// A receiver that never answers well gets MaxAttempts attempts, then the
// delivery is failed for good.
func TestDeliveryGivesUp(t *testing.T) {
	t.Parallel()
	app := start(t, 3)
	srv, calls := receiver(t, 1000)
	id := sendTo(t, app, srv.URL)
	st := waitStatus(t, app, id, "failed")
	require.Equal(t, 3, st.Attempts)
	require.Equal(t, "receiver answered 503", st.LastError)
	require.Equal(t, int32(3), calls.Load())
}

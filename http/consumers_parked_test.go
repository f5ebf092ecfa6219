package http_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/consumer"
	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/kumikotest"
)

// An operator lists the parked streams and asks for one to be retried and
// another's failing event to be skipped; the consumer's next pass does it.
// Others are refused; a stream not parked is 404. The answers match the
// OpenAPI document.
func TestParkedStreams(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	v := openAPIValidator(t, e)
	alice := token(t, "alice", tenantA, "User")
	admin := token(t, "ada", tenantA, "Admin")
	operator := token(t, "olga", tenantA, "Operator")
	ctx := context.Background()

	// check validates an exchange's answer against the document.
	check := func(method, path, tok string, r reply) {
		t.Helper()
		req, err := http.NewRequest(method, e.srv.URL+path, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+tok)
		res := &http.Response{StatusCode: r.status, Header: r.header, Body: io.NopCloser(bytes.NewReader(r.body)), Request: req}
		ok, errs := v.ValidateHttpResponse(req, res)
		for _, ve := range errs {
			t.Errorf("%s %s → %s: %s: %s", method, path, r, ve.Message, ve.Reason)
		}
		require.True(t, ok)
	}
	r := e.do(get("/api/consumers/parked", operator))
	require.Equal(t, http.StatusOK, r.status, r.String())
	require.JSONEq(t, `{"data":[]}`, string(r.body))
	check(http.MethodGet, "/api/consumers/parked", operator, r)

	// A consumer keyed by order ("orders/<id>": a stream key with a slash)
	// that parks a failing stream.
	var failing atomic.Bool
	failing.Store(true)
	d, err := consumer.New(e.app.Store, consumer.Config{InstanceID: "p1", Logger: slog.New(slog.DiscardHandler)}, consumer.Consumer{
		Name: "mailer", Park: true, MaxAttempts: 1,
		PartitionKey: func(ev eventstore.Event) string { return "orders/" + ev.AggregateID.String() },
		Handle: func(_ context.Context, _ pgx.Tx, ev eventstore.Event) error {
			if failing.Load() {
				return errors.New("smtp down")
			}
			return nil
		},
	})
	require.NoError(t, err)
	require.NoError(t, d.Register(ctx))
	first, second := e.create(alice, "one"), e.create(alice, "two")
	kumikotest.CatchUp(t, d, "mailer")

	r = e.do(get("/api/consumers/parked", operator))
	require.Equal(t, http.StatusOK, r.status, r.String())
	check(http.MethodGet, "/api/consumers/parked", operator, r)
	var list struct{ Data []consumer.ParkedStream }
	require.NoError(t, json.Unmarshal(r.body, &list))
	require.Len(t, list.Data, 2)
	byStream := map[string]consumer.ParkedStream{}
	for _, p := range list.Data {
		byStream[p.Stream] = p
	}
	one, two := "orders/"+first["id"].(string), "orders/"+second["id"].(string)
	require.Contains(t, byStream, one)
	require.Contains(t, byStream, two)
	p := byStream[one]
	require.Equal(t, "mailer", p.Name)
	require.Equal(t, consumer.SharedInstance, p.Shard)
	require.Equal(t, "task.created", p.EventType)
	require.Contains(t, p.LastError, "smtp down")
	require.Equal(t, 1, p.Attempts)
	require.Empty(t, p.Action)

	path := func(stream, action string) string {
		return "/api/consumers/mailer/parked/" + url.PathEscape(stream) + "/" + action
	}
	failing.Store(false)
	r = e.do(request{path: path(one, "retry"), token: operator})
	require.Equal(t, http.StatusAccepted, r.status, r.String())
	require.Equal(t, one, r.data(t)["stream"])
	require.Equal(t, "retry", r.data(t)["action"])
	require.Equal(t, float64(p.EventID), r.data(t)["eventId"])
	r = e.do(request{path: path(two, "skip"), token: operator})
	require.Equal(t, http.StatusAccepted, r.status, r.String())
	require.Equal(t, "skip", r.data(t)["action"])
	r = e.do(get("/api/consumers/parked", operator))
	require.NoError(t, json.Unmarshal(r.body, &list))
	require.Len(t, list.Data, 2, "the requests wait for the next pass")

	kumikotest.CatchUp(t, d, "mailer")
	r = e.do(get("/api/consumers/parked", operator))
	require.JSONEq(t, `{"data":[]}`, string(r.body), "the next pass carried both out")
	r = e.do(get("/api/consumers", operator))
	require.Equal(t, float64(0), r.obj(t)["data"].([]any)[0].(map[string]any)["parked"])

	// Not parked (any more), unknown consumer: 404.
	r = e.do(request{path: path(one, "retry"), token: operator})
	requireProblem(t, r, http.StatusNotFound, "not_found", "stream_not_parked")
	check(http.MethodPost, path("x", "retry"), operator, r)
	requireProblem(t, e.do(request{path: "/api/consumers/nope/parked/x/skip", token: operator}), http.StatusNotFound, "not_found", "stream_not_parked")

	// No operator role, no token, another method, another action.
	requireProblem(t, e.do(get("/api/consumers/parked", alice)), http.StatusForbidden, "access_denied", "")
	requireProblem(t, e.do(get("/api/consumers/parked", admin)), http.StatusForbidden, "access_denied", "")
	requireProblem(t, e.do(get("/api/consumers/parked", "")), http.StatusUnauthorized, "unauthenticated", "")
	r = e.do(request{path: path(two, "retry"), token: admin})
	requireProblem(t, r, http.StatusForbidden, "access_denied", "")
	check(http.MethodPost, path("x", "retry"), admin, r)
	requireProblem(t, e.do(request{path: path(two, "skip"), token: ""}), http.StatusUnauthorized, "unauthenticated", "")
	requireProblem(t, e.do(request{method: http.MethodPost, path: "/api/consumers/parked", token: operator}), http.StatusMethodNotAllowed, "method_not_allowed", "")
	requireProblem(t, e.do(get(path(two, "retry"), operator)), http.StatusMethodNotAllowed, "method_not_allowed", "")
	requireProblem(t, e.do(request{path: path(two, "drop"), token: operator}), http.StatusNotFound, "not_found", "")
}

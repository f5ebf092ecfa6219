package kumiko_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/kumiko-go/kumiko/kumiko"
	"github.com/kumiko-go/kumiko/kumikotest"
	"github.com/kumiko-go/kumiko/samples/tasks"
)

// lockedBuffer is a log destination for one app, safe for its goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) records(t *testing.T, msg string) []map[string]any {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(l.b.String()), "\n") {
		var r map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &r), line)
		if r["msg"] == msg {
			out = append(out, r)
		}
	}
	return out
}

// Start-up and shutdown are logged once each; every request line names the
// request id, the trace id, and the caller's tenant and user.
func TestLogLines(t *testing.T) {
	t.Parallel()
	logs := &lockedBuffer{}
	tp := sdktrace.NewTracerProvider()
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	db := kumikotest.NewDB(t)
	ctx := context.Background()
	app, err := kumiko.New(ctx, kumiko.Config{DatabaseURL: db.URL, Schema: db.Schema, JWTSecret: secret,
		Addr: "127.0.0.1:0", MetricsAddr: "127.0.0.1:0", InstanceID: "logs-1", TracerProvider: tp,
		Logger: slog.New(slog.NewJSONHandler(logs, nil))}, tasks.Feature)
	require.NoError(t, err)
	require.NoError(t, app.Start(ctx))
	post(t, "http://"+app.Addr()+"/api/write", issue(t, []string{"User"}), `{"type":"task.create","payload":{"title":"logged"}}`, http.StatusOK)
	require.NoError(t, app.Stop(ctx))
	require.NoError(t, app.Stop(ctx))

	started := logs.records(t, "kumiko: started")
	require.Len(t, started, 1)
	require.Equal(t, app.Addr(), started[0]["addr"])
	require.Equal(t, "logs-1", started[0]["instance_id"])
	require.Len(t, logs.records(t, "kumiko: stopped"), 1)

	reqs := logs.records(t, "request")
	require.Len(t, reqs, 1)
	r := reqs[0]
	require.NotEmpty(t, r["requestId"])
	require.Len(t, r["traceId"], 32)
	require.Equal(t, testTenant, r["tenant"])
	require.Equal(t, "u-1", r["user"])
}

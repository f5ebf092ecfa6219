package kumiko

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// With the standard OTEL_* variables Main exports spans over OTLP/HTTP to
// the configured endpoint; without them, or disabled, it makes none.
func TestTracerFromEnv(t *testing.T) {
	var posts atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/v1/traces" {
			posts.Add(1)
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	ctx := context.Background()

	tp, err := tracerFromEnv(ctx, "tasks")
	require.NoError(t, err)
	require.Nil(t, tp, "no endpoint: no provider")

	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	t.Setenv("OTEL_SDK_DISABLED", "true")
	tp, err = tracerFromEnv(ctx, "tasks")
	require.NoError(t, err)
	require.Nil(t, tp, "disabled")

	t.Setenv("OTEL_SDK_DISABLED", "")
	tp, err = tracerFromEnv(ctx, "tasks")
	require.NoError(t, err)
	require.NotNil(t, tp)
	_, span := tp.Tracer("test").Start(ctx, "one")
	span.End()
	require.NoError(t, tp.Shutdown(ctx)) // flushes
	require.Equal(t, int64(1), posts.Load())
}

package ops_test

import (
	"encoding/json"
	"io"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/internal/ops"
)

// Off a terminal (a pipe, a file: production) the default logger writes
// one JSON object per line.
func TestDefaultLoggerJSONOffATerminal(t *testing.T) {
	t.Parallel()
	r, w, err := os.Pipe()
	require.NoError(t, err)
	ops.DefaultLogger(w).Info("hello", "k", 1)
	require.NoError(t, w.Close())
	line, err := io.ReadAll(r)
	require.NoError(t, err)
	var rec map[string]any
	require.NoError(t, json.Unmarshal(line, &rec), string(line))
	require.Equal(t, "hello", rec["msg"])
	require.Equal(t, float64(1), rec["k"])
}

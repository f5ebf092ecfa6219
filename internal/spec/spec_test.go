package spec_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/internal/spec"
)

func TestColumnName(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"title":           "title",
		"completedBy":     "completed_by",
		"userID":          "user_id",
		"httpStatusCode":  "http_status_code",
		"getHTTPResponse": "get_http_response",
		"line2Total":      "line2_total",
		"a":               "a",
	} {
		require.Equal(t, want, spec.ColumnName(in), in)
	}
}

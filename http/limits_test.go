package http_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/registry"
)

// unknownFields is a task.create envelope whose payload has n unknown
// fields and no title.
func unknownFields(n int) string {
	var b strings.Builder
	b.WriteString(`{"type":"task.create","payload":{`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"x%d":1`, i)
	}
	b.WriteString(`}}`)
	return b.String()
}

// 70,000 unknown fields answer a short problem: 50 entries and the total,
// and the request's log line stays short too.
func TestValidationErrorListIsCapped(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	alice := token(t, "alice", tenantA, "User")
	body := unknownFields(70_000)
	require.Less(t, len(body), 1<<20, "the body fits the body limit")

	r := e.post("/api/write", alice, body)
	p := requireProblem(t, r, 400, "validation_error", "")
	require.Equal(t, registry.MaxFieldErrors, len(p["fields"].([]any)))
	require.Equal(t, float64(70_000+1), p["fieldsTotal"], "every unknown field and the missing title")
	require.Less(t, len(r.body), 16<<10, "the answer is small")
	refused := e.logs.lines(map[string]any{"msg": "request refused"})
	require.NotEmpty(t, refused)
	for _, line := range refused {
		require.Less(t, len(fmt.Sprint(line)), 16<<10, "the log line is small")
	}

	// A short list is complete, and says so.
	p = requireProblem(t, e.post("/api/write", alice, unknownFields(2)), 400, "validation_error", "")
	require.Len(t, p["fields"], 3)
	require.Equal(t, float64(3), p["fieldsTotal"])
	require.Zero(t, e.events())
}

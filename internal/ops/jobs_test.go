package ops_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/jobs"
	"github.com/kumiko-go/kumiko/kumikotest"
	"github.com/kumiko-go/kumiko/samples/tasks"
)

// A failing job retries with growing delays, ends discarded after its
// attempts, and the operator sees it, retries it, runs a job by hand and
// cancels it through the app's binary.
func TestJobCommands(t *testing.T) {
	t.Parallel()
	bin := tasksBinary(t)
	app := kumikotest.NewApp(t, []*feature.Feature{tasks.Feature, tasks.Reminders})
	failing, err := jobs.New(app.Store, jobs.Config{
		Logger: slog.New(slog.DiscardHandler), PollInterval: 20 * time.Millisecond,
		Backoff: func(n int) time.Duration { return 30 * time.Millisecond << (n - 1) },
	}, jobs.Job{Name: "webhook.send", MaxAttempts: 3, Work: func(context.Context, jobs.Run) error {
		return errors.New("receiver answered 503")
	}})
	require.NoError(t, err)
	require.NoError(t, failing.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, failing.Stop(context.Background())) })
	e, err := failing.Enqueue(t.Context(), "webhook.send", nil, jobs.Options{})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		in, err := failing.Get(t.Context(), e.ID)
		require.NoError(t, err)
		return in.State == "discarded"
	}, 30*time.Second, 10*time.Millisecond)

	env := cliEnv(app.DB)
	ok := func(args ...string) string {
		t.Helper()
		r := runCLI(t, bin, env, args...)
		require.Equal(t, 0, r.code, "%v: stdout:\n%s\nstderr:\n%s", args, r.stdout, r.stderr)
		return r.stdout
	}
	id := strconv.FormatInt(e.ID, 10)
	out := ok("job", "list", "--state", "discarded")
	require.Regexp(t, `(?m)^`+id+`\s+webhook\.send\s+discarded\s+3/3\s+.*receiver answered 503$`, out)
	out = ok("job", "show", id)
	for n := 1; n <= 3; n++ {
		require.Contains(t, out, fmt.Sprintf("attempt %d at ", n))
	}
	var shown jobs.Info
	require.NoError(t, json.Unmarshal([]byte(ok("job", "show", id, "--json")), &shown))
	require.Len(t, shown.Errors, 3) // the growing delays between them: jobs.TestFailingJobRetriesThenDiscards

	require.Contains(t, ok("job", "retry", id), "available")
	require.Eventually(t, func() bool {
		in, err := failing.Get(t.Context(), e.ID)
		require.NoError(t, err)
		return in.State == "discarded" && len(in.Errors) == 4
	}, 30*time.Second, 10*time.Millisecond, "the retried job ran once more")

	out = ok("job", "run", "task.daily-digest", "--at", time.Now().Add(time.Hour).UTC().Format(time.RFC3339))
	var digest int64
	_, err = fmt.Sscanf(out, "enqueued task.daily-digest as job %d", &digest)
	require.NoError(t, err, out)
	require.Contains(t, ok("job", "cancel", strconv.FormatInt(digest, 10)), "cancelled")

	r := runCLI(t, bin, env, "job", "run", "no.such")
	require.NotZero(t, r.code)
	require.Contains(t, r.stderr, "unknown job")
	r = runCLI(t, bin, env, "job", "show", "999999")
	require.NotZero(t, r.code)
	require.Contains(t, r.stderr, "not found")
}

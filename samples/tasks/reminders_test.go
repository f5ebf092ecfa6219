package tasks_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/consumer"
	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/jobs"
	"github.com/kumiko-go/kumiko/kumikotest"
	"github.com/kumiko-go/kumiko/samples/tasks"
)

// startJobs delivers events to the app's consumers (the jobs' trigger
// among them) and works its jobs until the test ends.
func startJobs(t *testing.T, app *kumikotest.App) *jobs.Runner {
	t.Helper()
	d, err := consumer.New(app.Store, consumer.Config{InstanceID: "t", PollInterval: 20 * time.Millisecond}, app.Executor.Consumers()...)
	require.NoError(t, err)
	require.NoError(t, d.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, d.Stop(context.Background())) })
	r := app.Executor.Jobs()
	require.NoError(t, r.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, r.Stop(context.Background())) })
	return r
}

// A task still open at its due time gets a reminder, in its tenant and as
// the user who set the time; a task done before it does not.
func TestReminderAtDueTime(t *testing.T) {
	t.Parallel()
	app := kumikotest.NewApp(t, []*feature.Feature{tasks.Feature, tasks.Reminders})
	d := app.Executor
	due := time.Now().Add(500 * time.Millisecond).UTC().Format(time.RFC3339Nano)
	open, err := do(t, d.Write, "task.create", fmt.Sprintf(`{"title":"Pay the rent","dueAt":%q}`, due))
	require.NoError(t, err)
	done, err := do(t, d.Write, "task.create", fmt.Sprintf(`{"title":"Water plants","dueAt":%q}`, due))
	require.NoError(t, err)
	_, err = do(t, d.Command, "task.complete", fmt.Sprintf(`{"id":%q,"version":1}`, done["id"]))
	require.NoError(t, err)
	startJobs(t, app)

	require.Eventually(t, func() bool {
		return app.Count(t, "SELECT count(*) FROM kumiko_events WHERE type = 'reminder.due'") == 1
	}, 30*time.Second, 20*time.Millisecond)
	require.Equal(t, 1, app.Count(t, `SELECT count(*) FROM kumiko_events WHERE type = 'reminder.due'
		AND payload->>'taskId' = $1 AND payload->>'title' = 'Pay the rent' AND tenant_id = $2 AND metadata->>'userId' = 'u-1'`, open["id"], tenant))
	require.Eventually(t, func() bool {
		return app.Count(t, "SELECT count(*) FROM river_job WHERE kind = 'task.remind' AND state = 'completed'") == 2
	}, 30*time.Second, 20*time.Millisecond, "both reminders ran; the done task's appended nothing")
	require.Equal(t, 1, app.Count(t, "SELECT count(*) FROM kumiko_events WHERE type = 'reminder.due'"))
}

// The digest runs by hand like on its schedule, in the system tenant.
func TestDigestByHand(t *testing.T) {
	t.Parallel()
	app := kumikotest.NewApp(t, []*feature.Feature{tasks.Feature, tasks.Reminders})
	_, err := do(t, app.Executor.Write, "task.create", `{"title":"One"}`)
	require.NoError(t, err)
	r := startJobs(t, app)
	_, err = r.Enqueue(t.Context(), "task.daily-digest", nil, jobs.Options{})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return app.Count(t, "SELECT count(*) FROM kumiko_events WHERE type = 'digest.compiled' AND (payload->>'open')::int = 1") == 1
	}, 30*time.Second, 20*time.Millisecond)
}

// A reminder for one (task, due time) exists once, however often the task
// is saved with it: two saves with the same due time, each an event that
// plans the reminder with a cause of its own, leave one task.remind job;
// moving the due time plans a second.
func TestTwoSavesPlanOneReminder(t *testing.T) {
	t.Parallel()
	app := kumikotest.NewApp(t, []*feature.Feature{tasks.Feature, tasks.Reminders})
	d := app.Executor
	due := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	task, err := do(t, d.Write, "task.create", fmt.Sprintf(`{"title":"Pay the rent","dueAt":%q}`, due.Format(time.RFC3339)))
	require.NoError(t, err)
	_, err = do(t, d.Write, "task.update", fmt.Sprintf(`{"id":%q,"version":1,"changes":{"title":"Pay the rent today","dueAt":%q}}`, task["id"], due.Format(time.RFC3339)))
	require.NoError(t, err)
	startJobs(t, app)

	planned := func(n int) {
		t.Helper()
		require.Eventually(t, func() bool {
			return app.Count(t, "SELECT count(*) FROM river_job WHERE kind = 'task.plan-reminder' AND state = 'completed'") == n
		}, 30*time.Second, 20*time.Millisecond, "%d saves planned their reminder", n)
	}
	planned(2)
	require.Equal(t, 1, app.Count(t, "SELECT count(*) FROM river_job WHERE kind = 'task.remind'"), "two saves with one due time plan one reminder")
	require.Equal(t, 1, app.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'task.remind' AND state = 'scheduled'
		AND args->'args'->>'taskId' = $1 AND args->'cause'->>'tenantId' = $2`, task["id"], tenant.String()))

	moved := due.Add(time.Hour)
	_, err = do(t, d.Write, "task.update", fmt.Sprintf(`{"id":%q,"version":2,"changes":{"dueAt":%q}}`, task["id"], moved.Format(time.RFC3339)))
	require.NoError(t, err)
	planned(3)
	require.Equal(t, 2, app.Count(t, "SELECT count(*) FROM river_job WHERE kind = 'task.remind'"), "a moved due time plans a second reminder")
	require.Equal(t, 1, app.Count(t, "SELECT count(*) FROM river_job WHERE kind = 'task.remind' AND scheduled_at = $1", moved))
}

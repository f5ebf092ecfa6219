package console

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/jobs"
)

// The jobs page words each case of a runner's health: worked, worked but
// falling behind (a note), nobody working with a stale leader or none
// (warnings), a count past the cap, paused queues.
func TestDescribeJobs(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	oldest := jobs.OverdueJob{ID: 7, Name: "task.remind", State: "available", ScheduledAt: at.Add(-95 * time.Minute), Waited: 95*time.Minute + 40*time.Second}
	for _, c := range []struct {
		name                 string
		h                    jobs.Health
		level, line, overdue string
		detail, paused       string
	}{
		{name: "worked", h: jobs.Health{Live: true, Leader: "web_1", LeaderSince: at.Add(-time.Hour), At: at},
			level: "worked", line: "Jobs are being worked (leader web_1, since 2026-03-01 11:00:00 UTC)."},
		{name: "behind", h: jobs.Health{Live: true, Leader: "web_1", LeaderSince: at.Add(-time.Hour), Overdue: 12, Oldest: oldest, At: at},
			level: "behind", line: "Jobs are being worked (leader web_1, since 2026-03-01 11:00:00 UTC).",
			overdue: "12 jobs have waited more than 1 min past their time (oldest: task.remind, 1 h 35 min): the workers are falling behind."},
		{name: "nobody, never", h: jobs.Health{Overdue: 1, Oldest: jobs.OverdueJob{Name: "task.remind", Waited: 61 * time.Second}, At: at},
			level: "unworked", line: "No process is working jobs.",
			detail:  "No serve or worker process of the app is running, or none could start its job runner. Start one and check its log.",
			overdue: "1 job has waited past its time with nobody working them (oldest: task.remind, 1 min)."},
		{name: "nobody since a crash", h: jobs.Health{Leader: "worker_2", LeaderUntil: at.Add(-time.Minute), Overdue: 10_000, OverdueCapped: true,
			Oldest: jobs.OverdueJob{Name: "digest", Waited: 50 * time.Hour}, At: at},
			level: "unworked", line: "No process is working jobs.",
			detail:  "The last leader, worker_2, stopped renewing its term at 2026-03-01 11:59:00 UTC: it crashed or lost the database. Start serve or worker and check its log.",
			overdue: "10000 or more jobs have waited past their time with nobody working them (oldest: digest, 2 days 2 h)."},
		{name: "paused", h: jobs.Health{Live: true, Leader: "web_1", LeaderSince: at, PausedQueues: []string{"default"}, At: at},
			level: "worked", line: "Jobs are being worked (leader web_1, since 2026-03-01 12:00:00 UTC).",
			paused: "Paused queues: default. Their jobs wait until the queue is resumed in River's UI."},
	} {
		st := describeJobs(c.h, time.Minute)
		require.Equal(t, c.level, st.Level, c.name)
		require.Equal(t, c.line, st.Line, c.name)
		require.Equal(t, c.detail, st.Detail, c.name)
		require.Equal(t, c.overdue, st.OverdueText, c.name)
		require.Equal(t, c.paused, st.PausedText, c.name)
		require.NotNil(t, st.PausedQueues, c.name)
		require.Equal(t, c.h.Overdue > 0, st.Oldest != nil, c.name)
	}
}

package jobs

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// OverdueAfter is the threshold operators are warned at: a job still
// waiting this long after its scheduled time is overdue. A worked queue
// picks a job up within milliseconds of its time or of a free worker, so a
// minute leaves room for bursts and slow polls and still shows a queue that
// nobody works well before anyone would notice otherwise.
const OverdueAfter = time.Minute

// overdueCountCap is where Health stops counting overdue jobs, so a check
// stays cheap however large the backlog (Health.OverdueCapped).
const overdueCountCap = 10_000

// electionGap is how long after the leader's term ran out Health still
// counts the processes as live. River's followers try to take the
// leadership over every 5 to 6 s, and the first try after the term ran out
// deletes the stale row and writes its own; so while any process runs, a
// term is never stale for longer than that.
const electionGap = 10 * time.Second

// Health is whether any process is working an application's jobs, and the
// jobs waiting past their time; see Runner.Health.
type Health struct {
	// Live: some process is working jobs (River's leader holds a current
	// term).
	Live bool
	// Leader is River's id of the process that holds, or last held, the
	// leadership (by default its host name and start time); empty when no
	// process has held it since the last one stopped cleanly.
	Leader string
	// LeaderSince is when Leader was elected.
	LeaderSince time.Time
	// LeaderUntil is when Leader's term ends unless it renews it (it renews
	// every 5 s, 15 s ahead); in the past when it stopped renewing.
	LeaderUntil time.Time
	// Overdue counts the jobs waiting longer than the threshold past their
	// scheduled time: available, scheduled or retryable. It stops counting
	// at 10,000 (OverdueCapped).
	Overdue int
	// OverdueCapped is set when Overdue stopped counting at the cap.
	OverdueCapped bool
	// Oldest is the overdue job that has waited longest; the zero value
	// when Overdue is 0.
	Oldest OverdueJob
	// PausedQueues are the queues paused in River's UI: their jobs wait
	// while the processes are live.
	PausedQueues []string
	// At is the database's time of the check; every time above is on the
	// database's clock.
	At time.Time
}

// OverdueJob is a job waiting past its scheduled time.
type OverdueJob struct {
	// ID is River's job id.
	ID int64
	// Name is the job's name (River's kind).
	Name string
	// State is River's state: available, scheduled or retryable.
	State string
	// ScheduledAt is when the job was due.
	ScheduledAt time.Time
	// Waited is how long past ScheduledAt the job has waited so far.
	Waited time.Duration
}

// Health tells whether any process is working the jobs of r's schema, and
// counts the jobs that have waited more than overdueAfter past their
// scheduled time (OverdueAfter when overdueAfter is not positive). It reads
// River's tables in one statement and needs no started Runner: the console
// and the CLI ask it from any process.
//
// Live is read from River's leader row (river_leader): every started
// process takes part in River's leader election, and only a process that
// works jobs can start, so a current term means at least one process
// works them. The leader renews its term every 5 s, 15 s ahead; a process
// that stops cleanly gives its term up at once. So Live turns false at once
// when the last process stops, and up to 25 s (the 15 s term and a 10 s
// grace for a follower's takeover) after the last one died. River's queue
// rows (river_queue) are not used: their update time is refreshed when a
// process starts and then only every ten minutes. River keeps no row per
// process, so Health cannot count the live processes, only tell that one
// is and which one leads.
//
// River's leader also moves scheduled and retryable jobs to available when
// their time comes, so jobs piling up in any of the three states past
// their time while Live is false mean that nobody works them; while Live is
// true, they mean the workers fall behind (or their queue is paused).
func (r *Runner) Health(ctx context.Context, overdueAfter time.Duration) (Health, error) {
	if overdueAfter <= 0 {
		overdueAfter = OverdueAfter
	}
	var (
		h                    Health
		leader               *string
		since, until         *time.Time
		oldestID             *int64
		oldestName, oldestSt *string
		oldestAt             *time.Time
	)
	err := r.store.Pool().QueryRow(ctx, healthQuery(r.store.Schema()), overdueAfter.Seconds(), overdueCountCap).Scan(
		&h.At, &leader, &since, &until, &h.Overdue, &oldestID, &oldestName, &oldestSt, &oldestAt, &h.PausedQueues)
	if err != nil {
		return Health{}, fmt.Errorf("jobs: health: %w", err)
	}
	if leader != nil {
		h.Leader, h.LeaderSince, h.LeaderUntil = *leader, *since, *until
		h.Live = h.LeaderUntil.After(h.At.Add(-electionGap))
	}
	h.OverdueCapped = h.Overdue >= overdueCountCap
	if oldestID != nil {
		h.Oldest = OverdueJob{ID: *oldestID, Name: *oldestName, State: *oldestSt, ScheduledAt: *oldestAt, Waited: h.At.Sub(*oldestAt)}
	}
	return h, nil
}

// healthQuery is Health's statement on River's tables in schema: the
// database's time, the leader row (if any), the overdue count (capped at
// $2), the oldest overdue job (if any) and the paused queues. $1 is the
// threshold in seconds.
func healthQuery(schema string) string {
	return strings.NewReplacer("{s}", pgx.Identifier{schema}.Sanitize()).Replace(`
SELECT now(), l.leader_id, l.elected_at, l.expires_at,
	(SELECT count(*) FROM (SELECT 1 FROM {s}.river_job
		WHERE state IN ('available', 'scheduled', 'retryable') AND scheduled_at < now() - make_interval(secs => $1)
		LIMIT $2) o),
	j.id, j.kind, j.state::text, j.scheduled_at,
	ARRAY(SELECT name FROM {s}.river_queue WHERE paused_at IS NOT NULL ORDER BY name)
FROM (VALUES (1)) one
LEFT JOIN {s}.river_leader l ON true
LEFT JOIN LATERAL (SELECT id, kind, state, scheduled_at FROM {s}.river_job
	WHERE state IN ('available', 'scheduled', 'retryable') AND scheduled_at < now() - make_interval(secs => $1)
	ORDER BY scheduled_at, id LIMIT 1) j ON true`)
}

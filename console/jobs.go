package console

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/kumiko-go/kumiko/jobs"
)

// The levels of the jobs page's status.
const (
	// jobsWorked: a process works jobs and none is overdue.
	jobsWorked = "worked"
	// jobsBehind: a process works jobs, but some have waited past the
	// threshold (the workers fall behind, or a queue is paused).
	jobsBehind = "behind"
	// jobsUnworked: no process works jobs.
	jobsUnworked = "unworked"
	// jobsUnknown: the status could not be read.
	jobsUnknown = "unknown"
)

// jobStatus is what the jobs page's status line shows (and its JSON form):
// the facts of jobs.Runner.Health and the sentences the page shows, made
// here so that the first render and the live updates say the same.
type jobStatus struct {
	Level         string      `json:"level"`
	Live          bool        `json:"live"`
	Leader        string      `json:"leader,omitempty"`
	LeaderSince   time.Time   `json:"leaderSince,omitzero"`
	LeaderUntil   time.Time   `json:"leaderUntil,omitzero"`
	Overdue       int         `json:"overdue"`
	OverdueCapped bool        `json:"overdueCapped"`
	Oldest        *overdueJob `json:"oldest,omitempty"`
	PausedQueues  []string    `json:"pausedQueues"`
	// OverdueAfterSeconds is the threshold past a job's time at which it
	// counts as overdue.
	OverdueAfterSeconds float64   `json:"overdueAfterSeconds"`
	CheckedAt           time.Time `json:"checkedAt"`

	// Line says whether jobs are being worked; Detail, when set, what to
	// do about it.
	Line   string `json:"line"`
	Detail string `json:"detail"`
	// OverdueText, when set, is the warning (nobody works them) or the
	// note (the workers fall behind) about the overdue jobs.
	OverdueText string `json:"overdueText"`
	// PausedText, when set, names the paused queues.
	PausedText string `json:"pausedText"`
}

// overdueJob is the overdue job that has waited longest.
type overdueJob struct {
	ID            int64     `json:"id"`
	Name          string    `json:"name"`
	State         string    `json:"state"`
	ScheduledAt   time.Time `json:"scheduledAt"`
	WaitedSeconds float64   `json:"waitedSeconds"`
}

// jobsView is the jobs page's own part of its view.
type jobsView struct {
	// Status is nil when the app gave the console no runner.
	Status *jobStatus
	// UI: River's UI is mounted, and framed below the status.
	UI bool
}

// jobsPage is the path of the console's jobs page, under the prefix; River's
// UI keeps /jobs/ (jobs.UIPath).
const jobsPage = "/jobs-status"

// hasJobsPage: the app has jobs the console knows of.
func (c *Console) hasJobsPage() bool { return c.cfg.JobsRunner != nil || c.cfg.JobsUI != nil }

// GET /jobs-status: the status line over River's UI.
func (c *Console) jobsPage(w http.ResponseWriter, r *http.Request, s session) {
	v := c.view(r, s, "jobs", "Jobs")
	jv := &jobsView{UI: c.cfg.JobsUI != nil}
	if c.cfg.JobsRunner != nil {
		st, err := c.jobStatus(r.Context())
		if err != nil {
			c.cfg.Logger.Error("console: jobs status", "err", err)
			st = jobStatus{Level: jobsUnknown, Line: "The jobs' status could not be read.",
				Detail: "The server log has the cause; the page tries again.", PausedQueues: []string{}}
		}
		jv.Status = &st
	}
	v.JobsPage = jv
	c.execute(w, http.StatusOK, "jobs", v)
}

// GET /jobs-status/data: the status as JSON, {"data": status}.
func (c *Console) jobsData(w http.ResponseWriter, r *http.Request, _ session) {
	st, err := c.jobStatus(r.Context())
	if err != nil {
		fail(w, c, "jobs status", err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"data": st})
}

// jobsState is the jobs page's live state.
func (c *Console) jobsState(r *http.Request) (any, error) { return c.jobStatus(r.Context()) }

// jobStatus reads the runner's health and words it.
func (c *Console) jobStatus(ctx context.Context) (jobStatus, error) {
	h, err := c.cfg.JobsRunner.Health(ctx, jobs.OverdueAfter)
	if err != nil {
		return jobStatus{}, err
	}
	return describeJobs(h, jobs.OverdueAfter), nil
}

// describeJobs words h, whose overdue jobs waited more than after.
func describeJobs(h jobs.Health, after time.Duration) jobStatus {
	st := jobStatus{
		Live: h.Live, Leader: h.Leader, LeaderSince: h.LeaderSince, LeaderUntil: h.LeaderUntil,
		Overdue: h.Overdue, OverdueCapped: h.OverdueCapped, PausedQueues: h.PausedQueues,
		OverdueAfterSeconds: after.Seconds(), CheckedAt: h.At,
	}
	if st.PausedQueues == nil {
		st.PausedQueues = []string{}
	}
	switch {
	case h.Live:
		st.Level = jobsWorked
		st.Line = fmt.Sprintf("Jobs are being worked (leader %s, since %s).", h.Leader, clock(h.LeaderSince))
	case h.Leader != "":
		st.Level = jobsUnworked
		st.Line = "No process is working jobs."
		st.Detail = fmt.Sprintf("The last leader, %s, stopped renewing its term at %s: it crashed or lost the database. "+
			"Start serve or worker and check its log.", h.Leader, clock(h.LeaderUntil))
	default:
		st.Level = jobsUnworked
		st.Line = "No process is working jobs."
		st.Detail = "No serve or worker process of the app is running, or none could start its job runner. Start one and check its log."
	}
	if h.Overdue > 0 {
		st.Oldest = &overdueJob{ID: h.Oldest.ID, Name: h.Oldest.Name, State: h.Oldest.State,
			ScheduledAt: h.Oldest.ScheduledAt, WaitedSeconds: h.Oldest.Waited.Seconds()}
		n, their := fmt.Sprintf("%d jobs have", h.Overdue), "their"
		switch {
		case h.OverdueCapped:
			n = fmt.Sprintf("%d or more jobs have", h.Overdue)
		case h.Overdue == 1:
			n, their = "1 job has", "its"
		}
		oldest := fmt.Sprintf("(oldest: %s, %s)", h.Oldest.Name, waited(h.Oldest.Waited))
		if h.Live {
			st.Level = jobsBehind
			st.OverdueText = fmt.Sprintf("%s waited more than %s past %s time %s: the workers are falling behind.", n, waited(after), their, oldest)
		} else {
			st.OverdueText = fmt.Sprintf("%s waited past %s time with nobody working them %s.", n, their, oldest)
		}
	}
	if len(h.PausedQueues) > 0 {
		st.PausedText = "Paused queues: " + strings.Join(h.PausedQueues, ", ") +
			". Their jobs wait until the queue is resumed in River's UI."
	}
	return st
}

// clock is a time as the page shows it: to the second, in UTC.
func clock(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05 UTC") }

// waited is how long a job has waited, to the minute: the status line is
// a live region, announced when its words change.
func waited(d time.Duration) string {
	m := int(d / time.Minute)
	switch {
	case m < 1:
		return fmt.Sprintf("%d s", int(d/time.Second))
	case m < 60:
		return fmt.Sprintf("%d min", m)
	case m < 48*60:
		return fmt.Sprintf("%d h %d min", m/60, m%60)
	}
	return fmt.Sprintf("%d days %d h", m/(24*60), m%(24*60)/60)
}

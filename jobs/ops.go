package jobs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
)

// Info is a job as operators see it.
type Info struct {
	ID          int64     `json:"id"`
	Name        string    `json:"name"`
	State       string    `json:"state"` // available, scheduled, running, retryable, completed, cancelled, discarded
	Attempt     int       `json:"attempt"`
	MaxAttempts int       `json:"maxAttempts"`
	CreatedAt   time.Time `json:"createdAt"`
	ScheduledAt time.Time `json:"scheduledAt"`
	// AttemptedAt is when the last attempt started; zero before the first.
	AttemptedAt time.Time `json:"attemptedAt"`
	// FinalizedAt is when the job completed, was cancelled or discarded.
	FinalizedAt time.Time `json:"finalizedAt"`
	// Errors are the failed attempts' errors, oldest first.
	Errors []AttemptError `json:"errors"`
	Cause  Cause          `json:"cause"`
}

// AttemptError is the error of one failed attempt.
type AttemptError struct {
	Attempt int       `json:"attempt"`
	At      time.Time `json:"at"`
	Error   string    `json:"error"`
}

// ListParams narrow List. The zero value lists the newest 100 jobs.
type ListParams struct {
	// Name limits the list to one job.
	Name string
	// States limits the list to jobs in these states.
	States []string
	// Limit caps the list; default 100.
	Limit int
}

// ErrNotFound is returned for a job id River does not have.
var ErrNotFound = errors.New("jobs: job not found")

// List returns jobs, newest first.
func (r *Runner) List(ctx context.Context, p ListParams) ([]Info, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = 100
	}
	lp := river.NewJobListParams().First(limit).OrderBy(river.JobListOrderByID, river.SortOrderDesc)
	if p.Name != "" {
		lp = lp.Kinds(p.Name)
	}
	if len(p.States) > 0 {
		states := make([]rivertype.JobState, len(p.States))
		for i, s := range p.States {
			states[i] = rivertype.JobState(s)
		}
		lp = lp.States(states...)
	}
	res, err := r.client.JobList(ctx, lp)
	if err != nil {
		return nil, fmt.Errorf("jobs: list: %w", err)
	}
	out := make([]Info, len(res.Jobs))
	for i, j := range res.Jobs {
		out[i] = info(j)
	}
	return out, nil
}

// Get returns one job.
func (r *Runner) Get(ctx context.Context, id int64) (Info, error) {
	j, err := r.client.JobGet(ctx, id)
	return r.answer(j, err, "get", id)
}

// Cancel cancels a job that has not finished; a running job's context is
// cancelled. Cancelling a finished job changes nothing.
func (r *Runner) Cancel(ctx context.Context, id int64) (Info, error) {
	j, err := r.client.JobCancel(ctx, id)
	return r.answer(j, err, "cancel", id)
}

// Retry makes a job available at once, also a discarded, cancelled or
// completed one; a running job is left alone.
func (r *Runner) Retry(ctx context.Context, id int64) (Info, error) {
	j, err := r.client.JobRetry(ctx, id)
	return r.answer(j, err, "retry", id)
}

func (r *Runner) answer(j *rivertype.JobRow, err error, op string, id int64) (Info, error) {
	if errors.Is(err, river.ErrNotFound) {
		return Info{}, fmt.Errorf("%w: %d", ErrNotFound, id)
	}
	if err != nil {
		return Info{}, fmt.Errorf("jobs: %s %d: %w", op, id, err)
	}
	return info(j), nil
}

func info(j *rivertype.JobRow) Info {
	in := Info{
		ID: j.ID, Name: j.Kind, State: string(j.State), Attempt: j.Attempt, MaxAttempts: j.MaxAttempts,
		CreatedAt: j.CreatedAt, ScheduledAt: j.ScheduledAt,
	}
	if j.AttemptedAt != nil {
		in.AttemptedAt = *j.AttemptedAt
	}
	if j.FinalizedAt != nil {
		in.FinalizedAt = *j.FinalizedAt
	}
	for _, e := range j.Errors {
		in.Errors = append(in.Errors, AttemptError{Attempt: e.Attempt, At: e.At, Error: e.Error})
	}
	var env envelope
	if err := jsonUnmarshal(j.EncodedArgs, &env); err == nil {
		in.Cause = env.Cause
	}
	return in
}

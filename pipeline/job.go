package pipeline

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/jobs"
	"github.com/kumiko-go/kumiko/registry"
)

// ErrNoJobs is returned by Enqueue in an application that declares no
// jobs, or whose executor was given no runner (see UseJobs).
var ErrNoJobs = errors.New("pipeline: the application declares no jobs")

// Jobs is the runner the executor enqueues on (see UseJobs); nil until
// one is given, and in an application that declares no jobs.
func (d *Executor) Jobs() *jobs.Runner { return d.jobs }

// UseJobs makes r the runner of the registry's jobs: the one
// CommandContext.Enqueue inserts into and whose event trigger Consumers
// includes. Build r with jobs.New on the executor's store and
// JobDefinitions; call UseJobs once, before the executor serves and before
// Consumers. The kumiko facade and kumikotest.NewApp do both.
func (d *Executor) UseJobs(r *jobs.Runner) { d.jobs = r }

// JobDefinitions is the registry's jobs as jobs.New takes them; nil when
// the application declares none. Each runs its handler in a transaction of
// its own, in the tenant and as the user of its cause, and the job's
// completion commits in that transaction (jobs.Run.CompleteTx): its
// database writes happen exactly once.
func (d *Executor) JobDefinitions() []jobs.Job {
	var defs []jobs.Job
	for _, j := range d.reg.Jobs() {
		defs = append(defs, jobs.Job{
			Name: j.Name(), On: j.On(), Schedule: j.Schedule(), MaxAttempts: j.MaxAttempts(), UniqueFor: j.UniqueFor(), Timeout: j.Timeout(),
			Exclusive: j.Exclusive(),
			Work:      func(ctx context.Context, run jobs.Run) error { return d.runJob(ctx, j, run) },
		})
	}
	return defs
}

func (d *Executor) runJob(ctx context.Context, j *registry.Job, run jobs.Run) error {
	c := &Caller{
		User:          feature.User{ID: run.Cause.UserID, TenantID: run.Cause.TenantID, Authenticated: run.Cause.UserID != ""},
		CorrelationID: run.Cause.CorrelationID,
	}
	err := d.store.WithTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		if err := scopeTenant(ctx, tx, run.Cause.TenantID); err != nil {
			return err
		}
		jc := &jobContext{
			commandContext: commandContext{ctx: ctx, tx: tx, d: d, c: c, feature: j.Feature(), causation: run.Cause.CausationID},
			attempt:        run.Attempt,
			event:          run.Event,
		}
		if err := j.Run(jc, run.Args); err != nil {
			return err
		}
		// The job's completion commits with its writes, or neither does.
		return run.CompleteTx(ctx, tx)
	})
	if err != nil {
		return err
	}
	d.metrics.committed(c.appended)
	return nil
}

// jobContext is the feature.JobContext of one job attempt.
type jobContext struct {
	commandContext
	attempt int
	event   int64 // the triggering event's id; 0 = none
}

var _ feature.JobContext = (*jobContext)(nil)

func (jc *jobContext) Attempt() int { return jc.attempt }

func (jc *jobContext) Event() (feature.Event, bool) {
	if jc.event == 0 {
		return feature.Event{}, false
	}
	evs, err := jc.d.store.ReadRangeTx(jc.ctx, jc.tx, jc.event-1, jc.event, 1)
	if err != nil || len(evs) == 0 || evs[0].TenantID != jc.Tenant() {
		return feature.Event{}, false
	}
	return evs[0], true
}

// Enqueue implements feature.CommandContext: the job is inserted in the
// request transaction and runs as the caller.
func (cc *commandContext) Enqueue(job string, args any, runAt time.Time) error {
	if cc.d.jobs == nil {
		return fmt.Errorf("enqueue %s: %w", job, ErrNoJobs)
	}
	causation := cc.causation
	if causation == "" {
		causation = cc.c.RequestID
	}
	_, err := cc.d.jobs.EnqueueTx(cc.ctx, cc.tx, job, args, jobs.Options{RunAt: runAt, Cause: jobs.Cause{
		TenantID: cc.c.User.TenantID, UserID: cc.c.User.ID, CorrelationID: cc.c.CorrelationID, CausationID: causation,
	}})
	return err
}

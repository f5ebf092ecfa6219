package feature

import (
	"context"
	"fmt"
	"reflect"
	"time"

	"github.com/google/uuid"

	"github.com/kumiko-go/kumiko/internal/spec"
)

// JobContext is what a job's handler works with: a transaction of its own,
// committed when the handler returns nil, in the tenant and as the user that
// caused the job. Events it appends carry the cause's correlation id and
// the causing event (or request) as causation.
type JobContext interface {
	Context() context.Context
	// DB is the job's transaction.
	DB() DB
	// Tenant is the tenant the job runs in: the causing event's or
	// request's, the system tenant for scheduled and manual runs.
	Tenant() uuid.UUID
	// User is the user that caused the job (unauthenticated for scheduled
	// runs).
	User() User
	CorrelationID() string
	// Attempt counts the job's attempts from 1.
	Attempt() int
	// Event is the event that enqueued an OnEvent job, read upcast; false
	// for other jobs, or when the event is gone (pruned).
	Event() (Event, bool)
	// AppendEvent appends an event in the job's tenant, with the rules of
	// CommandContext.AppendEvent; the type must be defined by the job's
	// feature.
	AppendEvent(spec AppendSpec) (EventRef, error)
	// LoadAggregate reads a stream of the job's tenant.
	LoadAggregate(id uuid.UUID, aggregateType string, opts LoadOptions) (Aggregate, error)
	// Enqueue enqueues another job in the job's transaction.
	Enqueue(job string, args any, runAt time.Time) error
	// Publish publishes an integration event in the job's transaction, as
	// CommandContext.Publish: it leaves the app only if the job commits.
	Publish(event string, payload any) error
}

// JobOption adjusts a job declared with Registrar.Job.
type JobOption struct {
	apply   func(*spec.Job)
	problem string // a boot error instead of apply
}

// OnEvent enqueues the job once for every committed event of these types;
// the event's payload is the job's args.
func OnEvent(types ...string) JobOption {
	return JobOption{apply: func(j *spec.Job) { j.On = append(j.On, types...) }}
}

// Cron enqueues the job on a cron schedule (five fields, or @daily,
// @every 1h…), once across all processes, in the system tenant. An
// expression that does not parse is a boot error; "" is no schedule.
func Cron(expr string) JobOption { return JobOption{apply: func(j *spec.Job) { j.Schedule = expr }} }

// JobAttempts is how often a failing job runs before it is discarded
// (default 10; 0 keeps the default, a negative n is a boot error); retries
// back off exponentially with jitter.
func JobAttempts(n int) JobOption { return JobOption{apply: func(j *spec.Job) { j.MaxAttempts = n }} }

// UniqueFor makes enqueueing the job a no-op while a job of the same name
// and args exists in the same tenant, scheduled in the same d-long window
// (its run-at time truncated to a multiple of d), and was not cancelled or
// discarded. Args compare as JSON values (key order aside). The tenant
// always counts, so tenants never dedupe each other; the user and the
// causing request or event do not, so two saves asking for one job get
// one. Put anything else that tells two jobs apart into the args. d = 0
// is not unique; a negative d is a boot error.
func UniqueFor(d time.Duration) JobOption {
	return JobOption{apply: func(j *spec.Job) { j.UniqueFor = d }}
}

// JobTimeout bounds one attempt of the job (default one minute): at d the
// handler's context is cancelled, its transaction rolls back and the
// attempt fails, to be retried like any failure. Go cannot stop a handler
// that ignores its context (a call without a deadline): pass
// ctx.Context() to everything that waits. d must be positive (leave the
// option out for the default). The app's job rescue time
// (kumiko.Config.JobRescueAfter) must be at least the longest job
// timeout.
func JobTimeout(d time.Duration) JobOption {
	if d <= 0 {
		return JobOption{problem: fmt.Sprintf("JobTimeout must be positive, got %s", d)}
	}
	return JobOption{apply: func(j *spec.Job) { j.Timeout = d }}
}

// Exclusive lets at most one run of the job work at a time across all
// processes (a distributed lock, package lock): a run started by hand while
// the scheduled run still works completes at once without working.
func Exclusive() JobOption { return JobOption{apply: func(j *spec.Job) { j.Exclusive = true }} }

// Job declares a background job. args is a value of the args struct type T
// (for OnEvent jobs, the event's payload type); handler must be a
// func(feature.JobContext, T) error (checked at boot). A job is enqueued by
// its options (OnEvent, Cron), by CommandContext.Enqueue, or by hand
// (`job run <name>`). The name is lowercase letters, digits, '.', '_' or
// '-', starting with a letter and ending with a letter or digit, like
// task.remind.
func (r *Registrar) Job(name string, args any, handler any, opts ...JobOption) {
	def := spec.Job{Name: name, Args: reflect.TypeOf(args), Handler: handler}
	for _, o := range opts {
		if o.problem != "" {
			r.problem(item("job", name), "%s", o.problem)
			continue
		}
		if o.apply == nil {
			r.problem(item("job", name), "zero JobOption; use the feature option constructors")
			continue
		}
		o.apply(&def)
	}
	r.record(item("job", name), func(d *spec.Definitions) { d.Jobs = append(d.Jobs, def) })
}

// Package jobs runs background work on River, in the application's own
// PostgreSQL database and pool: a reminder at a task's due time, a nightly
// digest, a webhook retried until the receiver answers.
//
// A Job is triggered
//   - by events: the shared consumer of Runner.Consumer inserts one River job
//     per matching committed event in its pass transaction, so each event
//     enqueues exactly once, gap-safe like every consumer;
//   - by a schedule: a cron expression, enqueued by the elected leader;
//   - by a write: EnqueueTx in the write's transaction, so the job exists
//     only if the write commits;
//   - at a time: Options.RunAt;
//   - by hand: Enqueue (the CLI's `job run`).
//
// Failing jobs are retried with exponential backoff and jitter up to their
// MaxAttempts and then discarded; a job runs with the Cause it was enqueued
// with (tenant, user, correlation and causation ids). An attempt is bounded
// by its Timeout; a job held by a process that died is retried after
// Config.RescueAfter; a Work that commits its writes with Run.CompleteTx
// writes them exactly once. River's tables are created by Migrate.
package jobs

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/robfig/cron/v3"
	"go.opentelemetry.io/otel/trace"

	"github.com/kumiko-go/kumiko/consumer"
	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/internal/jobspec"
	"github.com/kumiko-go/kumiko/internal/lifecycle"
	"github.com/kumiko-go/kumiko/lock"
)

// Job is one kind of background work.
type Job struct {
	// Name identifies the job (River's kind), unique in the app: lowercase
	// letters, digits, '.', '_' or '-', starting with a letter and ending
	// with a letter or digit, like task.remind.
	Name string
	// Work does the job. Its error fails the attempt; the job is retried
	// until MaxAttempts. Wrap an error with river.JobCancel to stop retrying.
	// A Work that writes in a transaction of its own calls
	// Run.CompleteTx last in it, so that the writes commit exactly once.
	Work func(ctx context.Context, run Run) error
	// On names the event types that enqueue the job; the event's payload is
	// the job's Args.
	On []string
	// Schedule is a cron expression (five fields, or @daily, @every 1h…)
	// on which the job is enqueued with no args in the system tenant; ""
	// = none. New refuses one that does not parse.
	Schedule string
	// MaxAttempts before the job is discarded; 0 = Config.MaxAttempts
	// (default 10). It must not be negative.
	MaxAttempts int
	// UniqueFor, when positive, makes enqueueing the job a no-op (Enqueued
	// .Duplicate) while a job of the same name, tenant and args exists,
	// scheduled in the same UniqueFor-long window of time (its scheduled
	// time truncated to a multiple of UniqueFor), that was not cancelled or
	// discarded. Args count as JSON values: key order and spacing aside.
	// The tenant always counts, so two tenants never dedupe each other; the
	// rest of the cause (user, correlation and causation ids) and the
	// triggering event do not, so that two writes asking for one job get
	// one. Put what else should tell jobs apart into the args.
	UniqueFor time.Duration
	// Timeout bounds one attempt; 0 = DefaultTimeout (one minute). It must
	// not be negative. At the timeout the attempt's context is cancelled
	// and the attempt fails like any other (it is retried until
	// MaxAttempts). Go cannot stop a Work that ignores its context: such an
	// attempt runs on, and its outcome counts when it returns, unless
	// Config.RescueAfter passed first.
	Timeout time.Duration
	// Exclusive runs at most one Work of the job at a time across all
	// processes, under the lock "job:<Name>" of Config.Locker: a run that
	// finds the lock taken (a run by hand while the scheduled run still
	// works) completes at once without working.
	Exclusive bool
}

// DefaultTimeout is the default of Job.Timeout.
const DefaultTimeout = time.Minute

// timeout is the job's Timeout or its default.
func (j Job) timeout() time.Duration { return cmp.Or(j.Timeout, DefaultTimeout) }

// Cause is who and what a job runs for: the job acts as this user in this
// tenant, and events it appends carry the correlation and causation ids.
type Cause struct {
	// TenantID is part of a unique job's identity (Job.UniqueFor).
	TenantID uuid.UUID `json:"tenantId" river:"unique"`
	UserID   string    `json:"userId,omitempty"`
	// CorrelationID is inherited from the request or event that caused the
	// job.
	CorrelationID string `json:"correlationId,omitempty"`
	// CausationID is the id of the causing event, or the request id.
	CausationID string `json:"causationId,omitempty"`
}

// Run is one attempt of a job.
type Run struct {
	// ID is River's job id.
	ID   int64
	Name string
	// Args is the job's argument object as enqueued (for event-triggered
	// jobs, the event's payload).
	Args json.RawMessage
	// Attempt counts from 1.
	Attempt int
	// ScheduledAt is when this attempt was due: the enqueue time, RunAt,
	// or the failed attempt's time plus the backoff.
	ScheduledAt time.Time
	Cause       Cause
	// Event is the triggering event's id; 0 for jobs not caused by one.
	Event int64

	job  *river.Job[envelope] // River's job of the attempt; nil in a Run not made by a worker
	lock string               // lockAttemptSQL
}

// ErrNotRunning is returned by Run.CompleteTx when the job no longer runs
// in the Run's attempt: the leader took it for held by a dead process
// (Config.RescueAfter) and another attempt has it or finished it, or an
// operator cancelled it. The attempt's transaction must roll back.
var ErrNotRunning = errors.New("jobs: the job no longer runs in this attempt")

// CompleteTx marks the job completed in tx, the attempt's own transaction,
// so that the completion commits with the attempt's writes in tx or not at
// all: a crash between the commit and River's own completion can no longer
// run the writes twice. Call it last in tx, then commit tx and return nil
// (an error returned after the commit changes nothing). ctx must be Work's
// context or one derived from it.
//
// It locks the job's row first and refuses with ErrNotRunning when the job
// no longer runs in this attempt, so of two attempts of one job — a
// rescued job run again while the attempt it was taken from still works —
// at most one commits its writes. Writes outside tx (a mail sent, an HTTP
// call) are not covered: they happen at least once.
func (r Run) CompleteTx(ctx context.Context, tx pgx.Tx) error {
	if r.job == nil {
		return fmt.Errorf("jobs: complete %s (id %d): not a worker's attempt", r.Name, r.ID)
	}
	var mine bool
	err := tx.QueryRow(ctx, r.lock, r.ID, r.Attempt).Scan(&mine)
	switch {
	case errors.Is(err, pgx.ErrNoRows): // deleted by an operator
	case err != nil:
		return fmt.Errorf("jobs: complete %s (id %d): %w", r.Name, r.ID, err)
	}
	if !mine {
		return fmt.Errorf("%w: %s (id %d, attempt %d)", ErrNotRunning, r.Name, r.ID, r.Attempt)
	}
	if _, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, r.job); err != nil {
		return fmt.Errorf("jobs: complete %s (id %d): %w", r.Name, r.ID, err)
	}
	return nil
}

// envelope is the River job args of every kumiko job; its kind is the job's
// name. The fields tagged river:"unique" (Args and Cause.TenantID) are what
// River's unique key of a unique job covers, besides the kind and the
// period; a unique job's Args are canonical JSON, so that equal values
// give one key.
type envelope struct {
	kind  string
	Args  json.RawMessage `json:"args" river:"unique"`
	Cause Cause           `json:"cause"`
	Event int64           `json:"event,omitempty"`
}

func (e envelope) Kind() string { return e.kind }

// Config configures a Runner. The zero value is usable.
type Config struct {
	// Logger receives River's warnings and errors; default slog.Default().
	// River logs a failed attempt below that level: the job's errors (the
	// CLI's `job show`) and the attempts metric record them.
	Logger *slog.Logger
	// Workers is how many jobs one process runs at once; default 10.
	Workers int
	// TriggerPartitions, above 1, partitions the consumer that enqueues
	// the jobs triggered by events (see consumer.Consumer.Partitions): the
	// events of one stream enqueue in order, different partitions in
	// parallel across the app's processes. 0 or 1: one shard. At most 256;
	// stored when the consumer is first created (`consumer repartition`
	// changes it).
	TriggerPartitions int
	// MaxAttempts is the default of Job.MaxAttempts; default 10.
	MaxAttempts int
	// Backoff is the delay before retry n (n ≥ 1), before jitter; default
	// one second doubled per attempt, at most an hour. Each delay is
	// spread by ±25 % so failures of many jobs do not retry in step.
	Backoff func(attempt int) time.Duration
	// PollInterval is the fallback fetch interval when no notification
	// arrives; default one second.
	PollInterval time.Duration
	// FetchCooldown is the shortest time between two fetches of a process:
	// enqueues notified within it are fetched together at its end. It
	// bounds the pick-up latency under a steady stream of enqueues, and the
	// fetch queries a busy process sends to at most one per cooldown;
	// default 10 ms, at most PollInterval.
	FetchCooldown time.Duration
	// Metrics, when set, gets the job metrics.
	Metrics prometheus.Registerer
	// Locker serves Exclusive jobs; default a Postgres locker on the
	// store's pool in the namespace "kumiko.<store schema>", so that apps
	// sharing a database in schemas of their own never hold each other's
	// job locks.
	Locker lock.Locker
	// RescueAfter is how long a job may stay running before the elected
	// leader takes it for held by a process that died (its attempt never
	// ended) and retries it, the attempt counted as failed (River's
	// RescueStuckJobsAfter). The leader looks every 30 seconds, so such a
	// job is retried within RescueAfter plus 30 seconds, plus its backoff,
	// plus up to 20 seconds when the dead process was the leader. It must
	// be at least every job's Timeout, so that no attempt still within its
	// timeout is taken; default the longest Timeout plus one minute.
	RescueAfter time.Duration
	// TracerProvider gets a span per enqueue and per attempt
	// (river.insert_many, river.work/<job>), the attempt's linked to the
	// enqueue's through the job's metadata; default the global provider,
	// a no-op unless the application configured one.
	TracerProvider trace.TracerProvider
}

// WithDefaults returns a copy of c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Workers == 0 {
		c.Workers = 10
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = 10
	}
	if c.Backoff == nil {
		c.Backoff = func(n int) time.Duration { return min(time.Second<<min(n-1, 12), time.Hour) }
	}
	if c.PollInterval == 0 {
		c.PollInterval = time.Second
	}
	if c.FetchCooldown == 0 {
		c.FetchCooldown = min(c.PollInterval, 10*time.Millisecond)
	}
	return c
}

// Validate reports the first setting that does not fit; New calls it on
// c.WithDefaults() (the zero FetchCooldown does not fit before its
// default is set). The RescueAfter it checks against the jobs' timeouts is
// New's: Validate does not know the jobs.
func (c Config) Validate() error {
	switch {
	case c.Workers < 0:
		return fmt.Errorf("jobs: Config.Workers is negative (%d)", c.Workers)
	case c.TriggerPartitions < 0 || c.TriggerPartitions > consumer.MaxPartitions:
		return fmt.Errorf("jobs: Config.TriggerPartitions (%d) is outside 0..%d", c.TriggerPartitions, consumer.MaxPartitions)
	case c.MaxAttempts < 0:
		return fmt.Errorf("jobs: Config.MaxAttempts is negative (%d)", c.MaxAttempts)
	case c.PollInterval < 0:
		return fmt.Errorf("jobs: Config.PollInterval is negative (%s)", c.PollInterval)
	case c.FetchCooldown < time.Millisecond || c.FetchCooldown > c.PollInterval:
		return fmt.Errorf("jobs: Config.FetchCooldown (%s) must be between 1ms and PollInterval (%s)", c.FetchCooldown, c.PollInterval)
	case c.RescueAfter < 0:
		return fmt.Errorf("jobs: Config.RescueAfter is negative (%s)", c.RescueAfter)
	}
	return nil
}

// rescueAfter is RescueAfter, checked against the jobs' timeouts, or its
// default; the second result is the longest timeout.
func (c Config) rescueAfter(jobs []Job) (rescue, longest time.Duration, err error) {
	for _, j := range jobs {
		longest = max(longest, j.timeout())
		if c.RescueAfter > 0 && c.RescueAfter < j.timeout() {
			return 0, 0, fmt.Errorf("jobs: Config.RescueAfter (%s) is shorter than the timeout of job %q (%s): its attempts would be retried while they still run",
				c.RescueAfter, j.Name, j.timeout())
		}
	}
	longest = cmp.Or(longest, DefaultTimeout) // no jobs
	return cmp.Or(c.RescueAfter, longest+time.Minute), longest, nil
}

// Runner enqueues and runs the jobs of an application on River. Build it
// with New; Start works jobs, while an unstarted Runner still enqueues and
// manages them (the CLI).
type Runner struct {
	client  *river.Client[pgx.Tx]
	jobs    map[string]Job
	cfg     Config
	store   *eventstore.Store
	running *running

	mu     sync.Mutex
	cancel context.CancelFunc // ends the context River runs on; nil until Start
}

// ErrUnknownJob is returned for a job name no Job of the Runner has.
var ErrUnknownJob = errors.New("jobs: unknown job")

// New builds a Runner for jobs on store's pool and schema. River's tables
// must exist there (Migrate).
func New(store *eventstore.Store, cfg Config, jobs ...Job) (*Runner, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	for _, j := range jobs {
		if err := j.validate(); err != nil {
			return nil, err
		}
	}
	rescueAfter, longest, err := cfg.rescueAfter(jobs)
	if err != nil {
		return nil, err
	}
	if cfg.Locker == nil {
		l, err := lock.NewPostgres(store.Pool(), lock.PostgresConfig{Namespace: "kumiko." + store.Schema()})
		if err != nil {
			return nil, err
		}
		cfg.Locker = l
	}
	r := &Runner{jobs: make(map[string]Job, len(jobs)), cfg: cfg, store: store, running: &running{}}
	workers := river.NewWorkers()
	lock := lockAttemptSQL(store.Schema())
	var periodic []*river.PeriodicJob
	for _, j := range jobs {
		if _, dup := r.jobs[j.Name]; dup {
			return nil, fmt.Errorf("jobs: job %q is declared twice", j.Name)
		}
		r.jobs[j.Name] = j
		// One Go args type serves every job; its kind is the job's name.
		river.AddWorkerArgs(workers, envelope{kind: j.Name}, &worker{job: j, locker: cfg.Locker, log: cfg.Logger, running: r.running, lock: lock})
		if j.Schedule != "" {
			sched, _ := cron.ParseStandard(j.Schedule) // checked by validate
			periodic = append(periodic, river.NewPeriodicJob(sched, func() (river.JobArgs, *river.InsertOpts) {
				return envelope{kind: j.Name, Args: json.RawMessage(`{}`), Cause: Cause{TenantID: eventstore.SystemTenant}}, r.insertOpts(j, Options{})
			}, &river.PeriodicJobOpts{ID: j.Name}))
		}
	}
	r.client, err = river.NewClient(riverpgxv5.New(store.Pool()), &river.Config{
		Schema: store.Schema(),
		// Every worker gives its job's timeout; River's JobTimeout is only
		// its fallback, and must not exceed RescueStuckJobsAfter.
		JobTimeout:           longest,
		RescueStuckJobsAfter: rescueAfter,
		Logger:               slog.New(warnings{cfg.Logger.Handler()}),
		Workers:              workers,
		Queues:               map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: cfg.Workers}},
		PeriodicJobs:         periodic,
		MaxAttempts:          cfg.MaxAttempts,
		RetryPolicy:          backoff(cfg.Backoff),
		FetchPollInterval:    cfg.PollInterval,
		FetchCooldown:        cfg.FetchCooldown,
		Middleware:           middleware(cfg),
	})
	if err != nil {
		return nil, fmt.Errorf("jobs: %w", err)
	}
	return r, nil
}

// validate checks the job against the contract registry.Build checks a
// declared job against (internal/jobspec), and that it has a Work.
func (j Job) validate() error {
	switch {
	case !jobspec.ValidName(j.Name):
		return fmt.Errorf("jobs: job name %q: want %s", j.Name, jobspec.NameRule)
	case j.Work == nil:
		return fmt.Errorf("jobs: job %q has no Work", j.Name)
	}
	// A UniqueFor that is not positive means not unique here (see
	// Job.UniqueFor): the runner accepts a negative one, the DSL does not.
	settings := jobspec.Settings{MaxAttempts: j.MaxAttempts, UniqueFor: max(j.UniqueFor, 0), Timeout: j.Timeout, Schedule: j.Schedule}
	if ps := settings.Check(); len(ps) > 0 {
		return fmt.Errorf("jobs: job %q: %s", j.Name, ps[0])
	}
	return nil
}

// Start works jobs until Stop; the elected leader also enqueues scheduled
// jobs and rescues the jobs of processes that died. ctx bounds the start
// only: River's client runs until Stop whatever becomes of ctx.
func (r *Runner) Start(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cancel != nil {
		return nil // started already
	}
	// River's client keeps the context it is started with, and cancelling
	// that context stops it. A long-running part never keeps its start
	// context: the client runs on a context of its own, detached from ctx
	// (its values kept), that only Stop ends. ctx bounds the database check
	// below, which is all of the start that can wait.
	if err := r.store.Pool().Ping(ctx); err != nil {
		return fmt.Errorf("jobs: start: %w", err)
	}
	run, cancel := context.WithCancel(context.WithoutCancel(ctx))
	if err := r.client.Start(run); err != nil {
		cancel()
		return fmt.Errorf("jobs: start: %w", err)
	}
	r.cancel = cancel
	return nil
}

// Stop stops fetching jobs at once and waits for the running ones until ctx
// ends. If ctx ends first, it cancels the running jobs' contexts and waits
// for them to return until a second after ctx's deadline (the grace the
// parts of an app share; a second from now when ctx has no deadline). It
// then returns an error that wraps ctx.Err() and names the jobs that were
// still running (kind and id): "cancelled" ones returned after the cancel,
// and River makes them available again at once, the attempt not counted;
// "abandoned" ones had not returned by then: their connection holds their
// transaction until the application closes it (so it rolls back), and
// their row stays running until the leader rescues it after
// Config.RescueAfter. Stop never blocks past ctx's deadline plus that
// second. Nothing running at the deadline, it returns nil.
func (r *Runner) Stop(ctx context.Context) error {
	defer func() {
		r.mu.Lock()
		if r.cancel != nil {
			r.cancel()
			r.cancel = nil
		}
		r.mu.Unlock()
	}()
	err := r.client.Stop(ctx)
	if err == nil {
		return nil
	}
	if ctx.Err() == nil {
		return fmt.Errorf("jobs: stop: %w", err)
	}
	atDeadline := r.running.list()
	hard, cancel := context.WithDeadline(context.WithoutCancel(ctx), lifecycle.GiveUp(ctx))
	defer cancel()
	hardErr := r.client.StopAndCancel(hard)
	left := r.running.list()
	if hardErr == nil && len(atDeadline) == 0 {
		return nil // nothing was running: River only took longer to stop its services
	}
	return stopError(ctx.Err(), atDeadline, left, hardErr != nil)
}

// stopError names the attempts Stop cancelled at its deadline: those not
// in left returned after the cancel, those in left were abandoned.
func stopError(cause error, atDeadline, left []attempt, timedOut bool) error {
	still := make(map[attempt]bool, len(left))
	for _, a := range left {
		still[a] = true
	}
	var cancelled []attempt
	for _, a := range atDeadline {
		if !still[a] {
			cancelled = append(cancelled, a)
		}
	}
	var parts []string
	if len(cancelled) > 0 {
		parts = append(parts, "cancelled running "+describe(cancelled))
	}
	if len(left) > 0 {
		parts = append(parts, "abandoned running "+describe(left))
	}
	if timedOut && len(left) == 0 {
		parts = append(parts, fmt.Sprintf("River's client did not stop within %s of the deadline", lifecycle.Grace))
	}
	return fmt.Errorf("jobs: stop: %s: %w", strings.Join(parts, "; "), cause)
}

// Names are the names of the Runner's jobs.
func (r *Runner) Names() []string {
	out := make([]string, 0, len(r.jobs))
	for n := range r.jobs {
		out = append(out, n)
	}
	return out
}

// worker runs one Job for River.
type worker struct {
	river.WorkerDefaults[envelope]
	job     Job
	locker  lock.Locker
	log     *slog.Logger
	running *running
	lock    string // lockAttemptSQL of the store's schema
}

func (w *worker) Work(ctx context.Context, j *river.Job[envelope]) error {
	a := attempt{id: j.ID, attempt: j.Attempt, kind: j.Kind}
	w.running.add(a)
	defer w.running.remove(a)
	if w.job.Exclusive {
		held, err := w.locker.Acquire(ctx, "job:"+w.job.Name, 0)
		if err != nil {
			return err
		}
		if held == nil {
			w.log.InfoContext(ctx, "jobs: another run of the job is working; this one is skipped", "job", w.job.Name, "id", j.ID)
			return nil
		}
		defer func() { _ = held.Release(context.WithoutCancel(ctx)) }()
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go func() {
			select {
			case <-held.Lost():
				cancel() // another process may run the job now: stop this run
			case <-ctx.Done():
			}
		}()
		return w.work(ctx, j)
	}
	return w.work(ctx, j)
}

func (w *worker) work(ctx context.Context, j *river.Job[envelope]) error {
	return w.job.Work(ctx, Run{ID: j.ID, Name: j.Kind, Args: j.Args.Args, Attempt: j.Attempt, ScheduledAt: j.ScheduledAt, Cause: j.Args.Cause, Event: j.Args.Event,
		job: j, lock: w.lock})
}

// Timeout is the attempt's deadline: River cancels Work's context at it and
// fails the attempt.
func (w *worker) Timeout(*river.Job[envelope]) time.Duration { return w.job.timeout() }

// backoffPolicy is River's retry policy on Config.Backoff, with jitter.
type backoffPolicy struct{ delay func(int) time.Duration }

func backoff(delay func(int) time.Duration) river.ClientRetryPolicy { return backoffPolicy{delay} }

func (p backoffPolicy) NextRetry(job *rivertype.JobRow) time.Time {
	d := p.delay(max(job.Attempt, 1))
	jitter := time.Duration((rand.Float64() - 0.5) * 0.5 * float64(d))
	return time.Now().Add(d + jitter)
}

// warnings passes on River's records from level Warn up: its Info records
// narrate every start, stop and maintenance run.
type warnings struct{ slog.Handler }

func (w warnings) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn && w.Handler.Enabled(ctx, l)
}

func (w warnings) WithAttrs(as []slog.Attr) slog.Handler { return warnings{w.Handler.WithAttrs(as)} }
func (w warnings) WithGroup(name string) slog.Handler    { return warnings{w.Handler.WithGroup(name)} }

package jobs

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/rivertype"

	"github.com/kumiko-go/kumiko/consumer"
	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/feature"
)

// Options are the per-enqueue settings. The zero value runs the job as
// soon as a worker is free, in the system tenant.
type Options struct {
	// RunAt delays the job until this time (a task's due time).
	RunAt time.Time
	// Cause is who the job runs for.
	Cause Cause
}

// Enqueued is the outcome of an enqueue.
type Enqueued struct {
	// ID is River's job id.
	ID int64
	// Duplicate is set when a unique job already existed; ID is then the
	// existing job's.
	Duplicate bool
}

// EnqueueTx enqueues job name in tx: the job exists only if tx commits.
// args must encode to a JSON object (nil: {}).
func (r *Runner) EnqueueTx(ctx context.Context, tx pgx.Tx, name string, args any, o Options) (Enqueued, error) {
	env, opts, err := r.prepare(name, args, o)
	if err != nil {
		return Enqueued{}, err
	}
	res, err := r.client.InsertTx(ctx, tx, env, opts)
	if err != nil {
		return Enqueued{}, fmt.Errorf("jobs: enqueue %s: %w", name, err)
	}
	if !res.UniqueSkippedAsDuplicate && res.Job.State == rivertype.JobStateAvailable {
		if err := r.notifyInsert(ctx, tx); err != nil {
			return Enqueued{}, fmt.Errorf("jobs: enqueue %s: %w", name, err)
		}
	}
	return Enqueued{ID: res.Job.ID, Duplicate: res.UniqueSkippedAsDuplicate}, nil
}

// Enqueue enqueues job name in a transaction of its own (a run by hand).
func (r *Runner) Enqueue(ctx context.Context, name string, args any, o Options) (Enqueued, error) {
	var out Enqueued
	err := pgx.BeginFunc(ctx, r.store.Pool(), func(tx pgx.Tx) error {
		var err error
		out, err = r.EnqueueTx(ctx, tx, name, args, o)
		return err
	})
	return out, err
}

func (r *Runner) prepare(name string, args any, o Options) (envelope, *river.InsertOpts, error) {
	j, ok := r.jobs[name]
	if !ok {
		return envelope{}, nil, fmt.Errorf("%w %q", ErrUnknownJob, name)
	}
	raw, err := encodeArgs(args)
	if err == nil && j.UniqueFor > 0 {
		raw, err = canonical(raw)
	}
	if err != nil {
		return envelope{}, nil, fmt.Errorf("jobs: enqueue %s: %w", name, err)
	}
	if o.Cause.TenantID == [16]byte{} {
		o.Cause.TenantID = eventstore.SystemTenant
	}
	return envelope{kind: name, Args: raw, Cause: o.Cause}, r.insertOpts(j, o), nil
}

func encodeArgs(args any) (json.RawMessage, error) {
	if args == nil {
		return json.RawMessage(`{}`), nil
	}
	raw, ok := args.(json.RawMessage)
	if !ok {
		var err error
		if raw, err = json.Marshal(args); err != nil {
			return nil, fmt.Errorf("args: %w", err)
		}
	}
	if len(raw) == 0 || raw[0] != '{' {
		return nil, fmt.Errorf("args must be a JSON object, got %.40s", raw)
	}
	return raw, nil
}

// canonical is the JSON value raw in one encoding for all equal values:
// object keys sorted at every depth, no spacing, numbers as written. An
// event's payload read from jsonb and a struct encoded by encoding/json
// order keys differently; a unique job's args must not.
func canonical(raw json.RawMessage) (json.RawMessage, error) {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, fmt.Errorf("args: %w", err)
	}
	out, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("args: %w", err)
	}
	return out, nil
}

// insertOpts are River's insert options of job j. A unique job's key is by
// kind, period and the envelope's fields tagged river:"unique".
func (r *Runner) insertOpts(j Job, o Options) *river.InsertOpts {
	opts := &river.InsertOpts{MaxAttempts: j.MaxAttempts, ScheduledAt: o.RunAt}
	if j.UniqueFor > 0 {
		opts.UniqueOpts = river.UniqueOpts{ByArgs: true, ByPeriod: j.UniqueFor}
	}
	return opts
}

// ConsumerName is the name of the shared consumer that enqueues the
// event-triggered jobs.
const ConsumerName = "jobs"

// Consumer returns the shared consumer that enqueues every job whose On
// names an event's type, in the pass transaction (InsertManyFastTx, or
// InsertManyTx for unique jobs): the jobs commit with the
// consumer's cursor, so each matching committed event enqueues each of its
// jobs exactly once. ok is false when no job is triggered by events.
func (r *Runner) Consumer() (c consumer.Consumer, ok bool) {
	// A job's insert options are the same for each of its events: built
	// once, not per event.
	type triggered struct {
		job  Job
		opts *river.InsertOpts
	}
	byType := map[string][]triggered{}
	var types []string
	for _, j := range r.jobs {
		opts := r.insertOpts(j, Options{})
		for _, t := range j.On {
			if len(byType[t]) == 0 {
				types = append(types, t)
			}
			byType[t] = append(byType[t], triggered{j, opts})
		}
	}
	if len(types) == 0 {
		return consumer.Consumer{}, false
	}
	return consumer.Consumer{
		Name:       ConsumerName,
		Delivery:   feature.Shared,
		Types:      types,
		Partitions: r.cfg.TriggerPartitions,
		HandleBatch: func(ctx context.Context, tx pgx.Tx, evs []eventstore.Event) error {
			plain := make([]river.InsertManyParams, 0, len(evs))
			var unique []river.InsertManyParams
			var seen map[string]bool // the unique jobs of this pass
			for _, ev := range evs {
				for _, t := range byType[ev.Type] {
					env := eventEnvelope(t.job, ev)
					if t.job.UniqueFor == 0 {
						plain = append(plain, river.InsertManyParams{Args: env, InsertOpts: t.opts})
						continue
					}
					var err error
					if env.Args, err = canonical(env.Args); err != nil {
						return fmt.Errorf("jobs: event %d: job %s: %w", ev.ID, t.job.Name, err)
					}
					// River's unique insert refuses one key twice in one
					// statement: the duplicates of a pass are dropped here.
					key := env.kind + "\x00" + env.Cause.TenantID.String() + "\x00" + string(env.Args)
					if seen[key] {
						continue
					}
					if seen == nil {
						seen = map[string]bool{}
					}
					seen[key] = true
					unique = append(unique, river.InsertManyParams{Args: env, InsertOpts: t.opts})
				}
			}
			// Jobs without uniqueness go in by COPY, the others by River's
			// unique-aware insert; both in the pass transaction.
			if len(plain) > 0 {
				if _, err := r.client.InsertManyFastTx(ctx, tx, plain); err != nil {
					return err
				}
			}
			if len(unique) > 0 {
				if _, err := r.client.InsertManyTx(ctx, tx, unique); err != nil {
					return err
				}
			}
			if len(plain)+len(unique) > 0 {
				return r.notifyInsert(ctx, tx)
			}
			return nil
		},
	}, true
}

// insertPayload is River's insert notification for the default queue,
// byte for byte, so that Postgres folds it into River's own when both are
// sent in one transaction.
const insertPayload = `{"queue": "default"}`

// notifyInsert sends River's insert notification in tx, delivered when tx
// commits: every started Runner on the schema fetches at once (within its
// FetchCooldown). River sends it too, but at most once per FetchCooldown
// and process; the enqueues in between would wait for the next poll.
func (r *Runner) notifyInsert(ctx context.Context, tx pgx.Tx) error {
	err := r.client.Driver().UnwrapExecutor(tx).NotifyMany(ctx, &riverdriver.NotifyManyParams{
		Payload: []string{insertPayload}, Schema: r.store.Schema(), Topic: "river_insert",
	})
	if err != nil {
		return fmt.Errorf("notify: %w", err)
	}
	return nil
}

// eventEnvelope is the job j caused by ev: its args are the event's payload,
// it runs as the event's user in the event's tenant.
func eventEnvelope(j Job, ev eventstore.Event) envelope {
	return envelope{kind: j.Name, Args: ev.Payload, Event: ev.ID, Cause: Cause{
		TenantID:      ev.TenantID,
		UserID:        ev.Metadata.UserID,
		CorrelationID: ev.Metadata.CorrelationID,
		CausationID:   strconv.FormatInt(ev.ID, 10),
	}}
}

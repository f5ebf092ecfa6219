package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/jobs"
)

const (
	jobBacklog = 20_000 // events the trigger comparison drains from cursor 0
	jobRate    = 100    // enqueues per second of the pick-up writer
)

// jobRows measures the jobs:
//   - the drain of a jobBacklog-event backlog by the jobs' event trigger (a
//     River job inserted per event with InsertManyFastTx in the pass
//     transaction) against the same pass with a no-op handler (the
//     overhead of enqueueing on events), and against the same work written
//     by hand on River (the framework's share of it);
//   - that hand-written River pass against the no-op pass: what one River
//     job row per event costs by itself;
//   - the latency from an enqueue's commit (its return) to the job's Work
//     in a started runner, p50 and p99, at jobRate enqueues/s.
func (b *bench) jobRows(ctx context.Context) ([]row, error) {
	schema := b.store.Schema() + "_jobs"
	fmt.Fprintf(os.Stderr, "  seeding %s events into schema %s …\n", formatValue(float64(b.n.job), ""), schema)
	store, err := b.migratedStore(ctx, schema)
	if err != nil {
		return nil, err
	}
	defer dropSchemas(b.pool, store, schema)
	if _, err := jobs.Migrate(ctx, store); err != nil {
		return nil, err
	}
	last, err := b.seedBacklog(ctx, schema, b.n.job)
	if err != nil {
		return nil, err
	}
	quiet := slog.New(slog.DiscardHandler)
	seen := make(chan time.Time, 1024)
	r, err := jobs.New(store, jobs.Config{Logger: quiet, Workers: 4},
		jobs.Job{Name: "bench-on-event", On: []string{eventType}, Work: func(context.Context, jobs.Run) error { return nil }},
		jobs.Job{Name: "bench-pickup", Work: func(context.Context, jobs.Run) error { seen <- time.Now(); return nil }})
	if err != nil {
		return nil, err
	}
	trigger, _ := r.Consumer()
	byHand, err := river.NewClient(riverpgxv5.New(b.pool), &river.Config{Schema: schema, Logger: quiet})
	if err != nil {
		return nil, err
	}
	raw := newRawPasser(b.pool, schema)

	name := fmt.Sprintf("jobs trigger drain %s events, batch %d", formatValue(float64(b.n.job), ""), passBatch)
	fmt.Fprintf(os.Stderr, "  %s …\n", name)
	const trig, hand, noop = 0, 1, 2 // the sides
	sides := []func(ctx context.Context, name string) (passFunc, error){
		trig: func(ctx context.Context, name string) (passFunc, error) {
			c := trigger
			c.Name = name
			return consumerPass(ctx, store, c)
		},
		hand: func(ctx context.Context, name string) (passFunc, error) { return raw.startRiver(ctx, name, byHand) },
		noop: func(ctx context.Context, name string) (passFunc, error) { return noopConsumer(ctx, store, name) },
	}
	total, err := b.drainSides(ctx, name, "bench-jobs", last, 0, sides, nil)
	if err != nil {
		return nil, err
	}
	rows := []row{
		{name: name + " (raw: no-op handler)", unit: "events/s", fw: total[trig].rate(), raw: total[noop].rate(), goal: atLeastOfRaw(0.80)},
		{name: name + " (raw: River by hand)", unit: "events/s", fw: total[trig].rate(), raw: total[hand].rate()},
		{name: "River InsertManyFastTx pass by hand (raw: no-op handler)", unit: "events/s", fw: total[hand].rate(), raw: total[noop].rate(), goal: atLeastOfRaw(0.80)},
	}

	// The trigger's jobs would queue ahead of the pick-up jobs.
	if _, err := b.pool.Exec(ctx, "TRUNCATE "+pgx.Identifier{schema, "river_job"}.Sanitize()); err != nil {
		return rows, err
	}
	fmt.Fprintf(os.Stderr, "  job pick-up after commit, %d enqueues/s …\n", jobRate)
	p50, p99, err := pickup(ctx, r, seen, b.cfg.duration)
	if err != nil {
		return rows, err
	}
	return append(rows,
		row{name: fmt.Sprintf("job pick-up after commit p50, %d/s", jobRate), unit: "µs", fw: micros(p50),
			goal: goal{text: "≤ 50 ms", met: func(fw, _ float64) bool { return fw <= 50_000 }}},
		row{name: fmt.Sprintf("job pick-up after commit p99, %d/s", jobRate), unit: "µs", fw: micros(p99)},
	), nil
}

// pickup starts r, enqueues bench-pickup jobRate times a second for d, one
// at a time, and measures from each enqueue's return to its Work.
func pickup(ctx context.Context, r *jobs.Runner, seen <-chan time.Time, d time.Duration) (p50, p99 time.Duration, err error) {
	if err := r.Start(ctx); err != nil {
		return 0, 0, err
	}
	defer func() { _ = r.Stop(context.WithoutCancel(ctx)) }()
	lat := newLatencies(1)
	var mu sync.Mutex
	tick := time.NewTicker(time.Second / jobRate)
	defer tick.Stop()
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		select {
		case <-ctx.Done():
			return 0, 0, ctx.Err()
		case <-tick.C:
		}
		if _, err := r.Enqueue(ctx, "bench-pickup", nil, jobs.Options{}); err != nil {
			return 0, 0, err
		}
		committed := time.Now()
		select {
		case at := <-seen:
			mu.Lock()
			lat.workers[0] = append(lat.workers[0], max(at.Sub(committed), 0))
			mu.Unlock()
		case <-time.After(10 * time.Second):
			return 0, 0, fmt.Errorf("a job was not picked up within 10 s")
		}
	}
	return lat.quantile(0.50), lat.quantile(0.99), nil
}

// handArgs are the args of the hand-written River pass's jobs, written as a
// user of River would: the same kind and JSON as the trigger's jobs.
type handArgs struct {
	Args  json.RawMessage `json:"args"`
	Cause handCause       `json:"cause"`
	Event int64           `json:"event"`
}

type handCause struct {
	TenantID      uuid.UUID `json:"tenantId"`
	UserID        string    `json:"userId,omitempty"`
	CorrelationID string    `json:"correlationId,omitempty"`
	CausationID   string    `json:"causationId,omitempty"`
}

func (handArgs) Kind() string { return "bench-on-event" }

// startRiver is the raw pass (see startWith) written by hand on River: one
// River job per event, inserted with River's own InsertManyFastTx.
func (r *rawPasser) startRiver(ctx context.Context, name string, client *river.Client[pgx.Tx]) (passFunc, error) {
	return r.startWith(ctx, name, 0, func(ctx context.Context, tx pgx.Tx, evs []eventstore.Event) error {
		if len(evs) == 0 {
			return nil
		}
		params := make([]river.InsertManyParams, len(evs))
		for i, ev := range evs {
			params[i].Args = handArgs{Args: ev.Payload, Event: ev.ID, Cause: handCause{
				TenantID: ev.TenantID, UserID: ev.Metadata.UserID, CorrelationID: ev.Metadata.CorrelationID,
				CausationID: strconv.FormatInt(ev.ID, 10),
			}}
		}
		_, err := client.InsertManyFastTx(ctx, tx, params)
		return err
	})
}

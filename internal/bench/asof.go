package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/kumikotype"
	"github.com/kumiko-go/kumiko/pipeline"
	"github.com/kumiko-go/kumiko/registry"
)

const (
	// asOfRows × asOfEventsPerRow events of benchFeature's entity are the
	// history each as-of list folds (a tenth in a quick run).
	asOfRows         = 200
	asOfEventsPerRow = 50
	// asOfClients loop lists with "asOf" as fast as they are answered.
	asOfClients = 4
	// asOfBusyPause is how long a client refused with as_of_busy waits
	// before it asks again, as a client honouring Retry-After would: a
	// client retrying at once would measure its own busy loop.
	asOfBusyPause = 20 * time.Millisecond
)

// asOfTenant owns the history the as-of lists fold; the measured writes
// go to b.tenant, another tenant of the same process and database.
var asOfTenant = uuid.MustParse("0190a000-0000-7000-8000-0000000a50f0")

// asOfRows measures whether lists with "asOf" starve other tenants: the p95
// latency of one writer's Dispatcher.Write of a create in one tenant, while
// asOfClients clients of another tenant loop as-of lists over a history of
// asOfRows × asOfEventsPerRow events, against the same writer with no as-of
// load. Both sides alternate in rounds. The row's fw/raw is the ratio, its
// target the item's "≤ 3x". It runs with the default AsOfConcurrency and,
// for comparison, with the former fixed default of 2.
func (b *bench) asOfRows(ctx context.Context) ([]row, error) {
	schema := b.store.Schema() + "_asof"
	fmt.Fprintf(os.Stderr, "  setting up as-of history in schema %s …\n", schema)
	reg, err := registry.Build(benchFeature)
	if err != nil {
		return nil, err
	}
	store, err := eventstore.New(b.pool, eventstore.Config{Schema: schema, Upcaster: reg})
	if err != nil {
		return nil, err
	}
	defer dropSchemas(b.pool, store, schema)
	if err := migrateAll(ctx, store); err != nil {
		return nil, err
	}
	var rows []row
	for _, conc := range []int{0, 2} {
		d, err := pipeline.New(reg, store, pipeline.Config{AsOfConcurrency: conc})
		if err != nil {
			return rows, err
		}
		if conc == 0 {
			if err := d.EnsureSchema(ctx); err != nil {
				return rows, err
			}
			if err := b.seedAsOf(ctx, d); err != nil {
				return rows, err
			}
			// As autovacuum would have on a table with this much history:
			// without statistics the planner reads every later event for
			// each page of the fold.
			if _, err := b.pool.Exec(ctx, "ANALYZE "+pgx.Identifier{schema, "kumiko_events"}.Sanitize()); err != nil {
				return rows, err
			}
		}
		label := fmt.Sprintf("AsOfConcurrency %d", conc)
		if conc == 0 {
			label = fmt.Sprintf("default AsOfConcurrency (%d)", pipeline.DefaultAsOfConcurrencyFor(runtime.GOMAXPROCS(0)))
		}
		rs, err := b.asOfCompare(ctx, d, label, conc == 0)
		rows = append(rows, rs...)
		if err != nil {
			return rows, err
		}
	}
	return rows, nil
}

// seedAsOf writes the as-of tenant's history: rows created, then updated
// until each has asOfEventsPerRow events, by 16 writers.
func (b *bench) seedAsOf(ctx context.Context, d *pipeline.Executor) error {
	n := asOfRows
	if b.cfg.quick {
		n /= 10
	}
	caller := pipeline.Caller{User: feature.User{ID: benchUser, TenantID: asOfTenant, Roles: []string{"User"}, Authenticated: true}}
	const writers = 16
	errs := make(chan error, writers)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := w; i < n; i += writers {
				if err := seedAsOfRow(ctx, d, caller, i); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs // nil when closed empty
}

// seedAsOfRow creates row i and updates it asOfEventsPerRow-1 times.
func seedAsOfRow(ctx context.Context, d *pipeline.Executor, c pipeline.Caller, i int) error {
	req := pipeline.Request{Type: registry.VerbCreate.HandlerName("bench_item"), Payload: json.RawMessage(createPayload)}
	out, err := d.Write(ctx, c, req)
	if err != nil {
		return err
	}
	raw, err := json.Marshal(out)
	if err != nil {
		return err
	}
	var created struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(raw, &created); err != nil || created.ID == "" {
		return fmt.Errorf("as-of seed: a create answered %s", raw)
	}
	for v := 1; v < asOfEventsPerRow; v++ {
		payload := fmt.Sprintf(`{"id":%q,"version":%d,"changes":{"title":"row %d, version %d","done":%t}}`, created.ID, v, i, v+1, v%2 == 1)
		req := pipeline.Request{Type: registry.VerbUpdate.HandlerName("bench_item"), Payload: json.RawMessage(payload)}
		if _, err := d.Write(ctx, c, req); err != nil {
			return err
		}
	}
	return nil
}

// asOfCompare alternates rounds of the other tenant's single writer alone
// and under as-of load, and returns the p95 row (with the target when
// target is set) and the as-of lists answered per second.
func (b *bench) asOfCompare(ctx context.Context, d *pipeline.Executor, label string, target bool) ([]row, error) {
	name := "other tenant's write p95, under as-of lists (raw: none), " + label
	fmt.Fprintf(os.Stderr, "  %s …\n", name)
	writer := pipeline.Caller{User: feature.User{ID: benchUser, TenantID: b.tenant, Roles: []string{"User"}, Authenticated: true}}
	reader := pipeline.Caller{User: feature.User{ID: benchUser, TenantID: asOfTenant, Roles: []string{"User"}, Authenticated: true}}
	create := pipeline.Request{Type: registry.VerbCreate.HandlerName("bench_item"), Payload: json.RawMessage(createPayload)}
	list := pipeline.Request{Type: registry.VerbList.HandlerName("bench_item"),
		Payload: json.RawMessage(fmt.Sprintf(`{"asOf":%q,"limit":50}`, time.Now().Add(time.Hour).UTC().Format(time.RFC3339Nano)))}
	write := func(ctx context.Context, _ int) (int, error) {
		_, err := d.Write(ctx, writer, create)
		return 1, err
	}

	var lists, refused int64
	var mu sync.Mutex
	// underLoad runs op for dur while asOfClients loop as-of lists.
	underLoad := func(dur time.Duration, op opFunc) (measured, error) {
		lctx, stop := context.WithCancel(ctx)
		var wg sync.WaitGroup
		var loadErr error
		for range asOfClients {
			wg.Go(func() {
				var ok, busy int64
				defer func() { mu.Lock(); lists += ok; refused += busy; mu.Unlock() }()
				for lctx.Err() == nil {
					_, err := d.Query(lctx, reader, list)
					var pe *pipeline.Error
					switch {
					case err == nil:
						ok++
					case errors.As(err, &pe) && pe.Reason() == string(kumikotype.ReasonAsOfBusy):
						busy++
						select {
						case <-lctx.Done():
						case <-time.After(asOfBusyPause):
						}
					case lctx.Err() != nil:
					default:
						mu.Lock()
						loadErr = err
						mu.Unlock()
						return
					}
				}
			})
		}
		m, err := runFor(ctx, 1, dur, op)
		stop()
		wg.Wait()
		return m, errors.Join(err, loadErr)
	}

	alone, loaded := newLatencies(1), newLatencies(1)
	// Warm up both sides untimed.
	if _, err := runFor(ctx, 1, b.cfg.warmup, write); err != nil {
		return nil, err
	}
	if _, err := underLoad(b.cfg.warmup, write); err != nil {
		return nil, err
	}
	mu.Lock()
	lists, refused = 0, 0
	mu.Unlock()
	var loadTime, aloneTime time.Duration
	var loadCPU, aloneCPU cpuUse
	slice := b.cfg.duration / time.Duration(b.cfg.rounds)
	for round := range b.cfg.rounds {
		for i := range 2 {
			before := cpuNow()
			if (i+round)%2 == 0 {
				m, err := runFor(ctx, 1, slice, alone.timed(write))
				if err != nil {
					return nil, err
				}
				aloneTime += m.elapsed
				aloneCPU = aloneCPU.add(cpuNow().sub(before))
				continue
			}
			m, err := underLoad(slice, loaded.timed(write))
			if err != nil {
				return nil, err
			}
			loadTime += m.elapsed
			loadCPU = loadCPU.add(cpuNow().sub(before))
		}
	}
	r := row{name: name, unit: "µs", fw: micros(loaded.quantile(0.95)), raw: micros(alone.quantile(0.95))}
	if target {
		r.goal = goal{text: "≤ 3x raw", met: func(fw, raw float64) bool { return fw <= 3*raw }}
	}
	perSecond := func(d, over time.Duration) float64 { return float64(d.Milliseconds()) / over.Seconds() }
	return []row{r,
		{name: fmt.Sprintf("  as-of lists answered, %d clients (raw: refused as_of_busy)", asOfClients), unit: "lists/s",
			fw: measured{units: lists, elapsed: loadTime}.rate(), raw: measured{units: refused, elapsed: loadTime}.rate()},
		// Where the time goes: this process's CPU ms per second of wall
		// time (1000 = a core), with the as-of load and without it.
		// PostgreSQL's is left out: its processes on a shared machine
		// serve others too, and their exits make the sum go backwards.
		{name: "  CPU of this process (raw: none)", unit: "ms/s", fw: perSecond(loadCPU.self, loadTime), raw: perSecond(aloneCPU.self, aloneTime)},
	}, nil
}

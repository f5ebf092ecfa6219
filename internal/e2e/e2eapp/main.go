// Command e2eapp is the app binary the end-to-end suite starts where the
// samples cannot show a capability or a fault. It is an app like any
// other, run by kumiko.Main with serve, worker and the operations commands,
// with these settings of its own:
//
//   - E2E_NAME: the app's name (default "e2e"), and so its RabbitMQ queue;
//     the suite makes it unique per run so that parallel runs share no queue;
//   - E2E_FEATURES: "orders" or "billing" runs that sample's feature alone
//     (the two apps of an integration); "ledger" the ordered integration
//     handler below; "memos" the memos below, searched on the reference
//     search engine (search/pgsearch) in the app's schema; empty runs the
//     fault feature below;
//   - E2E_BLOCK: when set, the consumer e2e-deliveries blocks for ever,
//     ignoring its context, on a note titled "block";
//   - E2E_WORK_DELAY: how long a run of e2e.work takes (default 100ms);
//   - E2E_MAX_CONNS: the size of the database pool (kumiko.Config.MaxConns,
//     default 20), so that many processes fit one test server.
//
// The fault feature writes what it does into tables the suite creates in
// the app's schema (KUMIKO_SCHEMA): e2e_job_runs, one row per job run,
// through the job's transaction.
package main

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/kumiko"
	"github.com/kumiko-go/kumiko/samples/billing"
	"github.com/kumiko-go/kumiko/samples/orders"
	"github.com/kumiko-go/kumiko/search"
	"github.com/kumiko-go/kumiko/search/pgsearch"
)

func main() {
	cfg := kumiko.Config{Name: cmp.Or(os.Getenv("E2E_NAME"), "e2e")}
	if v := os.Getenv("E2E_MAX_CONNS"); v != "" {
		n, err := strconv.ParseInt(v, 10, 32)
		if err != nil {
			fmt.Fprintln(os.Stderr, "E2E_MAX_CONNS:", err)
			os.Exit(2)
		}
		cfg.MaxConns = int32(n)
	}
	switch os.Getenv("E2E_FEATURES") {
	case "orders":
		kumiko.Main(cfg, orders.Feature)
	case "billing":
		kumiko.Main(cfg, billing.Feature)
	case "ledger":
		kumiko.Main(cfg, ledger(pgx.Identifier{cmp.Or(os.Getenv("KUMIKO_SCHEMA"), "public"), "e2e_steps"}.Sanitize()))
	case "memos":
		// The engine's own pool: it connects on first use.
		pool, err := pgxpool.New(context.Background(), os.Getenv("DATABASE_URL"))
		if err == nil {
			var engine *pgsearch.Engine
			if engine, err = pgsearch.New(pool, cmp.Or(os.Getenv("KUMIKO_SCHEMA"), "public")); err == nil {
				cfg.SearchEngines = map[string]search.Engine{"docs": engine}
			}
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "search engine:", err)
			os.Exit(2)
		}
		kumiko.Main(cfg, memos)
	default:
		delay, err := time.ParseDuration(cmp.Or(os.Getenv("E2E_WORK_DELAY"), "100ms"))
		if err != nil {
			fmt.Fprintln(os.Stderr, "E2E_WORK_DELAY:", err)
			os.Exit(2)
		}
		f := faults{
			block:   os.Getenv("E2E_BLOCK") != "",
			delay:   delay,
			jobRuns: pgx.Identifier{cmp.Or(os.Getenv("KUMIKO_SCHEMA"), "public"), "e2e_job_runs"}.Sanitize(),
		}
		kumiko.Main(cfg, f.feature())
	}
}

// memos are searched on the search engine "docs".
var memos = feature.Define("memos", func(r *feature.Registrar) {
	r.Entity("memo", feature.Fields{"title": feature.Text().Required(), "body": feature.Text()})
	r.Crud("memo", feature.Access{Write: feature.AnyUser(), Read: feature.AnyUser()})
	r.Search("memo", feature.SearchFields{"title": feature.WeightA, "body": feature.WeightB}, feature.SearchEngine("docs"))
})

// Step is the contract e2e.step: the seq-th message of a stream, which
// orders its messages.
type Step struct {
	Stream string `json:"stream" validate:"required"`
	Seq    int    `json:"seq" validate:"min=0"`
}

// ledger handles e2e.step in order (feature.Ordered), recording each step
// with the process that handled it in steps (e2e_steps, which the suite
// creates).
func ledger(steps string) *feature.Feature {
	return feature.Define("ledger", func(r *feature.Registrar) {
		r.IntegrationEvent("e2e.step", Step{}, feature.MessageKey("stream"))
		r.OnIntegrationEvent("e2e.step", "e2e-ledger", func(ctx feature.CommandContext, m feature.Message) error {
			var s Step
			if err := m.Decode(&s); err != nil {
				return err
			}
			_, err := ctx.DB().Exec(ctx.Context(), `INSERT INTO `+steps+` (stream, seq, pid) VALUES ($1, $2, $3)`, s.Stream, s.Seq, os.Getpid())
			return err
		}, feature.Ordered())
	})
}

// Note is what the consumer reads of a note.created payload.
type Note struct {
	Title string `json:"title"`
}

// Ping is the payload of "e2e.ping", the event that triggers e2e.work.
type Ping struct {
	Seq int `json:"seq"`
}

// Burst is the input of "e2e.burst": append Count pings in one transaction.
type Burst struct {
	Count int `json:"count" validate:"min=1,max=1000"`
}

// Schedule is the input of "e2e.schedule": enqueue e2e.at to run In
// milliseconds from now.
type Schedule struct {
	Key string `json:"key" validate:"required"`
	In  int    `json:"in" validate:"min=0"`
}

// AtArgs are the args of "e2e.at".
type AtArgs struct {
	Key string    `json:"key"`
	At  time.Time `json:"at"`
}

// Tick is the (empty) args of the scheduled "e2e.tick".
type Tick struct{}

type faults struct {
	block   bool
	delay   time.Duration
	jobRuns string // the quoted, schema-qualified e2e_job_runs
}

func (f faults) feature() *feature.Feature {
	return feature.Define("e2e", func(r *feature.Registrar) {
		r.Entity("note", feature.Fields{"title": feature.Text().Required().MaxLen(200)})
		r.Crud("note", feature.Access{Write: feature.Roles("User"), Read: feature.AnyUser()})
		// Personal data: a member's name and email are sealed per member
		// (KUMIKO_DATA_KEY) and forgotten with `subject forget`.
		r.Entity("member", feature.Fields{
			"name":  feature.Text().Required().Personal(),
			"email": feature.Text().Personal(),
			"plan":  feature.Text(),
		})
		r.Crud("member", feature.Access{Write: feature.Roles("User"), Read: feature.AnyUser()})
		r.Search("member", feature.SearchFields{"name": feature.WeightA, "email": feature.WeightB})
		// A table-backed consumer that records every note.created it is
		// handed, with no key: an event delivered twice leaves two rows.
		r.MultiStreamProjection(feature.MultiStreamProjection{
			Name: "e2e-deliveries",
			Table: &feature.TableDef{Name: "e2e_deliveries", Columns: []feature.Column{
				{Name: "tenant_id", Type: "uuid", NotNull: true},
				{Name: "event_id", Type: "bigint", NotNull: true},
				{Name: "note_id", Type: "uuid", NotNull: true},
			}},
			Apply: map[string]feature.ApplyFunc{"note.created": f.deliver},
		})
		// A partitioned projection of the same events that parks a note
		// titled "poison" (its stream) after two attempts.
		r.MultiStreamProjection(feature.MultiStreamProjection{
			Name: "e2e-parts", Partitions: 4, Park: true, MaxAttempts: 2,
			Table: &feature.TableDef{Name: "e2e_parts", Columns: []feature.Column{
				{Name: "tenant_id", Type: "uuid", NotNull: true},
				{Name: "event_id", Type: "bigint", NotNull: true},
				{Name: "note_id", Type: "uuid", NotNull: true},
			}},
			Apply: map[string]feature.ApplyFunc{"note.created": partDeliver},
		})

		r.DefineEvent("e2e.ping", Ping{})
		feature.HandleCommand(r, "e2e.burst", feature.Roles("User"), burst)
		feature.HandleCommand(r, "e2e.schedule", feature.Roles("User"), schedule)
		// Short timeouts, so that the suite may set KUMIKO_JOB_RESCUE_AFTER
		// to a few seconds (it must not be shorter than any job's).
		r.Job("e2e.work", Ping{}, f.work, feature.OnEvent("e2e.ping"), feature.JobTimeout(2*time.Second))
		r.Job("e2e.at", AtArgs{}, f.at, feature.JobTimeout(2*time.Second))
		r.Job("e2e.tick", Tick{}, f.tick, feature.Cron("@every 1s"), feature.JobTimeout(2*time.Second))
	})
}

// deliver records the event, or with E2E_BLOCK blocks for ever on a note
// titled "block", as a handler stuck in a call without a deadline does.
func (f faults) deliver(ctx feature.ApplyContext, e feature.Event) error {
	n, err := feature.Decode[Note](e)
	if err != nil {
		return err
	}
	if f.block && n.Title == "block" {
		fmt.Fprintf(os.Stderr, "{\"msg\":\"e2e: blocking\",\"consumer\":\"e2e-deliveries\",\"event\":%d}\n", e.ID)
		for {
			time.Sleep(time.Hour) // never returns, whatever its context says
		}
	}
	_, err = ctx.DB().Exec(ctx.Context(), `INSERT INTO `+ctx.Table()+` (tenant_id, event_id, note_id) VALUES ($1, $2, $3)`,
		ctx.Tenant(), e.ID, e.AggregateID)
	return err
}

// partDeliver records the event in e2e_parts, failing on a note titled
// "poison".
func partDeliver(ctx feature.ApplyContext, e feature.Event) error {
	n, err := feature.Decode[Note](e)
	if err != nil {
		return err
	}
	if n.Title == "poison" {
		return fmt.Errorf("e2e: poison note %s", e.AggregateID)
	}
	_, err = ctx.DB().Exec(ctx.Context(), `INSERT INTO `+ctx.Table()+` (tenant_id, event_id, note_id) VALUES ($1, $2, $3)`,
		ctx.Tenant(), e.ID, e.AggregateID)
	return err
}

func burst(ctx feature.CommandContext, in Burst) (any, error) {
	for i := range in.Count {
		if _, err := ctx.AppendEvent(feature.AppendSpec{AggregateType: "ping", Type: "e2e.ping", Payload: Ping{Seq: i}}); err != nil {
			return nil, err
		}
	}
	return map[string]int{"count": in.Count}, nil
}

func schedule(ctx feature.CommandContext, in Schedule) (any, error) {
	at := time.Now().Add(time.Duration(in.In) * time.Millisecond)
	if err := ctx.Enqueue("e2e.at", AtArgs{Key: in.Key, At: at}, at); err != nil {
		return nil, err
	}
	return map[string]any{"at": at}, nil
}

// work records its run in the job's transaction, then takes a moment.
func (f faults) work(ctx feature.JobContext, _ Ping) error {
	ev, ok := ctx.Event()
	if !ok {
		return fmt.Errorf("e2e.work: no triggering event")
	}
	if err := f.record(ctx, "e2e.work", fmt.Sprint(ev.ID)); err != nil {
		return err
	}
	select {
	case <-time.After(f.delay):
		return nil
	case <-ctx.Context().Done():
		return ctx.Context().Err()
	}
}

func (f faults) at(ctx feature.JobContext, in AtArgs) error { return f.record(ctx, "e2e.at", in.Key) }

func (f faults) tick(ctx feature.JobContext, _ Tick) error {
	return f.record(ctx, "e2e.tick", time.Now().UTC().Format(time.RFC3339Nano))
}

// record writes one row of a job run into e2e_job_runs.
func (f faults) record(ctx feature.JobContext, job, key string) error {
	_, err := ctx.DB().Exec(ctx.Context(), `INSERT INTO `+f.jobRuns+` (job, key, pid, attempt) VALUES ($1, $2, $3, $4)`,
		job, key, os.Getpid(), ctx.Attempt())
	return err
}

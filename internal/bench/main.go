// Command bench is the benchmark that `make bench` runs. It measures
// the event store's Go API next to a raw pgx baseline doing the same SQL work
// (same table shape, same rows, same concurrency) in the same process against
// the same server, and prints both rates and the ratio framework/raw:
//
//   - append of 1 event per transaction at 1 and 16 writers, to new and to
//     existing streams, against a plain autocommitted INSERT;
//   - batch append of 100 events (one stream, and 100 streams × 1 event)
//     against one multi-row INSERT … SELECT FROM unnest(…);
//   - load of a 100- and a 10,000-event stream with and without snapshots
//     against the equivalent SELECT scanned into the same Go types;
//   - Dispatcher.Write of a CRUD create (event + read row, and the tasks
//     sample's inline projection) at 1 and 16 writers against one raw
//     transaction doing the same inserts;
//   - an HTTP create (POST /api/write with a bearer token, validation, an
//     Idempotency-Key in Redis and the read row) through a kumiko server on
//     loopback at 1 and 16 writers against that raw transaction, with the
//     p50 and p99 latency of both sides;
//   - the event dispatcher with a no-op consumer: the drain of a 200,000-event
//     backlog by RunPass (batch 200) against the same pass written by hand;
//     commit-to-handler p50 and p99 at 200 appends/s, woken by LISTEN/NOTIFY
//     and in process, against a hand-written listener; and the heap and RSS
//     while draining a 1,000,000-event backlog;
//   - integration events over RabbitMQ (RABBITMQ_URL, default the local
//     broker): the relay against a raw amqp091 publisher with confirms, and
//     commit→remote handler p50 and p99 at 200 messages/s;
//   - the jobs' event trigger (a River job inserted per event in the pass)
//     against the same pass with a no-op handler, and the pick-up latency
//     of a job after its enqueue committed;
//   - lists with "asOf": another tenant's write p95 while clients loop
//     as-of lists over a history of 10,000 events, against the same writer
//     without them, as a ratio;
//   - partitioned consumers: the drain of a backlog with a 2 ms handler by
//     4 and by 8 consumer processes sharing 16 partitions against one
//     unpartitioned process, the drain with a no-op handler by 16
//     partitions in one process against one unpartitioned shard, and
//     commit-to-handler p99 of both in a second process, as ratios.
//
// Each comparison warms both sides up, then runs them in alternating rounds
// for -duration in total per side, so both see the same machine state. The
// targets are reported, never asserted.
//
// The server is DATABASE_URL (default
// postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable). The program
// creates the database kumiko_bench when missing and works in fresh random
// schemas that it drops on exit, including on SIGINT/SIGTERM. The HTTP rows
// keep idempotency records in REDIS_URL (default redis://127.0.0.1:6379/0);
// their keys are unique per run and expire after 24 h.
//
//	go run ./internal/bench [-duration 3s] [-warmup 500ms] [-rounds 3]
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/internal/migrations"
	"github.com/kumiko-go/kumiko/internal/pguuid"
)

const (
	defaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	benchDatabase      = "kumiko_bench"
	poolSize           = 24 // 16 writers, the store's notifier, and headroom
)

// config is the command line.
type config struct {
	duration time.Duration // measured time per side and comparison
	warmup   time.Duration // unmeasured time per side before each comparison
	rounds   int           // alternations of framework and raw within duration
	only     string        // groups to run, comma-separated; "" = all
	cpuProf  string        // file for a CPU profile of the whole run; "" = none
	cpu      bool          // CPU time per unit of each side, beside each comparison
	quick    bool          // short sides and a tenth of the events: a smoke run, not a measurement
	// The second process of the dispatcher latency (see consumeMain), and
	// the consumer processes of the partitions group (see partitionChild).
	consume, consumeSchema, consumeName, consumeInstance string
	consumePartitions, consumePool                       int
	consumeSleep                                         time.Duration
}

// sizes are how many events or messages the backlog measurements seed.
type sizes struct {
	drain, mem, relay, job, insert, rebuild int
	partSlow, partNoop                      int // the partitions group's backlogs (see partitions.go)
	searchRows                              int // the documents the search group searches (see search.go)
}

// sizesFor is the full sizes, or a tenth of them (a twentieth of the
// memory drain's) for a quick run.
func sizesFor(quick bool) sizes {
	s := sizes{drain: drainBacklog, mem: memBacklog, relay: relayBacklog, job: jobBacklog, insert: insertBacklog, rebuild: rebuildEvents,
		partSlow: partSlowBacklog, partNoop: partNoopBacklog, searchRows: 1_000_000}
	if quick {
		s = sizes{drain: s.drain / 10, mem: s.mem / 20, relay: s.relay / 10, job: s.job / 10, insert: s.insert / 10, rebuild: s.rebuild / 10,
			partSlow: s.partSlow / 10, partNoop: s.partNoop / 10, searchRows: s.searchRows / 10}
	}
	return s
}

// bench is the state shared by every measurement.
type bench struct {
	cfg         config
	n           sizes
	pool        *pgxpool.Pool
	store       *eventstore.Store
	tenant      uuid.UUID
	fwEvents    string // the store's events table, quoted and schema-qualified
	fwSnaps     string // the store's snapshots table
	rawEvents   string // the raw baseline's identically shaped events table
	rawArchived string // and its archived streams, empty
	// childProfiles numbers the CPU profiles of the consuming processes
	// (a pointer: a bench is copied, see compareLatency).
	childProfiles *atomic.Int64
}

func main() {
	var cfg config
	flag.DurationVar(&cfg.duration, "duration", 3*time.Second, "measured time per side of each comparison")
	flag.DurationVar(&cfg.warmup, "warmup", 500*time.Millisecond, "warm-up time per side before each comparison")
	flag.IntVar(&cfg.rounds, "rounds", 3, "alternating framework/raw rounds the duration is split into")
	flag.StringVar(&cfg.only, "only", "", "comma-separated groups to run (append, batch, load, pipeline, http, dispatcher, rebuild, integration, jobs, asof, partitions, personal, search); all when empty")
	flag.StringVar(&cfg.cpuProf, "cpuprofile", "", "write a CPU profile of the run (framework and raw sides alike) to this file, for go tool pprof; a consuming process started by the run writes its own to FILE.<consumer>.<n>")
	flag.BoolVar(&cfg.cpu, "cpu", false, "print each comparison's CPU time per unit of both sides: this process's and the local PostgreSQL server's (read from /proc)")
	flag.BoolVar(&cfg.quick, "quick", false, "a smoke run under two minutes: 300ms per side, 1 round, 100ms warm-up, a tenth of the events (the ratios are rough)")
	flag.StringVar(&cfg.consume, "consume", "", "internal: run as a consuming process of the dispatcher latency (dispatcher or raw) or of the partitions group (drain)")
	flag.StringVar(&cfg.consumeSchema, "consume-schema", "", "internal: the schema of -consume")
	flag.StringVar(&cfg.consumeName, "consume-name", "", "internal: the consumer name of -consume")
	flag.StringVar(&cfg.consumeInstance, "consume-instance", benchInstance, "internal: the instance id of -consume")
	flag.IntVar(&cfg.consumePartitions, "consume-partitions", 0, "internal: the partitions of the consumer of -consume")
	flag.IntVar(&cfg.consumePool, "consume-pool", 4, "internal: the pool size of -consume")
	flag.DurationVar(&cfg.consumeSleep, "consume-sleep", 0, "internal: how long the handler of -consume drain waits per event")
	flag.Parse()
	if cfg.consume != "" {
		stopProfile := func() {}
		if cfg.cpuProf != "" {
			var err error
			if stopProfile, err = startCPUProfile(cfg.cpuProf); err != nil {
				fmt.Fprintln(os.Stderr, "bench -consume:", err)
				os.Exit(1)
			}
		}
		err := consumeMain(context.Background(), os.Getenv("DATABASE_URL"), cfg)
		stopProfile()
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench -consume:", err)
			os.Exit(1)
		}
		return
	}
	if cfg.quick {
		cfg.duration, cfg.rounds, cfg.warmup = 300*time.Millisecond, 1, 100*time.Millisecond
	}
	if cfg.duration <= 0 || cfg.rounds < 1 || cfg.warmup < 0 {
		fmt.Fprintln(os.Stderr, "bench: -duration must be > 0, -rounds ≥ 1, -warmup ≥ 0")
		os.Exit(2)
	}
	stopProfile := func() {}
	if cfg.cpuProf != "" {
		var err error
		if stopProfile, err = startCPUProfile(cfg.cpuProf); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
	}
	err := run(cfg)
	stopProfile()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// startCPUProfile profiles the process into path until the returned
// function is called.
func startCPUProfile(path string) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); _ = f.Close() }, nil
}

func run(cfg config) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	context.AfterFunc(ctx, stop) // a second signal kills the process at once

	serverURL := os.Getenv("DATABASE_URL")
	if serverURL == "" {
		serverURL = defaultDatabaseURL
	}
	dbURL, err := withDatabase(serverURL, benchDatabase)
	if err != nil {
		return fmt.Errorf("DATABASE_URL: %w", err)
	}
	if err := ensureDatabase(ctx, serverURL, benchDatabase); err != nil {
		return fmt.Errorf("create database %s: %w", benchDatabase, err)
	}
	poolCfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return err
	}
	poolCfg.MaxConns = poolSize
	poolCfg.MinConns = poolSize
	poolCfg.AfterConnect = pguuid.AfterConnect // as the framework's own pools
	pool, err := pgxpool.NewWithConfig(ctx, poolCfg)
	if err != nil {
		return err
	}
	defer pool.Close()

	schema := "bench_" + randomHex(6)
	rawSchema := schema + "_raw"
	store, err := eventstore.New(pool, eventstore.Config{Schema: schema})
	if err != nil {
		return err
	}
	defer dropSchemas(pool, store, schema, rawSchema)
	rawStore, err := eventstore.New(pool, eventstore.Config{Schema: rawSchema})
	if err != nil {
		return err
	}
	for _, s := range []*eventstore.Store{store, rawStore} {
		if err := migrateAll(ctx, s); err != nil {
			return err
		}
	}

	b := &bench{
		cfg:           cfg,
		n:             sizesFor(cfg.quick),
		pool:          pool,
		store:         store,
		tenant:        uuid.MustParse("0190a000-0000-7000-8000-0000000be7c0"),
		fwEvents:      pgx.Identifier{schema, "kumiko_events"}.Sanitize(),
		fwSnaps:       pgx.Identifier{schema, "kumiko_snapshots"}.Sanitize(),
		rawEvents:     pgx.Identifier{rawSchema, "kumiko_events"}.Sanitize(),
		rawArchived:   pgx.Identifier{rawSchema, "kumiko_archived_streams"}.Sanitize(),
		childProfiles: new(atomic.Int64),
	}
	if err := b.printHeader(ctx, schema); err != nil {
		return err
	}

	var rows []row
	groups := []struct {
		name string
		run  func(context.Context) ([]row, error)
	}{
		{"append", b.appendRows}, {"batch", b.batchRows}, {"load", b.loadRows}, {"pipeline", b.pipelineRows},
		{"http", b.httpRows}, {"dispatcher", b.dispatcherRows}, {"rebuild", b.rebuildRows}, {"integration", b.integrationRows}, {"jobs", b.jobRows}, {"asof", b.asOfRows},
		{"partitions", b.partitionRows}, {"personal", b.personalRows}, {"search", b.searchRows},
	}
	for _, g := range groups {
		if cfg.only != "" && !slices.Contains(strings.Split(cfg.only, ","), g.name) {
			continue
		}
		group := g.run
		rs, err := group(ctx)
		rows = append(rows, rs...)
		if err != nil {
			printTable(rows) // what was measured before the failure or interrupt
			return err
		}
	}
	printTable(rows)
	return nil
}

// printHeader says what the numbers were measured on.
func (b *bench) printHeader(ctx context.Context, schema string) error {
	var version, syncCommit string
	if err := b.pool.QueryRow(ctx, `SELECT current_setting('server_version'), current_setting('synchronous_commit')`).
		Scan(&version, &syncCommit); err != nil {
		return err
	}
	fmt.Printf("kumiko bench: PostgreSQL %s (synchronous_commit=%s), %d CPUs, GOMAXPROCS=%d, pool %d\n",
		version, syncCommit, runtime.NumCPU(), runtime.GOMAXPROCS(0), poolSize)
	fmt.Printf("database %s, schemas %s (framework) and %s_raw (raw); %s per side in %d alternating rounds after %s warm-up\n\n",
		benchDatabase, schema, schema, b.cfg.duration, b.cfg.rounds, b.cfg.warmup)
	return nil
}

// dropSchemas removes the run's schemas. It runs on every exit path, with a
// context of its own because the run's context may be cancelled by a signal.
func dropSchemas(pool *pgxpool.Pool, store *eventstore.Store, schemas ...string) {
	store.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, s := range schemas {
		if _, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{s}.Sanitize()+" CASCADE"); err != nil {
			fmt.Fprintf(os.Stderr, "bench: drop schema %s: %v\n", s, err)
		}
	}
}

// ensureDatabase creates the database name on the server when it is missing.
func ensureDatabase(ctx context.Context, serverURL, name string) error {
	conn, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil || exists {
		return err
	}
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == "42P04" || pgErr.Code == "23505") {
		return nil // created concurrently
	}
	return err
}

// withDatabase returns serverURL pointing at database name.
func withDatabase(serverURL, name string) (string, error) {
	u, err := url.Parse(serverURL)
	if err != nil {
		return "", err
	}
	if u.Scheme != "postgres" && u.Scheme != "postgresql" {
		return "", fmt.Errorf("want a postgres:// URL, got scheme %q", u.Scheme)
	}
	u.Path = "/" + name
	return u.String(), nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// migrateAll applies the migrations of the event store and of the packages
// that own tables next to it.
func migrateAll(ctx context.Context, s *eventstore.Store) error {
	_, err := migrations.All(ctx, s)
	return err
}

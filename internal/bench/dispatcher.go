package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kumiko-go/kumiko/consumer"
	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/internal/pguuid"
)

const (
	drainBacklog   = 200_000   // events the drain comparison reads from cursor 0
	memBacklog     = 1_000_000 // events of the drain whose memory is sampled
	passBatch      = 200       // events per pass: the consumer default
	paceRate       = 200       // appends per second of the latency writer
	memSampleEvery = 5         // passes between memory samples of the backlog drain
	memAfter       = 10_000    // events after which the backlog drain's first memory figure is taken
	benchInstance  = "bench"   // the event dispatchers' instance id
)

// dispatcherRows measures the async event dispatcher (consumer.Dispatcher)
// with a no-op consumer, each against a hand-written pgx baseline:
//
//   - the drain of a drainBacklog-event backlog by RunPass in a loop, 1
//     client, batch 200, next to the same pass shape by hand (lock the state
//     row FOR UPDATE SKIP LOCKED, read the next 200 events, write the
//     cursor) on the same table;
//   - the latency from an append's commit (its return in the writer) to the
//     handler, p50 and p99, of a started dispatcher woken by LISTEN/NOTIFY
//     from another store and pool, and by the in-process wake-up of the same
//     store, next to a hand-written listener running the raw pass;
//   - the drain of a backlog by a pipelined consumer INSERTing a row per
//     event, next to the raw pass sending the same INSERTs as one batch;
//   - the drain of a memBacklog-event backlog with the heap in use and
//     the resident set sampled along the way: after the first 10,000 events,
//     the peak, and the peak relative to the first tenth of the drain.
func (b *bench) dispatcherRows(ctx context.Context) ([]row, error) {
	var rows []row
	for _, group := range []func(context.Context) ([]row, error){b.drainRows, b.insertDrainRows, b.latencyRows, b.backlogRows} {
		rs, err := group(ctx)
		rows = append(rows, rs...)
		if err != nil {
			return rows, err
		}
	}
	return rows, nil
}

// drainRows compares the drain of a drainBacklog-event backlog by the
// dispatcher with the raw pass, each from a fresh cursor at 0 in every round.
func (b *bench) drainRows(ctx context.Context) ([]row, error) {
	schema := b.store.Schema() + "_drain"
	fmt.Fprintf(os.Stderr, "  seeding %s events into schema %s …\n", formatValue(float64(b.n.drain), ""), schema)
	store, err := b.migratedStore(ctx, schema)
	if err != nil {
		return nil, err
	}
	defer dropSchemas(b.pool, store, schema) // nothing appended through store: nothing to wait for
	last, err := b.seedBacklog(ctx, schema, b.n.drain)
	if err != nil {
		return nil, err
	}

	name := fmt.Sprintf("dispatcher drain %s events, no-op consumer, batch %d", formatValue(float64(b.n.drain), ""), passBatch)
	fmt.Fprintf(os.Stderr, "  %s …\n", name)
	raw := newRawPasser(b.pool, schema)
	sides := [2]func(ctx context.Context, name string) (passFunc, error){
		func(ctx context.Context, name string) (passFunc, error) {
			return noopConsumer(ctx, store, name)
		},
		func(ctx context.Context, name string) (passFunc, error) { return raw.start(ctx, name, 0, nil) },
	}
	sideNames := [2]string{"fw", "raw"}
	if b.cfg.warmup > 0 {
		for i, start := range sides {
			pass, err := start(ctx, "bench-drain-warmup-"+sideNames[i])
			if err != nil {
				return nil, err
			}
			if _, err := drain(ctx, pass, last, time.Now().Add(b.cfg.warmup), nil); err != nil {
				return nil, fmt.Errorf("%s: warm-up: %w", name, err)
			}
		}
	}
	total, err := b.drainSides(ctx, name, "bench-drain", last, int64(b.n.drain), sides[:], nil)
	if err != nil {
		return nil, err
	}
	return []row{{name: name, unit: "events/s", fw: total[0].rate(), raw: total[1].rate(), goal: atLeastOfRaw(0.60)}}, nil
}

// writerStore is a store on schema with a pool of its own (4
// connections), for a writer whose appends must not reach a consumer of
// b's store in this process; closeWriter closes the store, then its pool.
func (b *bench) writerStore(ctx context.Context, schema string) (_ *eventstore.Store, closeWriter func(), _ error) {
	wcfg := b.pool.Config().Copy()
	wcfg.MaxConns, wcfg.MinConns = 4, 2
	wpool, err := pgxpool.NewWithConfig(ctx, wcfg)
	if err != nil {
		return nil, nil, err
	}
	wstore, err := eventstore.New(wpool, eventstore.Config{Schema: schema})
	if err != nil {
		wpool.Close()
		return nil, nil, err
	}
	// The store first: its last notification may be on the way.
	return wstore, func() { wstore.Close(); wpool.Close() }, nil
}

// latencyRows measures commit-to-handler latency at paceRate appends/s of one
// event each: first with the consumer in a second process (this binary
// started again with -consume, see consumeMain), woken only by LISTEN/NOTIFY
// — the deployment the targets are about; then in this process, with the
// writer on a store and pool of its own, so only LISTEN/NOTIFY can wake the
// consumer, and with the writer on the consumer's store, so the in-process
// wake-up applies too. The raw side is a goroutine woken the same way (its
// own LISTEN connection, or Store.Subscribe) that runs the raw pass until a
// batch is not full. Both sides alternate in rounds as compare does; a
// writer's time is taken when its append returned (the commit), the
// handler's when it is called with the event — in the second process its
// wall-clock time, sent back over a pipe; both processes read this
// machine's clock. A handler that ran before the append returned counts as
// 0.
func (b *bench) latencyRows(ctx context.Context) ([]row, error) {
	schema := b.store.Schema() + "_lat"
	store, err := b.migratedStore(ctx, schema)
	if err != nil {
		return nil, err
	}
	defer dropSchemas(b.pool, store, schema)
	// The writer of the LISTEN/NOTIFY rows: nothing it appends reaches the
	// consumer's store in this process.
	wstore, closeWriter, err := b.writerStore(ctx, schema)
	if err != nil {
		return nil, err
	}
	defer closeWriter()

	raw := newRawPasser(b.pool, schema)
	channel := store.NotifyChannel()
	fw := dispatcherSide(store, 0)
	rawListen := rawListenSide(b.pool, raw, channel)
	rawLocal := func(w *eventstore.Store) latencySide {
		return latencySide{start: func(ctx context.Context, name string, see seeFunc) (func() error, error) {
			wake, unsubscribe := w.Subscribe()
			stop, err := raw.receive(ctx, name, func(ctx context.Context) error {
				select {
				case <-wake:
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			}, see.event)
			if err != nil {
				unsubscribe()
				return nil, err
			}
			return func() error {
				err := stop()
				unsubscribe()
				return err
			}, nil
		}}
	}

	p99 := goal{text: "≤ 10 ms", met: func(fw, _ float64) bool { return fw <= 10_000 }}
	p50 := goal{text: "≤ 2 ms", met: func(fw, _ float64) bool { return fw <= 2_000 }}
	modes := []struct {
		name     string
		writer   *eventstore.Store
		fw, raw  latencySide
		p50, p99 goal
	}{
		{"other process, LISTEN/NOTIFY", wstore, b.childSide(schema, consumeDispatcher), b.childSide(schema, consumeRaw), p50, p99},
		{"LISTEN/NOTIFY, other store", wstore, fw, rawListen, goal{}, goal{}},
		{"in-process wake-up, same store", store, fw, rawLocal(store), goal{}, goal{}},
	}
	var rows []row
	phase := 0 // numbers the consumers: every phase starts one
	for _, m := range modes {
		fmt.Fprintf(os.Stderr, "  dispatcher commit→handler latency, %s, %d appends/s …\n", m.name, paceRate)
		sides := [2]latencySide{m.fw, m.raw}
		lat := [2]*latencies{newLatencies(1), newLatencies(1)}
		run := func(side int, d time.Duration, into *latencies) error {
			phase++
			return b.pacedPhase(ctx, m.writer, sides[side], fmt.Sprintf("bench-latency-%d", phase), channel, d, into)
		}
		if b.cfg.warmup > 0 {
			for side := range 2 {
				if err := run(side, b.cfg.warmup, nil); err != nil {
					return rows, fmt.Errorf("latency, %s: warm-up: %w", m.name, err)
				}
			}
		}
		slice := b.cfg.duration / time.Duration(b.cfg.rounds)
		for round := range b.cfg.rounds {
			for i := range 2 {
				side := (i + round) % 2
				if err := run(side, slice, lat[side]); err != nil {
					return rows, fmt.Errorf("latency, %s: %w", m.name, err)
				}
			}
		}
		for _, q := range []float64{0.50, 0.99} {
			r := row{
				name: fmt.Sprintf("dispatcher commit→handler p%.0f, %s, %d appends/s", q*100, m.name, paceRate),
				unit: "µs",
				fw:   micros(lat[0].quantile(q)),
				raw:  micros(lat[1].quantile(q)),
			}
			r.goal = m.p50
			if q == 0.99 {
				r.goal = m.p99
			}
			rows = append(rows, r)
		}
	}
	return rows, nil
}

// dispatcherSide is a started consumer.Dispatcher on store with one no-op
// consumer, starting from now; split into that many partitions when
// partitions is above 1.
func dispatcherSide(store *eventstore.Store, partitions int) latencySide {
	return latencySide{listens: true, start: func(ctx context.Context, name string, see seeFunc) (func() error, error) {
		d, err := consumer.New(store, consumer.Config{InstanceID: benchInstance}, consumer.Consumer{
			Name:       name,
			StartFrom:  feature.FromNow,
			BatchSize:  passBatch,
			Partitions: partitions,
			Handle: func(_ context.Context, _ pgx.Tx, ev eventstore.Event) error {
				see.event(ev)
				return nil
			},
		})
		if err != nil {
			return nil, err
		}
		if err := d.Start(ctx); err != nil {
			return nil, err
		}
		return func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			return d.Stop(ctx)
		}, nil
	}}
}

// rawListenSide is the raw pass run on every notification of channel,
// received on a LISTEN connection of its own.
func rawListenSide(pool *pgxpool.Pool, raw *rawPasser, channel string) latencySide {
	return latencySide{listens: true, start: func(ctx context.Context, name string, see seeFunc) (func() error, error) {
		conn, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig.Copy())
		if err != nil {
			return nil, err
		}
		if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
			conn.Close(context.Background())
			return nil, err
		}
		stop, err := raw.receive(ctx, name, func(ctx context.Context) error {
			_, err := conn.WaitForNotification(ctx)
			return err
		}, see.event)
		if err != nil {
			conn.Close(context.Background())
			return nil, err
		}
		return func() error {
			err := stop()
			conn.Close(context.Background())
			return err
		}, nil
	}}
}

// The sides a consuming second process runs (its -consume flag).
const (
	consumeDispatcher = "dispatcher" // dispatcherSide
	consumeRaw        = "raw"        // rawListenSide
)

// childSide runs side (consumeDispatcher or consumeRaw) in a second process:
// this binary again, with -consume and the flags args, on schema. The
// process writes childReady to its stdout once it consumes, then a line
// "<event id> <unix nanoseconds>" whenever it sees an event, and ends when
// its stdin is closed.
func (b *bench) childSide(schema, side string, args ...string) latencySide {
	return latencySide{listens: true, start: func(ctx context.Context, name string, see seeFunc) (func() error, error) {
		cmd, err := b.childCommand(ctx, side, schema, name, args...)
		if err != nil {
			return nil, err
		}
		cmd.Stderr = os.Stderr
		stdin, err := cmd.StdinPipe()
		if err != nil {
			return nil, err
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return nil, err
		}
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		// The first line says the side has started: its consumer is
		// registered and listening (a LISTEN alone is not enough: the raw
		// side registers its state row after it).
		sc := bufio.NewScanner(stdout)
		if !sc.Scan() || sc.Text() != childReady {
			_ = stdin.Close()
			return nil, errors.Join(fmt.Errorf("consumer process %s did not start: %q", side, sc.Text()), sc.Err(), cmd.Wait())
		}
		read := make(chan error, 1)
		go func() {
			for sc.Scan() {
				var id, at int64
				if _, err := fmt.Sscan(sc.Text(), &id, &at); err != nil {
					read <- fmt.Errorf("consumer process %s: %q: %w", side, sc.Text(), err)
					return
				}
				see(id, time.Unix(0, at))
			}
			read <- sc.Err()
		}()
		return func() error {
			err := stdin.Close()
			err = errors.Join(err, <-read) // stdout ends when the process does
			return errors.Join(err, cmd.Wait())
		}, nil
	}}
}

// childCommand is this binary again as a consuming process: -consume side
// on schema with consumer name and the flags args, on the bench's
// database.
func (b *bench) childCommand(ctx context.Context, side, schema, name string, args ...string) (*exec.Cmd, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	if b.cfg.cpuProf != "" {
		args = append(args, "-cpuprofile", fmt.Sprintf("%s.%s.%d", b.cfg.cpuProf, name, b.childProfiles.Add(1)))
	}
	cmd := exec.CommandContext(ctx, exe, append([]string{"-consume", side, "-consume-schema", schema, "-consume-name", name}, args...)...)
	cmd.Env = append(os.Environ(), "DATABASE_URL="+b.pool.Config().ConnString())
	return cmd, nil
}

// childReady is the line a consuming process writes once it consumes.
const childReady = "ready"

// consumeApplication is the application_name of a consuming process's
// sessions.
const consumeApplication = "kumiko-bench-consume"

// consumeMain is the second process of childSide and of the partitions
// group: it runs cfg.consume on cfg.consumeSchema with consumer
// cfg.consumeName until its stdin is closed.
func consumeMain(ctx context.Context, databaseURL string, cfg config) error {
	side, schema, name := cfg.consume, cfg.consumeSchema, cfg.consumeName
	poolCfg, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		return err
	}
	poolCfg.MaxConns, poolCfg.MinConns = int32(cfg.consumePool), 2
	poolCfg.AfterConnect = pguuid.AfterConnect
	poolCfg.ConnConfig.RuntimeParams["application_name"] = consumeApplication
	pool, err := pgxpool.NewWithConfig(ctx, poolCfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	store, err := eventstore.New(pool, eventstore.Config{Schema: schema})
	if err != nil {
		return err
	}
	defer store.Close()
	var ls latencySide
	switch side {
	case consumeDispatcher:
		ls = dispatcherSide(store, cfg.consumePartitions)
	case consumeRaw:
		ls = rawListenSide(pool, newRawPasser(pool, schema), store.NotifyChannel())
	case consumeDrain:
		return partitionChild(ctx, store, cfg)
	default:
		return fmt.Errorf("-consume %q: want %s, %s or %s", side, consumeDispatcher, consumeRaw, consumeDrain)
	}
	var mu sync.Mutex
	out := bufio.NewWriter(os.Stdout)
	stop, err := ls.start(ctx, name, func(id int64, at time.Time) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(out, "%d %d\n", id, at.UnixNano())
		_ = out.Flush()
	})
	if err != nil {
		return err
	}
	mu.Lock()
	fmt.Fprintln(out, childReady)
	err = out.Flush()
	mu.Unlock()
	if err != nil {
		return errors.Join(err, stop())
	}
	_, _ = io.Copy(io.Discard, os.Stdin) // until the parent closes it
	return stop()
}

// latencySide is one side of a latency comparison: start begins consuming
// the events appended from now on, calling see with each, until stop.
type latencySide struct {
	listens bool // start opens a LISTEN connection on the store's channel
	start   func(ctx context.Context, name string, see seeFunc) (stop func() error, err error)
}

// seeFunc records that a consumer saw event id at the given time.
type seeFunc func(id int64, at time.Time)

// event records ev as seen now.
func (see seeFunc) event(ev eventstore.Event) { see(ev.ID, time.Now()) }

// phaseSettle is how long a paced phase lets its consumer settle after
// the start before it appends: longer than the default PollInterval.
const phaseSettle = time.Second

// pacedPhase starts side as consumer, appends one event per append through w
// at paceRate for d, waits until the consumer saw every event, stops it and
// adds the commit-to-handler latencies to into (nil: discard them).
func (b *bench) pacedPhase(ctx context.Context, w *eventstore.Store, side latencySide, name, channel string, d time.Duration, into *latencies) error {
	// A listener of the previous phase may still be leaving the server.
	if err := waitListeners(ctx, w.Pool(), channel, 0); err != nil {
		return err
	}
	dl := &deliveries{committed: map[int64]time.Time{}, seen: map[int64]time.Time{}}
	stop, err := side.start(ctx, name, dl.see)
	if err != nil {
		return err
	}
	if side.listens {
		if err := waitListeners(ctx, w.Pool(), channel, 1); err != nil {
			return errors.Join(err, stop())
		}
	}
	// The steady state is measured, not the start: the consumer's first
	// passes and its first polls are over by then.
	time.Sleep(phaseSettle)
	err = b.paceAppends(ctx, w, d, dl)
	if err == nil {
		err = dl.waitSeen(ctx, 5*time.Second)
	}
	if err := errors.Join(err, stop()); err != nil {
		return err
	}
	if into != nil {
		dl.record(into)
	}
	return nil
}

// paceAppends appends one event to a new stream through w paceRate times a
// second for d, recording each event's id and the time its append returned.
func (b *bench) paceAppends(ctx context.Context, w *eventstore.Store, d time.Duration, dl *deliveries) error {
	ev := benchEvent()
	tick := time.NewTicker(time.Second / paceRate)
	defer tick.Stop()
	for deadline := time.Now().Add(d); time.Now().Before(deadline); {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		res, err := w.Append(ctx, eventstore.Stream{TenantID: b.tenant, AggregateType: aggType}, 0, ev)
		if err != nil {
			return err
		}
		dl.commit(res.Events[0].ID, time.Now())
	}
	return nil
}

// waitListeners waits until exactly n sessions of the server are idle after
// LISTEN on channel.
func waitListeners(ctx context.Context, pool *pgxpool.Pool, channel string, n int) error {
	listen := "LISTEN " + pgx.Identifier{channel}.Sanitize()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		var got int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND state = 'idle' AND query = $1`,
			listen).Scan(&got); err != nil {
			return fmt.Errorf("wait for %d listeners on %s: %w", n, channel, err)
		}
		if got == n {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for %d listeners on %s: %d after 10s", n, channel, got)
		case <-time.After(time.Millisecond):
		}
	}
}

// deliveries are the times at which a paced writer's events committed and
// at which a consumer saw them, by event id.
type deliveries struct {
	mu        sync.Mutex
	committed map[int64]time.Time
	seen      map[int64]time.Time
}

func (d *deliveries) commit(id int64, at time.Time) {
	d.mu.Lock()
	d.committed[id] = at
	d.mu.Unlock()
}

func (d *deliveries) see(id int64, at time.Time) {
	d.mu.Lock()
	if _, ok := d.seen[id]; !ok {
		d.seen[id] = at
	}
	d.mu.Unlock()
}

// unseen counts the committed events the consumer did not see yet.
func (d *deliveries) unseen() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for id := range d.committed {
		if _, ok := d.seen[id]; !ok {
			n++
		}
	}
	return n
}

// waitSeen waits until the consumer saw every committed event.
func (d *deliveries) waitSeen(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		n := d.unseen()
		if n == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d events not delivered after %s", n, len(d.committed), timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
}

// record adds the latency of every event to l.
func (d *deliveries) record(l *latencies) {
	for id, committed := range d.committed {
		l.workers[0] = append(l.workers[0], max(d.seen[id].Sub(committed), 0))
	}
}

// backlogRows drains a memBacklog-event backlog once with the dispatcher
// and once with the raw pass, sampling the heap in use and the resident set
// every memSampleEvery passes, after the garbage of earlier work was returned
// to the OS. Memory is flat when the peak of the whole drain is that of its
// first tenth: nothing held grows with the events read.
func (b *bench) backlogRows(ctx context.Context) ([]row, error) {
	n := b.n.mem
	schema := b.store.Schema() + "_backlog"
	fmt.Fprintf(os.Stderr, "  seeding %s events into schema %s with COPY …\n", formatValue(float64(n), ""), schema)
	store, err := b.migratedStore(ctx, schema)
	if err != nil {
		return nil, err
	}
	defer dropSchemas(b.pool, store, schema)
	start := time.Now()
	last, err := b.seedBacklog(ctx, schema, n)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "  seeded in %s\n", time.Since(start).Round(time.Millisecond))

	name := fmt.Sprintf("dispatcher drain %s-event backlog, no-op consumer", formatValue(float64(n), ""))
	fmt.Fprintf(os.Stderr, "  %s …\n", name)
	raw := newRawPasser(b.pool, schema)
	sides := [2]func(ctx context.Context) (passFunc, error){
		func(ctx context.Context) (passFunc, error) { return noopConsumer(ctx, store, "bench-backlog") },
		func(ctx context.Context) (passFunc, error) { return raw.start(ctx, "bench-backlog-raw", 0, nil) },
	}
	var (
		rates   [2]float64
		samples [2]*memSampler
	)
	for side, start := range sides {
		pass, err := start(ctx)
		if err != nil {
			return nil, err
		}
		debug.FreeOSMemory()
		s := &memSampler{early: n / 10}
		m, err := drain(ctx, pass, last, time.Time{}, s.after)
		if err == nil && m.units != int64(n) {
			err = fmt.Errorf("drained %d events, want %d", m.units, n)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		rates[side], samples[side] = m.rate(), s
	}
	fw, rw := samples[0], samples[1]
	flat := goal{text: "≤ 1.50x", met: func(fw, _ float64) bool { return fw <= 1.5 }}
	after := "after " + formatValue(memAfter, "") + " events"
	return []row{
		{name: name, unit: "events/s", fw: rates[0], raw: rates[1]},
		{name: "  heap in use " + after, unit: "KiB", fw: kib(fw.at.heap), raw: kib(rw.at.heap)},
		{name: "  peak heap in use", unit: "KiB", fw: kib(fw.peak.heap), raw: kib(rw.peak.heap)},
		{name: "  peak heap in use / peak in the first tenth", unit: "x", fw: ratio(fw.peak.heap, fw.earlyPeak.heap), raw: ratio(rw.peak.heap, rw.earlyPeak.heap), goal: flat},
		{name: "  VmRSS " + after, unit: "KiB", fw: kib(fw.at.rss), raw: kib(rw.at.rss)},
		{name: "  peak VmRSS", unit: "KiB", fw: kib(fw.peak.rss), raw: kib(rw.peak.rss)},
		{name: "  peak VmRSS / peak in the first tenth", unit: "x", fw: ratio(fw.peak.rss, fw.earlyPeak.rss), raw: ratio(rw.peak.rss, rw.earlyPeak.rss), goal: flat},
	}, nil
}

// memSample is the heap in use and the resident set, in bytes.
type memSample struct{ heap, rss uint64 }

func readMem() memSample {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return memSample{heap: ms.HeapInuse, rss: vmRSS()}
}

func (s memSample) max(o memSample) memSample {
	return memSample{heap: max(s.heap, o.heap), rss: max(s.rss, o.rss)}
}

// vmRSS is the process's resident set from /proc/self/status; 0 where there
// is none.
func vmRSS() uint64 {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range bytes.Lines(status) {
		if rest, ok := bytes.CutPrefix(line, []byte("VmRSS:")); ok {
			kb, err := strconv.ParseUint(string(bytes.TrimSuffix(bytes.TrimSpace(rest), []byte(" kB"))), 10, 64)
			if err != nil {
				return 0
			}
			return kb << 10
		}
	}
	return 0
}

// memSampler samples memory along a drain: every memSampleEvery passes and
// once memAfter events were drained.
type memSampler struct {
	early     int       // events of the first tenth
	passes    int       // passes so far
	at        memSample // after memAfter events
	earlyPeak memSample // over the samples within the first tenth
	peak      memSample // over all samples
}

func (s *memSampler) after(events int) {
	s.passes++
	first := s.at == (memSample{}) && events >= memAfter
	if s.passes%memSampleEvery != 0 && !first {
		return
	}
	m := readMem()
	if first {
		s.at = m
	}
	s.peak = s.peak.max(m)
	if events <= s.early {
		s.earlyPeak = s.earlyPeak.max(m)
	}
}

func kib(bytes uint64) float64 { return float64(bytes) / 1024 }

func ratio(a, b uint64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// passFunc runs one pass of a consumer and returns the events it handled and
// the cursor after it.
type passFunc func(ctx context.Context) (handled int, cursor int64, err error)

// drain runs pass until the cursor reaches last (or, with a non-zero until,
// until that time) and returns the events handled and the time it took.
// after, when set, is called after every pass with the events handled so far.
func drain(ctx context.Context, pass passFunc, last int64, until time.Time, after func(events int)) (measured, error) {
	var m measured
	start := time.Now()
	for {
		n, cursor, err := pass(ctx)
		if err != nil {
			return m, err
		}
		m.units += int64(n)
		if after != nil {
			after(int(m.units))
		}
		if cursor >= last || (!until.IsZero() && time.Now().After(until)) {
			break
		}
		if n == 0 {
			return m, fmt.Errorf("a pass handled nothing at cursor %d of %d", cursor, last)
		}
	}
	m.elapsed = time.Since(start)
	return m, nil
}

// drainSides drains from each side's fresh cursor up to last, every side
// once per round in an order that rotates with the round, and returns each
// side's total; want, when positive, is the number of events each drain
// must handle. A side's state is named prefix-round-side; before, when set,
// runs ahead of each drain.
func (b *bench) drainSides(ctx context.Context, name, prefix string, last, want int64,
	sides []func(ctx context.Context, name string) (passFunc, error), before func(ctx context.Context, side int) error,
) ([]measured, error) {
	total := make([]measured, len(sides))
	for round := range b.cfg.rounds {
		for i := range sides {
			side := (i + round) % len(sides)
			if before != nil {
				if err := before(ctx, side); err != nil {
					return nil, err
				}
			}
			pass, err := sides[side](ctx, fmt.Sprintf("%s-%d-%d", prefix, round, side))
			if err != nil {
				return nil, err
			}
			m, err := drain(ctx, pass, last, time.Time{}, nil)
			if err == nil && want > 0 && m.units != want {
				err = fmt.Errorf("drained %d events, want %d", m.units, want)
			}
			if err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			total[side].units += m.units
			total[side].elapsed += m.elapsed
		}
	}
	return total, nil
}

// noopConsumer registers the shared consumer name, starting at the beginning
// of store's log, on a dispatcher of its own and returns a pass of it by
// RunPass. Its handler does nothing.
func noopConsumer(ctx context.Context, store *eventstore.Store, name string) (passFunc, error) {
	return consumerPass(ctx, store, consumer.Consumer{
		Name:   name,
		Handle: func(context.Context, pgx.Tx, eventstore.Event) error { return nil },
	})
}

// consumerPass registers c (batch passBatch) on a dispatcher of its own and
// returns a pass of it by RunPass.
func consumerPass(ctx context.Context, store *eventstore.Store, c consumer.Consumer) (passFunc, error) {
	c.BatchSize = passBatch
	d, err := consumer.New(store, consumer.Config{InstanceID: benchInstance}, c)
	if err != nil {
		return nil, err
	}
	if err := d.Register(ctx); err != nil {
		return nil, err
	}
	return func(ctx context.Context) (int, int64, error) {
		res, err := d.RunPass(ctx, c.Name)
		switch {
		case err != nil:
			return 0, 0, err
		case !res.Locked:
			return 0, 0, fmt.Errorf("consumer %s: the shard is locked by another pass", c.Name)
		case res.Failed != nil:
			return 0, 0, res.Failed
		}
		return res.Handled, res.Cursor, nil
	}, nil
}

// rawPasser is the raw baseline's pass on a schema's kumiko_events and
// kumiko_event_consumers: the dispatcher's pass shape without the horizon,
// gap bookkeeping, attempts and status.
type rawPasser struct {
	pool                       *pgxpool.Pool
	events                     string // the events table, quoted and schema-qualified
	register, lock, read, save string
}

func newRawPasser(pool *pgxpool.Pool, schema string) *rawPasser {
	consumers := pgx.Identifier{schema, "kumiko_event_consumers"}.Sanitize()
	events := pgx.Identifier{schema, "kumiko_events"}.Sanitize()
	return &rawPasser{
		pool:     pool,
		events:   events,
		register: `INSERT INTO ` + consumers + ` (name, instance_id, last_processed_event_id) VALUES ($1, $2, $3)`,
		lock:     `SELECT last_processed_event_id FROM ` + consumers + ` WHERE name = $1 AND instance_id = $2 FOR UPDATE SKIP LOCKED`,
		read:     `SELECT ` + eventColumns + ` FROM ` + events + ` WHERE id > $1 ORDER BY id LIMIT $2`,
		save:     `UPDATE ` + consumers + ` SET last_processed_event_id = $3 WHERE name = $1 AND instance_id = $2`,
	}
}

// start creates the state row name with its cursor at from and returns its pass, which calls see (when set) with every
// event read, as the dispatcher calls a handler.
func (r *rawPasser) start(ctx context.Context, name string, from int64, see func(eventstore.Event)) (passFunc, error) {
	return r.startWith(ctx, name, from, func(_ context.Context, _ pgx.Tx, evs []eventstore.Event) error {
		if see != nil {
			for _, ev := range evs {
				see(ev)
			}
		}
		return nil
	})
}

// startWith creates the state row name with its cursor at from and returns
// its pass: in one transaction, lock the state row, read the next passBatch
// events by the id cursor, hand them to handle, save the cursor.
func (r *rawPasser) startWith(ctx context.Context, name string, from int64, handle func(context.Context, pgx.Tx, []eventstore.Event) error) (passFunc, error) {
	if _, err := r.pool.Exec(ctx, r.register, name, consumer.SharedInstance, from); err != nil {
		return nil, fmt.Errorf("register raw state row %s: %w", name, err)
	}
	return func(ctx context.Context) (int, int64, error) {
		var (
			n      int
			cursor int64
		)
		err := pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
			if err := tx.QueryRow(ctx, r.lock, name, consumer.SharedInstance).Scan(&cursor); err != nil {
				return fmt.Errorf("lock raw state row %s: %w", name, err)
			}
			rows, err := tx.Query(ctx, r.read, cursor, passBatch)
			if err != nil {
				return err
			}
			evs, err := scanEvents(rows)
			if err != nil {
				return err
			}
			if err := handle(ctx, tx, evs); err != nil {
				return err
			}
			if n = len(evs); n > 0 {
				cursor = evs[n-1].ID
			}
			_, err = tx.Exec(ctx, r.save, name, consumer.SharedInstance, cursor)
			return err
		})
		return n, cursor, err
	}, nil
}

// receive creates the state row name at the newest event and runs its pass
// every time wait returns, again while batches are full, until stop. stop
// returns the error that ended the loop early, if any.
func (r *rawPasser) receive(ctx context.Context, name string, wait func(context.Context) error, see func(eventstore.Event)) (stop func() error, err error) {
	var head int64
	if err := r.pool.QueryRow(ctx, `SELECT COALESCE(max(id), 0) FROM `+r.events).Scan(&head); err != nil {
		return nil, err
	}
	pass, err := r.start(ctx, name, head, see)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	var (
		wg      sync.WaitGroup
		loopErr error
	)
	wg.Go(func() {
		for {
			if err := wait(ctx); err != nil {
				if ctx.Err() == nil {
					loopErr = err
				}
				return
			}
			for {
				n, _, err := pass(ctx)
				if err != nil {
					if ctx.Err() == nil {
						loopErr = err
					}
					return
				}
				if n < passBatch {
					break
				}
			}
		}
	})
	return func() error {
		cancel()
		wg.Wait()
		return loopErr
	}, nil
}

// migratedStore returns a store on schema, migrated. The caller drops the
// schema.
func (b *bench) migratedStore(ctx context.Context, schema string) (*eventstore.Store, error) {
	store, err := eventstore.New(b.pool, eventstore.Config{Schema: schema})
	if err != nil {
		return nil, err
	}
	if err := migrateAll(ctx, store); err != nil {
		return nil, err
	}
	return store, nil
}

// seedBacklog writes n events of the bench shape, each to a stream of its
// own, into schema's kumiko_events with one COPY, vacuums and analyses the
// table (so no pass pays for hint bits or statistics) and returns the
// highest id.
func (b *bench) seedBacklog(ctx context.Context, schema string, n int) (int64, error) {
	table := pgx.Identifier{schema, "kumiko_events"}
	meta, tenant := benchMetadata(), [16]byte(b.tenant)
	i := 0
	copied, err := b.pool.CopyFrom(ctx, table,
		[]string{"aggregate_id", "aggregate_type", "tenant_id", "version", "type", "event_version", "payload", "metadata", "created_by"},
		pgx.CopyFromFunc(func() ([]any, error) {
			if i == n {
				return nil, nil
			}
			i++
			return []any{[16]byte(uuid.Must(uuid.NewV7())), aggType, tenant, int32(1), eventType, int32(1), benchPayload, meta, benchUser}, nil
		}))
	if err != nil {
		return 0, fmt.Errorf("seed %s: %w", table.Sanitize(), err)
	}
	if copied != int64(n) {
		return 0, fmt.Errorf("seed %s: copied %d rows, want %d", table.Sanitize(), copied, n)
	}
	if _, err := b.pool.Exec(ctx, "VACUUM (ANALYZE) "+table.Sanitize()); err != nil {
		return 0, err
	}
	var last int64
	err = b.pool.QueryRow(ctx, "SELECT COALESCE(max(id), 0) FROM "+table.Sanitize()).Scan(&last)
	return last, err
}

package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kumiko-go/kumiko/consumer"
	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/internal/pguuid"
)

const (
	partCount       = 16                    // partitions of the partitioned sides
	partSlowBacklog = 4_000                 // events the 2 ms-handler drains read, each of a stream of its own
	partNoopBacklog = 100_000               // events the no-op drains read
	partHandlerWait = 2 * time.Millisecond  // what the slow handler waits per event
	partPoll        = 50 * time.Millisecond // the consumer processes' PollInterval
	partPool        = 8                     // pool size of a process running all partCount partitions
	partDonePoll    = 2 * time.Millisecond  // how often the drain's end is looked for
	consumeDrain    = "drain"               // the -consume side of partitionChild
)

// partitionRows measures partitioned consumers (consumer.Consumer.
// Partitions) against the same consumer unpartitioned, side by side, as
// ratios:
//
//   - the drain of a partSlowBacklog-event backlog, each event of a stream
//     of its own, by a handler waiting partHandlerWait per event: 4 and 8
//     consumer processes (this binary again, -consume drain) sharing a
//     consumer of partCount partitions, against one process with the
//     consumer unpartitioned;
//   - the drain of a partNoopBacklog-event backlog by a no-op handler:
//     partCount partitions in one process (this one) against the
//     unpartitioned consumer in one process;
//   - commit-to-handler p50 and p99 at paceRate appends/s with the
//     consumer in a second process, partitioned and not.
//
// A drain starts the consumer's processes with the shards at the head of
// the log (StartFrom FromNow), waits until every process is a member and
// has taken its partitions, resets the consumer to 0 (Ops.Reset: the
// backlog is offered to all partitions at once, as after a reset in
// production), wakes the processes with a notification and takes the time
// until every shard's cursor is at the last event. The processes report how
// many events their handlers saw; fewer than the backlog is an error.
func (b *bench) partitionRows(ctx context.Context) ([]row, error) {
	var rows []row
	for _, group := range []func(context.Context) ([]row, error){b.partSlowRows, b.partNoopRows, b.partLatencyRows} {
		rs, err := group(ctx)
		rows = append(rows, rs...)
		if err != nil {
			return rows, err
		}
	}
	return rows, nil
}

// partConfig is the dispatcher configuration of a drain's process: short
// polls and beats, so that the members and their partitions settle quickly.
func partConfig(instance string) consumer.Config {
	return consumer.Config{InstanceID: instance, PollInterval: partPoll, Heartbeat: time.Second, StaleAfter: 3 * time.Second}
}

// partConsumer is a drain's consumer: starting at the head of the log, its
// handler waits wait per event (none when 0) and counts it in handled.
func partConsumer(name string, partitions int, wait time.Duration, handled *atomic.Int64) consumer.Consumer {
	return consumer.Consumer{
		Name:       name,
		StartFrom:  feature.FromNow,
		BatchSize:  passBatch,
		Partitions: partitions,
		Handle: func(context.Context, pgx.Tx, eventstore.Event) error {
			if wait > 0 {
				time.Sleep(wait)
			}
			handled.Add(1)
			return nil
		},
	}
}

// partitionChild is a drain's consumer process (-consume drain): it starts
// cfg.consumeName with cfg.consumePartitions partitions as instance
// cfg.consumeInstance, writes childReady, and when its stdin is closed
// stops and writes "handled <n>": the events its handler saw.
func partitionChild(ctx context.Context, store *eventstore.Store, cfg config) error {
	var handled atomic.Int64
	d, err := consumer.New(store, partConfig(cfg.consumeInstance), partConsumer(cfg.consumeName, cfg.consumePartitions, cfg.consumeSleep, &handled))
	if err != nil {
		return err
	}
	if err := d.Start(ctx); err != nil {
		return err
	}
	fmt.Println(childReady)
	_, _ = io.Copy(io.Discard, os.Stdin) // until the parent closes it
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	err = d.Stop(sctx)
	fmt.Printf("handled %d\n", handled.Load())
	return err
}

// partSide is one side of a drain: start runs the consumer name in procs
// processes; stop ends them and returns the events their handlers saw.
type partSide struct {
	label string
	procs int
	start func(ctx context.Context, name string) (stop func() (handled int64, err error), err error)
}

// childDrainSide runs the consumer in procs processes of this binary
// (-consume drain), partitions partitions, a handler waiting wait. Each
// process's pool has room for a pass of each of its partitions at once and
// for its rebalance, and one more (the listener and the beat have
// connections of their own): 8 processes with pools of partPool would take
// most of a default server's 100 connections.
func (b *bench) childDrainSide(label, schema string, procs, partitions int, wait time.Duration) partSide {
	pool := (max(partitions, 1)+procs-1)/procs + 2
	return partSide{label: label, procs: procs, start: func(ctx context.Context, name string) (func() (int64, error), error) {
		type child struct {
			cmd   *exec.Cmd
			stdin io.WriteCloser
			out   *bufio.Scanner
		}
		var children []child
		stopAll := func() (int64, error) {
			var (
				total int64
				errs  []error
			)
			for _, c := range children {
				errs = append(errs, c.stdin.Close())
			}
			for i, c := range children {
				for c.out.Scan() { // its last line; "ready" before it when stopped while starting
					if c.out.Text() == childReady {
						continue
					}
					n, err := strconv.ParseInt(strings.TrimPrefix(c.out.Text(), "handled "), 10, 64)
					if err != nil {
						errs = append(errs, fmt.Errorf("consumer process %d: %q: %w", i, c.out.Text(), err))
					}
					total += n
				}
				errs = append(errs, c.out.Err(), c.cmd.Wait())
			}
			return total, errors.Join(errs...)
		}
		for i := range procs {
			cmd, err := b.childCommand(ctx, consumeDrain, schema, name,
				"-consume-instance", fmt.Sprintf("%s-p%d", name, i), "-consume-partitions", strconv.Itoa(partitions),
				"-consume-pool", strconv.Itoa(pool), "-consume-sleep", wait.String())
			if err != nil {
				_, serr := stopAll()
				return nil, errors.Join(err, serr)
			}
			cmd.Stderr = os.Stderr
			stdin, err := cmd.StdinPipe()
			if err != nil {
				_, serr := stopAll()
				return nil, errors.Join(err, serr)
			}
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				_, serr := stopAll()
				return nil, errors.Join(err, serr)
			}
			if err := cmd.Start(); err != nil {
				_, serr := stopAll()
				return nil, errors.Join(err, serr)
			}
			children = append(children, child{cmd: cmd, stdin: stdin, out: bufio.NewScanner(stdout)})
		}
		// All started at once; each says when its consumer runs.
		for i, c := range children {
			if !c.out.Scan() || c.out.Text() != childReady {
				text := c.out.Text()
				_, serr := stopAll()
				return nil, errors.Join(fmt.Errorf("consumer process %d did not start: %q", i, text), serr)
			}
		}
		return stopAll, nil
	}}
}

// localDrainSide runs the consumer in this process, on store, partitions
// partitions, a no-op handler.
func localDrainSide(label string, store *eventstore.Store, partitions int) partSide {
	return partSide{label: label, procs: 1, start: func(ctx context.Context, name string) (func() (int64, error), error) {
		var handled atomic.Int64
		d, err := consumer.New(store, partConfig(name), partConsumer(name, partitions, 0, &handled))
		if err != nil {
			return nil, err
		}
		if err := d.Start(ctx); err != nil {
			return nil, err
		}
		return func() (int64, error) {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			err := d.Stop(sctx)
			return handled.Load(), err
		}, nil
	}}
}

// partDrain runs one drain of side (see partitionRows) of the n-event
// backlog ending at last in store's schema, as consumer name, and returns
// the events per second and, with -cpu, the CPU it took.
func (b *bench) partDrain(ctx context.Context, store *eventstore.Store, side partSide, name string, last int64, n int) (measured, cpuUse, error) {
	consumers := pgx.Identifier{store.Schema(), "kumiko_event_consumers"}.Sanitize()
	members := pgx.Identifier{store.Schema(), "kumiko_consumer_members"}.Sanitize()
	stop, err := side.start(ctx, name)
	if err != nil {
		return measured{}, cpuUse{}, fmt.Errorf("%s: %w", side.label, err)
	}
	fail := func(err error) (measured, cpuUse, error) {
		_, serr := stop()
		return measured{}, cpuUse{}, fmt.Errorf("%s: %w", side.label, errors.Join(err, serr))
	}
	// Every process a member, and every process has looked at the members
	// since (a rebalance every PollInterval): each passes its partitions
	// only.
	deadline := time.Now().Add(10 * time.Second)
	for {
		var got int
		if err := b.pool.QueryRow(ctx, `SELECT count(*) FROM `+members+` WHERE name = $1`, name).Scan(&got); err != nil {
			return fail(err)
		}
		if got == side.procs {
			break
		}
		if time.Now().After(deadline) {
			return fail(fmt.Errorf("%d of %d processes members after 10s", got, side.procs))
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(4 * partPoll)

	if _, err := consumer.NewOps(store).Reset(ctx, name, consumer.ResetOptions{To: 0, Actor: "bench"}); err != nil {
		return fail(err)
	}
	var before cpuUse
	if b.cfg.cpu {
		before = cpuNow()
	}
	start := time.Now()
	if _, err := b.pool.Exec(ctx, `SELECT pg_notify($1, $2)`, store.NotifyChannel(), strconv.FormatInt(last, 10)); err != nil {
		return fail(err)
	}
	timeout := time.Minute + time.Duration(n)*2*partHandlerWait
	for {
		var low int64
		if err := b.pool.QueryRow(ctx, `SELECT COALESCE(min(last_processed_event_id), 0) FROM `+consumers+` WHERE name = $1`, name).Scan(&low); err != nil {
			return fail(err)
		}
		if low >= last {
			break
		}
		if time.Since(start) > timeout {
			return fail(fmt.Errorf("the lowest cursor at %d of %d after %s", low, last, timeout))
		}
		select {
		case <-ctx.Done():
			return fail(ctx.Err())
		case <-time.After(partDonePoll):
		}
	}
	m := measured{units: int64(n), elapsed: time.Since(start)}
	var cpu cpuUse
	if b.cfg.cpu {
		cpu = cpuNow().sub(before)
	}
	handled, err := stop()
	if err == nil && handled < int64(n) {
		err = fmt.Errorf("the handlers saw %d events, want %d", handled, n)
	}
	if err != nil {
		return measured{}, cpuUse{}, fmt.Errorf("%s: %w", side.label, err)
	}
	return m, cpu, nil
}

// partDrains drains with every side once per round, in an order that
// rotates with the round, after an unmeasured round when warm is set, and
// returns each side's total.
func (b *bench) partDrains(ctx context.Context, store *eventstore.Store, sides []partSide, prefix string, last int64, n int, warm bool) ([]measured, []cpuUse, error) {
	total := make([]measured, len(sides))
	cpu := make([]cpuUse, len(sides))
	first := 0
	if warm {
		first = -1
	}
	for round := first; round < b.cfg.rounds; round++ {
		for i := range sides {
			side := (i + max(round, 0)) % len(sides)
			name := fmt.Sprintf("%s-%d-%d", prefix, round+1, side)
			m, c, err := b.partDrain(ctx, store, sides[side], name, last, n)
			if err != nil {
				return nil, nil, err
			}
			fmt.Fprintf(os.Stderr, "    %s: %s events/s\n", sides[side].label, formatValue(m.rate(), ""))
			if round < 0 {
				continue
			}
			total[side].units += m.units
			total[side].elapsed += m.elapsed
			cpu[side] = cpu[side].add(c)
		}
	}
	return total, cpu, nil
}

// atLeastTimesRaw is the goal "framework ≥ k times raw".
func atLeastTimesRaw(k float64) goal {
	return goal{text: fmt.Sprintf("≥ %gx raw", k), met: func(fw, raw float64) bool { return fw >= k*raw }}
}

// partSlowRows: the drain with a handler waiting partHandlerWait per event,
// partCount partitions in 4 and in 8 processes against the unpartitioned
// consumer in one.
func (b *bench) partSlowRows(ctx context.Context) ([]row, error) {
	n := b.n.partSlow
	schema := b.store.Schema() + "_parts"
	fmt.Fprintf(os.Stderr, "  seeding %s events into schema %s …\n", formatValue(float64(n), ""), schema)
	store, err := b.migratedStore(ctx, schema)
	if err != nil {
		return nil, err
	}
	defer dropSchemas(b.pool, store, schema)
	last, err := b.seedBacklog(ctx, schema, n)
	if err != nil {
		return nil, err
	}
	name := fmt.Sprintf("partitioned drain, %s handler, %s events", partHandlerWait, formatValue(float64(n), ""))
	fmt.Fprintf(os.Stderr, "  %s …\n", name)
	sides := []partSide{
		b.childDrainSide(fmt.Sprintf("4 processes × %d partitions", partCount), schema, 4, partCount, partHandlerWait),
		b.childDrainSide("1 process, unpartitioned", schema, 1, 0, partHandlerWait),
		b.childDrainSide(fmt.Sprintf("8 processes × %d partitions", partCount), schema, 8, partCount, partHandlerWait),
	}
	total, _, err := b.partDrains(ctx, store, sides, "bench-parts", last, n, false)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	base := total[1].rate()
	return []row{
		{name: name + ": " + sides[0].label + " (raw: " + sides[1].label + ")", unit: "events/s", fw: total[0].rate(), raw: base, goal: atLeastTimesRaw(3)},
		{name: name + ": " + sides[2].label + " (raw: " + sides[1].label + ")", unit: "events/s", fw: total[2].rate(), raw: base, goal: atLeastTimesRaw(6)},
	}, nil
}

// partNoopRows: the drain with a no-op handler, partCount partitions
// against the unpartitioned consumer, each in this process on a pool of
// partPool connections.
func (b *bench) partNoopRows(ctx context.Context) ([]row, error) {
	n := b.n.partNoop
	schema := b.store.Schema() + "_partn"
	fmt.Fprintf(os.Stderr, "  seeding %s events into schema %s …\n", formatValue(float64(n), ""), schema)
	setup, err := b.migratedStore(ctx, schema)
	if err != nil {
		return nil, err
	}
	defer dropSchemas(b.pool, setup, schema)
	last, err := b.seedBacklog(ctx, schema, n)
	if err != nil {
		return nil, err
	}
	pcfg := b.pool.Config().Copy()
	pcfg.MaxConns, pcfg.MinConns = partPool, 2
	pcfg.AfterConnect = pguuid.AfterConnect
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	store, err := eventstore.New(pool, eventstore.Config{Schema: schema})
	if err != nil {
		return nil, err
	}
	defer store.Close()

	name := fmt.Sprintf("partitioned drain, no-op handler, %s events, 1 process", formatValue(float64(n), ""))
	fmt.Fprintf(os.Stderr, "  %s …\n", name)
	sides := []partSide{
		localDrainSide(fmt.Sprintf("%d partitions", partCount), store, partCount),
		localDrainSide("unpartitioned", store, 0),
	}
	total, cpu, err := b.partDrains(ctx, store, sides, "bench-partn", last, n, b.cfg.warmup > 0)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	r := row{name: name + ": " + sides[0].label + " (raw: " + sides[1].label + ")", unit: "events/s",
		fw: total[0].rate(), raw: total[1].rate(), goal: atLeastOfRaw(0.70)}
	if b.cfg.cpu {
		r.cpu = &[2]cpuUse{cpu[0].perUnit(total[0].units), cpu[1].perUnit(total[1].units)}
	}
	return []row{r}, nil
}

// partLatencyRows: commit-to-handler latency at paceRate appends/s of one
// event each, to streams of their own, with the no-op consumer in a second
// process (as the dispatcher group's first mode), partitioned into
// partCount and unpartitioned; both processes have pools of partPool.
func (b *bench) partLatencyRows(ctx context.Context) ([]row, error) {
	schema := b.store.Schema() + "_partl"
	store, err := b.migratedStore(ctx, schema)
	if err != nil {
		return nil, err
	}
	defer dropSchemas(b.pool, store, schema)
	wstore, closeWriter, err := b.writerStore(ctx, schema)
	if err != nil {
		return nil, err
	}
	defer closeWriter()

	pool := strconv.Itoa(partPool)
	sides := [2]latencySide{
		b.childSide(schema, consumeDispatcher, "-consume-partitions", strconv.Itoa(partCount), "-consume-pool", pool),
		b.childSide(schema, consumeDispatcher, "-consume-pool", pool),
	}
	labels := [2]string{fmt.Sprintf("%d partitions", partCount), "unpartitioned"}
	title := fmt.Sprintf("partitioned commit→handler, other process, %d appends/s", paceRate)
	fmt.Fprintf(os.Stderr, "  %s …\n", title)
	lat := [2]*latencies{newLatencies(1), newLatencies(1)}
	// The shard-row writes of each side per appended event: the updates of
	// the consumers' table, read once the consuming process's sessions have
	// ended (a session reports its counts by then at the latest).
	var writes, appended [2]int64
	updates := func() (int64, error) {
		deadline := time.Now().Add(10 * time.Second)
		for {
			var sessions int
			if err := b.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, consumeApplication).Scan(&sessions); err != nil {
				return 0, err
			}
			if sessions == 0 {
				break
			}
			if time.Now().After(deadline) {
				return 0, fmt.Errorf("%d sessions of the consuming process after 10s", sessions)
			}
			time.Sleep(10 * time.Millisecond)
		}
		time.Sleep(50 * time.Millisecond)
		var n int64
		err := b.pool.QueryRow(ctx, `SELECT COALESCE(sum(n_tup_upd), 0) FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = 'kumiko_event_consumers'`, schema).Scan(&n)
		return n, err
	}
	phase := 0
	run := func(side int, d time.Duration, into *latencies) error {
		phase++
		before, err := updates()
		if err != nil {
			return err
		}
		seen := 0
		if into != nil {
			seen = len(into.workers[0])
		}
		if err := b.pacedPhase(ctx, wstore, sides[side], fmt.Sprintf("bench-partl-%d", phase), store.NotifyChannel(), d, into); err != nil {
			return err
		}
		after, err := updates()
		if err != nil || into == nil {
			return err
		}
		writes[side] += after - before
		appended[side] += int64(len(into.workers[0]) - seen)
		return nil
	}
	if b.cfg.warmup > 0 {
		for side := range 2 {
			if err := run(side, b.cfg.warmup, nil); err != nil {
				return nil, fmt.Errorf("%s: warm-up: %w", title, err)
			}
		}
	}
	// Twice the duration per side: p99 wants samples.
	slice := 2 * b.cfg.duration / time.Duration(b.cfg.rounds)
	for round := range b.cfg.rounds {
		for i := range 2 {
			side := (i + round) % 2
			if err := run(side, slice, lat[side]); err != nil {
				return nil, fmt.Errorf("%s, %s: %w", title, labels[side], err)
			}
		}
	}
	atMost := goal{text: "≤ 1.2x raw", met: func(fw, raw float64) bool { return fw <= 1.2*raw }}
	var rows []row
	for _, q := range []float64{0.50, 0.99} {
		r := row{
			name: fmt.Sprintf("partitioned commit→handler p%.0f, other process, %d appends/s: %s (raw: %s)", q*100, paceRate, labels[0], labels[1]),
			unit: "µs",
			fw:   micros(lat[0].quantile(q)),
			raw:  micros(lat[1].quantile(q)),
		}
		if q == 0.99 {
			r.goal = atMost
		}
		rows = append(rows, r)
	}
	perEvent := func(side int) float64 { return float64(writes[side]) / float64(max(appended[side], 1)) }
	rows = append(rows, row{name: "  shard-row writes per appended event", unit: "x", fw: perEvent(0), raw: perEvent(1)})
	return rows, nil
}

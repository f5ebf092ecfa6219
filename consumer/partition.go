package consumer

import (
	"context"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/feature"
)

// MaxPartitions is the most partitions a consumer may have.
const MaxPartitions = 256

// partitionPrefix begins the instance id of a partition's shard row.
const partitionPrefix = "__partition_"

// PartitionInstance is the instance id of the shard row of partition k:
// "__partition_<k>__". Instance ids beginning with "__" are the
// dispatcher's own; no process may take one.
func PartitionInstance(k int) string { return partitionPrefix + strconv.Itoa(k) + "__" }

// PartitionOf is the partition, of n, that the events of the stream key
// belong to: the 32-bit FNV-1a hash of key modulo n. It is stable across
// processes, versions and restarts; 0 when n ≤ 1.
func PartitionOf(key string, n int) int {
	if n <= 1 {
		return 0
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return int(h.Sum32() % uint32(n))
}

// sharesOf is the shards of a shared consumer this process passes: the
// shared shard while the consumer is not partitioned (every process
// competes for it), else the partitions assigned to it — partition k goes to
// the k-th live member modulo their number, in instance id order, so the
// live processes share them evenly, and a process that joins, stops or goes
// stale changes the assignment at every member's next look. Two processes
// that disagree for a moment (one has looked, the other not yet) never
// apply a partition at once: a pass holds its shard's row locked.
func sharesOf(self string, partitions int, members []string) []string {
	if partitions <= 0 {
		return []string{SharedInstance}
	}
	if !slices.Contains(members, self) {
		members = append(slices.Clone(members), self)
		slices.Sort(members)
	}
	var out []string
	for k := range partitions {
		if members[k%len(members)] == self {
			out = append(out, PartitionInstance(k))
		}
	}
	return out
}

// ownerOf is the member a partition is assigned to ("" when none is live).
func ownerOf(k int, members []string) string {
	if len(members) == 0 {
		return ""
	}
	return members[k%len(members)]
}

// membership is what the members' query answers for one shared consumer:
// its stored partition count (0: not partitioned) and its live members in
// instance id order.
type membership struct {
	partitions int
	members    []string
}

// memberships reads, for the consumers names, their stored partition count
// and their live members.
func memberships(ctx context.Context, q rowsQuerier, sql string, names []string) (map[string]membership, error) {
	rows, err := q.Query(ctx, sql, names)
	if err != nil {
		return nil, eventstore.TranslateError(fmt.Errorf("consumer members: %w", err))
	}
	out := map[string]membership{}
	var (
		name string
		m    membership
	)
	_, err = pgx.ForEachRow(rows, []any{&name, &m.partitions, &m.members}, func() error {
		out[name] = membership{partitions: m.partitions, members: slices.Clone(m.members)}
		return nil
	})
	if err != nil {
		return nil, eventstore.TranslateError(fmt.Errorf("consumer members: %w", err))
	}
	return out, nil
}

// rowsQuerier runs a query: a pool, a connection or a transaction.
type rowsQuerier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// shardLoop is one running pass loop of a shared consumer's shard.
type shardLoop struct {
	cancel context.CancelFunc
	w      *waker
	part   *partLoop // its place in the router, for a partition
}

// balancer keeps, for the shared consumers of a dispatcher, one pass loop
// per shard this process is to pass (see sharesOf), starting and stopping
// loops as the assignment changes.
type balancer struct {
	mu    sync.Mutex
	loops map[string]map[string]*shardLoop // by consumer, by shard instance
	warn  map[string]bool                  // declared and stored partition counts differ, warned
	// stored is each shared consumer's stored partition count, as last read.
	stored map[string]int
}

// sharedNames are the names of the dispatcher's shared consumers.
func (e *Dispatcher) sharedNames() []string {
	var out []string
	for _, c := range e.consumers {
		if c.Delivery != feature.PerInstance {
			out = append(out, c.Name)
		}
	}
	return out
}

// rebalance reads the shared consumers' memberships and sets the loops of
// this process to the shards assigned to it. It runs at start and then every
// PollInterval.
func (e *Dispatcher) rebalance(ctx, runCtx, passCtx context.Context) error {
	names := e.sharedNames()
	if len(names) == 0 {
		return nil
	}
	ms, err := memberships(ctx, e.pool, e.sql.members, names)
	if err != nil {
		return err
	}
	e.bal.mu.Lock()
	defer e.bal.mu.Unlock()
	for _, c := range e.consumers {
		if c.Delivery == feature.PerInstance {
			continue
		}
		m := ms[c.Name]
		e.bal.stored[c.Name] = m.partitions
		declared := max(c.Partitions, 1)
		if stored := max(m.partitions, 1); stored != declared && !e.bal.warn[c.Name] {
			e.bal.warn[c.Name] = true
			e.cfg.Logger.Warn("event dispatcher: the consumer's stored partition count differs from its declaration; "+
				"the stored one holds until `consumer repartition` changes it",
				"consumer", c.Name, "declared", declared, "stored", stored)
		}
		want := sharesOf(e.cfg.InstanceID, m.partitions, m.members)
		have := e.bal.loops[c.Name]
		if have == nil {
			have = map[string]*shardLoop{}
			e.bal.loops[c.Name] = have
		}
		for shard, l := range have {
			if !slices.Contains(want, shard) {
				l.cancel()
				e.dropLoop(c, l)
				e.metrics.forget(c.Name, shard)
				delete(have, shard)
			}
		}
		for _, shard := range want {
			if have[shard] == nil && runCtx.Err() == nil {
				have[shard] = e.startLoop(runCtx, passCtx, c, shard)
			}
		}
	}
	return nil
}

// startLoop starts a pass loop of c's shard instance until runCtx ends or
// the loop is cancelled. A partition's loop is woken by its consumer's
// router, any other by every commit.
func (e *Dispatcher) startLoop(runCtx, passCtx context.Context, c Consumer, instance string) *shardLoop {
	ctx, cancel := context.WithCancel(runCtx)
	l := &shardLoop{cancel: cancel, w: &waker{ch: make(chan struct{}, 1)}}
	if k, ok := partitionIndex(instance); ok {
		l.part = e.join(runCtx, passCtx, c, k, l.w)
	} else {
		e.mu.Lock()
		e.wakers = append(e.wakers, l.w)
		e.mu.Unlock()
	}
	// A new loop looks at once, without a wake-up: it is given none to
	// begin with. One would only make it pass again straight after its
	// first pass, for no commit (the commits meanwhile wake it themselves)
	// — and a partition's second pass would run outside the router's
	// judgement, moving its cursor over the next commit's events of other
	// partitions as if that commit had woken it.
	e.wg.Add(1)
	go func() { defer e.wg.Done(); e.loop(ctx, passCtx, c, instance, l.w, l.part) }()
	return l
}

// dropLoop takes the cancelled loop l of c out of what commits wake.
func (e *Dispatcher) dropLoop(c Consumer, l *shardLoop) {
	if l.part != nil {
		e.part(c, l.part)
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.wakers = slices.DeleteFunc(e.wakers, func(x *waker) bool { return x == l.w })
}

// balanceLoop rebalances every PollInterval until ctx ends.
func (e *Dispatcher) balanceLoop(ctx, passCtx context.Context) {
	for {
		if !sleep(ctx, e.cfg.PollInterval) {
			return
		}
		if err := e.rebalance(ctx, ctx, passCtx); err != nil && ctx.Err() == nil {
			e.cfg.Logger.Warn("event dispatcher: reading the consumers' members failed", "err", err)
		}
	}
}

// sleep waits d or until ctx ends; false when ctx ended.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// isPartition reports whether instance is a partition's shard.
func isPartition(instance string) bool { return strings.HasPrefix(instance, partitionPrefix) }

// partitionIndex is the partition of a partition's shard instance id.
func partitionIndex(instance string) (int, bool) {
	rest, ok := strings.CutPrefix(instance, partitionPrefix)
	if !ok {
		return 0, false
	}
	k, err := strconv.Atoi(strings.TrimSuffix(rest, "__"))
	return k, err == nil
}

// prefetch hands found the window after cursor that the partitions of c
// (of n) share in this process: one kept, one read in flight, or one it
// reads now in a short transaction of its own, by the rules of a pass's
// read (with no gap recorded: a gap ends the window) — before that
// transaction's COMMIT, which changes nothing read. Only a read begun since
// since — the commits this wake-up announced are in it — counts. ok is
// false when nothing after cursor is known complete.
func (e *Dispatcher) prefetch(ctx context.Context, c Consumer, cursor int64, n int, since time.Time, found func(w window, ok bool)) {
	r := e.reads[c.Name]
	if w, ok := r.peek(cursor, since); ok {
		found(w, true)
		return
	}
	// The connection first: passes that wait for this read hold theirs.
	conn, err := e.pool.Acquire(ctx)
	if err != nil {
		found(window{}, false)
		return
	}
	defer conn.Release()
	w, ok, publish := r.get(cursor, since)
	if ok {
		found(w, true)
		return
	}
	done := false
	_ = eventstore.RunTxOn(ctx, conn.Conn(), func(tx *eventstore.Tx) error {
		sh := &shard{cursor: cursor, partitions: n}
		limit := sh.limit(c)
		h, settled, evs, err := e.read(ctx, tx, sh, limit)
		if err != nil {
			return err
		}
		w := completeWindow(sh, evs, h, settled, limit).partitioned(c, n)
		publish(w, w.to > w.from)
		done = true
		found(w, w.to > w.from)
		return nil
	})
	if !done {
		publish(window{}, false)
		found(window{}, false)
	}
}

package projection

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/internal/author"
	"github.com/kumiko-go/kumiko/kumikotype"
	"github.com/kumiko-go/kumiko/registry"
)

// Projection kinds in ProjectionStatus.Kind and RebuildResult.Kind.
const (
	ProjectionInline = "inline"
	ProjectionMSP    = "msp"
)

// Projection statuses of kumiko_projections.
const (
	ProjectionReady      = "ready"
	ProjectionRebuilding = "rebuilding"
	ProjectionFailed     = "failed"
)

// ErrRebuildRunning is returned when the projection is already being
// rebuilt (by this or another process).
var ErrRebuildRunning = errors.New("the projection is already being rebuilt")

// ErrNoProjection is returned for a name that is neither an inline
// projection nor a multi-stream projection with a table.
var ErrNoProjection = errors.New("no rebuildable projection")

// RebuildOptions tunes RebuildProjection.
type RebuildOptions struct {
	// Progress, when set, is called after every committed batch with the
	// events applied so far and the events to apply in total; total grows
	// while writers keep appending.
	Progress func(done, total int64)
	// Quarantine skips events whose apply fails, recording them in
	// kumiko_projection_quarantine, instead of failing the rebuild.
	Quarantine bool
	// BatchSize is the most events read and applied per transaction;
	// default 2000.
	BatchSize int
}

// RebuildResult describes a finished rebuild.
type RebuildResult struct {
	Name string
	Kind string
	// Applied counts the events applied to the rebuilt table.
	Applied int64
	// Quarantined counts the events skipped in quarantine mode.
	Quarantined int64
	// LastEventID is the highest event id the rebuilt table was built from;
	// for a multi-stream projection its consumer continues after it.
	LastEventID int64
	Duration    time.Duration
}

// ProjectionStatus is the state of one rebuildable projection.
type ProjectionStatus struct {
	Name string `json:"name"`
	// Kind is "inline" or "msp".
	Kind string `json:"kind"`
	// Status is "ready", "rebuilding" or "failed".
	Status string `json:"status"`
	// Cursor is the highest event id the projection has processed: the head
	// for a ready inline projection (it is written with every event), a
	// running rebuild's progress, or the consumer's cursor (the lowest of
	// its shards) for a multi-stream projection.
	Cursor int64 `json:"cursor"`
	// Head is the highest id of an event the projection applies.
	Head int64 `json:"head"`
	// Lag counts the events the projection applies after Cursor.
	Lag int64 `json:"lag"`
	// LagSeconds is the age of the oldest of those events; 0 when Lag is.
	LagSeconds    float64    `json:"lagSeconds"`
	LastRebuildAt *time.Time `json:"lastRebuildAt,omitempty"`
	LastError     string     `json:"lastError,omitempty"`
}

const (
	defaultRebuildBatch = 2000
	// rebuildRounds bounds the unlocked catch-up rounds before the swap.
	rebuildRounds = 5
	// swapAttempts and swapLockTimeout bound how long the swap waits for
	// its locks: a queued ACCESS EXCLUSIVE request holds up every later
	// reader of the table, so it gives up and tries again instead of
	// waiting behind a long transaction.
	swapAttempts    = 10
	swapLockTimeout = "2s"
	settlePoll      = 5 * time.Millisecond
	// failTimeout bounds the cleanup of a failed rebuild, which runs after
	// the caller's context may have ended.
	failTimeout = 30 * time.Second
)

// rebuildTarget is what a rebuild needs to know of a projection.
type rebuildTarget struct {
	name  string
	kind  string
	table feature.TableDef
	// source and types select the events the projection applies.
	source string
	types  []string
	msp    *registry.MSP
	proj   *registry.Projection
}

func (s *Side) rebuildTarget(name string) (rebuildTarget, error) {
	if p, ok := s.reg.Projection(name); ok {
		var types []string
		for _, typ := range p.Events() {
			if _, ok := p.Apply(typ); ok {
				types = append(types, typ)
			}
		}
		return rebuildTarget{name: name, kind: ProjectionInline, table: p.Table(), source: p.Source(), types: types, proj: p}, nil
	}
	if m, ok := s.reg.MSP(name); ok {
		if t, ok := m.Table(); ok {
			var types []string
			for _, typ := range m.Events() {
				if _, ok := m.Apply(typ); ok {
					types = append(types, typ)
				}
			}
			return rebuildTarget{name: name, kind: ProjectionMSP, table: t, types: types, msp: m}, nil
		}
	}
	return rebuildTarget{}, fmt.Errorf("%w %q", ErrNoProjection, name)
}

func (t rebuildTarget) wants(ev eventstore.Event) bool {
	if t.kind == ProjectionInline && ev.AggregateType != t.source {
		return false
	}
	for _, typ := range t.types {
		if typ == ev.Type {
			return true
		}
	}
	return false
}

// filter selects the target's events: an inline projection's event types
// of its source aggregate type, a multi-stream projection's event types.
func (t rebuildTarget) filter() eventstore.ReadFilter {
	if t.kind == ProjectionInline {
		return eventstore.ReadFilter{AggregateTypes: []string{t.source}, Types: t.types}
	}
	return eventstore.ReadFilter{Types: t.types}
}

// rebuild is one running RebuildProjection.
type rebuild struct {
	s      *Side
	conn   *pgx.Conn
	t      rebuildTarget
	opts   RebuildOptions
	live   string // qualified live table
	shadow string // unqualified shadow table name
	res    RebuildResult
	alone  bool // the pool has no connection besides conn: reads run on conn
	total  int64
	cursor int64 // every event ≤ cursor is in the shadow table
}

// RebuildProjection rebuilds an inline projection or a table-backed
// multi-stream projection from the events, with no downtime: it replays
// every event the projection applies, in id order, into a shadow table
// built from the same definition, while writes keep going to the live table
// and reads keep reading it; then, in one short transaction, it applies the
// events committed since and swaps the shadow in. A searchable table's
// search columns and indexes are made over the shadow once its replay is
// done and take the live names in the swap. On failure the shadow is
// dropped, the live table is untouched and the status is "failed". See the
// "Rebuilds" section of docs/dispatcher.md for why no event is lost or
// applied twice.
func (s *Side) RebuildProjection(ctx context.Context, name string, opts RebuildOptions) (RebuildResult, error) {
	t, err := s.rebuildTarget(name)
	if err != nil {
		return RebuildResult{}, err
	}
	if opts.BatchSize <= 0 {
		opts.BatchSize = defaultRebuildBatch
	}
	shadow := t.table.Name + "__rebuild"
	if len(shadow) > 63 {
		return RebuildResult{}, fmt.Errorf("rebuild %s: table name %q is too long for a shadow table", name, t.table.Name)
	}
	pc, err := s.pool.Acquire(ctx)
	if err != nil {
		return RebuildResult{}, err
	}
	defer pc.Release()
	key := "kumiko.rebuild." + s.schema + "." + name
	var locked bool
	if err := pc.QueryRow(ctx, `SELECT pg_try_advisory_lock(hashtextextended($1, 0))`, key).Scan(&locked); err != nil {
		return RebuildResult{}, err
	}
	if !locked {
		return RebuildResult{}, fmt.Errorf("rebuild %s: %w", name, ErrRebuildRunning)
	}
	defer func() {
		// On a broken connection the session, and with it the lock, is gone.
		_, _ = pc.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock(hashtextextended($1, 0))`, key)
	}()
	r := &rebuild{s: s, conn: pc.Conn(), t: t, opts: opts, live: s.qualify(t.table.Name), shadow: shadow,
		res: RebuildResult{Name: name, Kind: t.kind}, alone: s.pool.Config().MaxConns < 2}
	start := time.Now()
	if err := r.run(ctx); err != nil {
		r.fail(ctx, err)
		return RebuildResult{}, fmt.Errorf("rebuild %s: %w", name, err)
	}
	r.res.Duration = time.Since(start)
	s.rebuilds.WithLabelValues(name).Observe(r.res.Duration.Seconds())
	return r.res, nil
}

func (r *rebuild) run(ctx context.Context) error {
	s := r.s
	// (1) status, (2) a fresh shadow table.
	err := pgx.BeginFunc(ctx, r.conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, s.sql.markRebuilding, r.t.name); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, s.sql.clearQuarantine, r.t.name); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DROP TABLE IF EXISTS `+s.qualify(r.shadow)); err != nil {
			return err
		}
		def := r.t.table
		def.Name = r.shadow
		for _, stmt := range s.tableDDL(def) {
			if _, err := tx.Exec(ctx, stmt); err != nil {
				return fmt.Errorf("shadow table: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	// (3) replay up to a settled horizon, in rounds, until little is left
	// for the locked swap.
	for round := 0; round < rebuildRounds; round++ {
		var (
			h eventstore.Horizon
			n int64
		)
		err := pgx.BeginFunc(ctx, r.conn, func(tx pgx.Tx) error {
			var err error
			if h, err = r.settled(ctx, tx); err != nil {
				return err
			}
			n, err = r.s.store.CountTx(ctx, tx, r.t.filter(), r.cursor, h.LastID)
			return err
		})
		if err != nil {
			return err
		}
		if h.LastID <= r.cursor {
			break
		}
		r.total += n
		if err := r.replay(ctx, h.LastID); err != nil {
			return err
		}
		if n <= int64(r.opts.BatchSize) {
			break
		}
	}
	// (4) the search columns and indexes of a searchable table: computed
	// over the replayed rows at once, which is faster than row by row.
	if ts := s.tables[r.t.name]; ts != nil {
		err := pgx.BeginFunc(ctx, r.conn, func(tx pgx.Tx) error {
			return s.ensureSearchOf(ctx, tx, r.t.name, s.qualify(r.shadow), ts.config, ts.fieldsOf(r.shadow))
		})
		if err != nil {
			return fmt.Errorf("shadow table: %w", err)
		}
	}
	// (5) final catch-up and swap.
	var lastErr error
	for range swapAttempts {
		err := pgx.BeginFunc(ctx, r.conn, r.swap(ctx))
		if err == nil {
			if r.opts.Progress != nil {
				r.opts.Progress(r.res.Applied+r.res.Quarantined, r.total)
			}
			return nil
		}
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || (pe.Code != "55P03" && pe.Code != "40P01") { // lock_not_available, deadlock_detected
			return err
		}
		lastErr = err
		r.total = r.res.Applied + r.res.Quarantined // the catch-up's count rolled back with it
	}
	return fmt.Errorf("swap: no lock after %d attempts: %w", swapAttempts, lastErr)
}

// settled waits until every id up to the store's horizon is settled.
func (r *rebuild) settled(ctx context.Context, tx pgx.Tx) (eventstore.Horizon, error) {
	return r.s.store.SettledTx(ctx, tx, settlePoll)
}

// replay applies the events after the cursor up to upTo (settled) to the
// shadow table, a batch per transaction, recording the progress with each.
// The next chunk is read while one applies (the events up to upTo are
// settled: every snapshot reads the same ones), so the reading and decoding
// overlap PostgreSQL's work on the chunk before.
func (r *rebuild) replay(ctx context.Context, upTo int64) error {
	var next *chunkRead
	if r.cursor < upTo {
		next = r.readAhead(ctx, r.cursor, upTo)
	}
	defer func() { _, _ = next.wait() }()
	for r.cursor < upTo {
		evs, err := next.wait()
		if err != nil {
			return err
		}
		end := r.chunkEnd(evs, upTo)
		next = nil
		if end < upTo {
			next = r.readAhead(ctx, end, upTo)
		}
		applied, quarantined := r.res.Applied, r.res.Quarantined
		err = r.replayChunk(ctx, evs, end, r.batches())
		if err != nil && r.batches() && ctx.Err() == nil {
			// A batched chunk failed somewhere: run it again event by event
			// to name the failing event (or quarantine it).
			r.res.Applied, r.res.Quarantined = applied, quarantined
			err = r.replayChunk(ctx, evs, end, false)
		}
		if err != nil {
			return err
		}
		if r.opts.Progress != nil {
			r.opts.Progress(r.res.Applied+r.res.Quarantined, r.total)
		}
	}
	return nil
}

// chunkRead is a chunk's events being read on a connection of the pool.
type chunkRead struct {
	done chan struct{}
	evs  []eventstore.Event
	err  error
}

// readAhead starts reading up to BatchSize events with after < id ≤ upTo
// on another connection of the pool. A pool of one connection, which the
// rebuild holds, gets the read done at once on the rebuild's own.
func (r *rebuild) readAhead(ctx context.Context, after, upTo int64) *chunkRead {
	c := &chunkRead{done: make(chan struct{})}
	read := func(tx pgx.Tx) error {
		var err error
		c.evs, err = r.s.store.ReadRangeTx(ctx, tx, after, upTo, r.opts.BatchSize)
		return err
	}
	if r.alone {
		c.err = pgx.BeginFunc(ctx, r.conn, read)
		close(c.done)
		return c
	}
	go func() {
		defer close(c.done)
		c.err = pgx.BeginTxFunc(ctx, r.s.pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, read)
	}()
	return c
}

// wait waits for the read to end (nil: nothing was started) and returns
// its events.
func (c *chunkRead) wait() ([]eventstore.Event, error) {
	if c == nil {
		return nil, nil
	}
	<-c.done
	return c.evs, c.err
}

// batches reports whether chunks are applied with their statements sent as
// one batch: for inline projections outside quarantine mode.
func (r *rebuild) batches() bool { return r.t.kind == ProjectionInline && !r.opts.Quarantine }

// replayChunk applies one chunk's events in its own transaction and moves
// the cursor to end, the id the shadow table is then complete up to.
//
// A chunk commits without waiting for its WAL flush: the shadow rows and the
// progress that covers them are one transaction, so a crash loses both or
// neither, and the rebuild resumes from the progress that survived. The
// swap that publishes the shadow table commits synchronously.
func (r *rebuild) replayChunk(ctx context.Context, evs []eventstore.Event, end int64, batched bool) error {
	return eventstore.RunTxOn(ctx, r.conn, func(tx *eventstore.Tx) error {
		tx.Enqueue(nil, sqlAsyncCommit)
		var err error
		if batched {
			err = r.applyQueued(ctx, tx, evs)
		} else {
			err = r.applyEvents(ctx, tx, evs)
		}
		if err != nil {
			return err
		}
		tx.Enqueue(nil, r.s.sql.progress, r.t.name, end)
		r.cursor = end
		return nil
	})
}

// applyBatch reads up to BatchSize events with after < id ≤ upTo in tx and
// applies them; it returns the id the shadow is complete up to.
func (r *rebuild) applyBatch(ctx context.Context, tx pgx.Tx, after, upTo int64) (int64, error) {
	evs, err := r.s.store.ReadRangeTx(ctx, tx, after, upTo, r.opts.BatchSize)
	if err != nil {
		return 0, err
	}
	if err := r.applyEvents(ctx, tx, evs); err != nil {
		return 0, err
	}
	return r.chunkEnd(evs, upTo), nil
}

// chunkEnd is the id the shadow table is complete up to once evs, a chunk
// read up to upTo, is applied: upTo when the chunk was not full.
func (r *rebuild) chunkEnd(evs []eventstore.Event, upTo int64) int64 {
	if len(evs) < r.opts.BatchSize {
		return upTo
	}
	return evs[len(evs)-1].ID
}

// applyQueued applies the target's events among evs to the shadow table in
// tx with the apply functions' Exec statements queued (Tx.Queued): they
// travel with the chunk's commit, in one round trip, which is what makes a
// replay fast; a failure then names its statement, not its event.
func (r *rebuild) applyQueued(ctx context.Context, tx *eventstore.Tx, evs []eventstore.Event) error {
	db := tx.Queued()
	for _, ev := range evs {
		if !r.t.wants(ev) {
			continue
		}
		if err := r.apply(ctx, db, tx, ev); err != nil {
			return err
		}
		r.res.Applied++
	}
	return nil
}

// applyEvents applies the target's events among evs to the shadow table in
// tx, each event's statements sent as it runs.
func (r *rebuild) applyEvents(ctx context.Context, tx pgx.Tx, evs []eventstore.Event) error {
	for _, ev := range evs {
		if !r.t.wants(ev) {
			continue
		}
		if !r.opts.Quarantine {
			if err := r.apply(ctx, tx, tx, ev); err != nil {
				return err
			}
			r.res.Applied++
			continue
		}
		err := author.Savepoint(ctx, tx, func(sp pgx.Tx) error { return r.apply(ctx, sp, sp, ev) })
		if err == nil {
			r.res.Applied++
			continue
		}
		if ctx.Err() != nil {
			return err
		}
		if _, qerr := tx.Exec(ctx, r.s.sql.quarantine,
			r.t.name, ev.ID, author.Storable(err.Error(), 2000)); qerr != nil {
			return errors.Join(err, qerr)
		}
		r.res.Quarantined++
	}
	return nil
}

// apply runs the projection's apply function for ev against the shadow; an
// inline projection writes through db, a multi-stream one works in tx. A
// panic in it fails the event like a returned error.
func (r *rebuild) apply(ctx context.Context, db feature.DB, tx pgx.Tx, ev eventstore.Event) error {
	table := r.s.qualify(r.shadow)
	appended := 0
	err := author.Run(r.s.log, func() (err error) {
		if r.t.kind == ProjectionInline {
			apply, _ := r.t.proj.Apply(ev.Type)
			return apply(&projectionContext{ctx: ctx, db: db, tenant: ev.TenantID, table: table}, ev)
		}
		appended, err = r.s.applyMSP(ctx, tx, r.t.msp, table, ev)
		return err
	}, "projection", r.t.name, "eventId", ev.ID, "eventType", ev.Type)
	if err == nil && appended > 0 {
		// A replay must not repeat side effects; the transaction (or
		// savepoint) rolls the appended events back.
		err = errors.New("its apply appends events, which a rebuild cannot repeat")
	}
	if err != nil {
		return fmt.Errorf("projection %s: event %d (%s): %w", r.t.name, ev.ID, ev.Type, err)
	}
	return nil
}

// swap is the final transaction: catch up with the events committed since
// the replay and put the shadow table in the live table's place.
func (r *rebuild) swap(ctx context.Context) func(pgx.Tx) error {
	return func(tx pgx.Tx) error {
		cursor, applied, quarantined := r.cursor, r.res.Applied, r.res.Quarantined
		ok := false
		defer func() {
			if !ok { // rolled back: so is the catch-up
				r.cursor, r.res.Applied, r.res.Quarantined = cursor, applied, quarantined
			}
		}()
		if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '`+swapLockTimeout+`'`); err != nil {
			return err
		}
		catchUp := r.catchUpInline
		if r.t.kind != ProjectionInline {
			catchUp = r.catchUpMSP
		}
		if err := catchUp(ctx, tx); err != nil {
			return err
		}
		if err := r.replace(ctx, tx); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, r.s.sql.markReady, r.t.name, r.cursor); err != nil {
			return err
		}
		r.res.LastEventID = r.cursor
		r.total = max(r.total, r.res.Applied+r.res.Quarantined)
		ok = true
		return nil
	}
}

// catchUpInline replays, in the swap transaction, an inline projection's
// events committed since the replay, with the live table locked: writers of
// the live table wait from here until the commit; every event committed now
// has its row in the live table and is replayed here; every other one is
// applied by its writer after the commit, to the table then called by the
// live name.
func (r *rebuild) catchUpInline(ctx context.Context, tx pgx.Tx) error {
	if _, err := tx.Exec(ctx, `LOCK TABLE `+r.live+` IN ACCESS EXCLUSIVE MODE`); err != nil {
		return err
	}
	for {
		next, err := r.applyBatch(ctx, tx, r.cursor, math.MaxInt64)
		if err != nil {
			return err
		}
		if next == math.MaxInt64 {
			break
		}
		r.cursor = next
	}
	last, err := r.s.store.HeadTx(ctx, tx, eventstore.ReadFilter{})
	if err != nil {
		return err
	}
	r.cursor = max(r.cursor, last)
	return nil
}

// catchUpMSP replays, in the swap transaction, a multi-stream projection's
// events up to a settled horizon and moves its consumer there. Only the
// consumer's pass writes the table: holding its rows (waiting for a running
// pass) stops it until the commit.
func (r *rebuild) catchUpMSP(ctx context.Context, tx pgx.Tx) error {
	shards, err := r.s.consumers.LockShardsTx(ctx, tx, r.t.name)
	if err != nil {
		return err
	}
	h, err := r.settled(ctx, tx)
	if err != nil {
		return err
	}
	for r.cursor < h.LastID {
		if r.cursor, err = r.applyBatch(ctx, tx, r.cursor, h.LastID); err != nil {
			return err
		}
	}
	if err := r.s.consumers.MoveShardsTx(ctx, tx, r.t.name, r.cursor, shards, r.t.msp.Delivery() != feature.PerInstance); err != nil {
		return err
	}
	_, err = tx.Exec(ctx, `LOCK TABLE `+r.live+` IN ACCESS EXCLUSIVE MODE`)
	return err
}

// replace drops the live table and renames the shadow table and its
// indexes, its search's among them, to the live names, so a later
// EnsureSchema or rebuild finds them where it expects them.
func (r *rebuild) replace(ctx context.Context, tx pgx.Tx) error {
	shadow := r.s.qualify(r.shadow)
	rows, err := tx.Query(ctx, `SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = $1::regclass`, shadow)
	if err != nil {
		return err
	}
	indexes, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	stmts := []string{
		`DROP TABLE ` + r.live,
		`ALTER TABLE ` + shadow + ` RENAME TO ` + pgx.Identifier{r.t.table.Name}.Sanitize(),
	}
	for _, ix := range indexes {
		if rest, ok := strings.CutPrefix(ix, r.shadow); ok {
			stmts = append(stmts, `ALTER INDEX `+r.s.qualify(ix)+` RENAME TO `+pgx.Identifier{r.t.table.Name + rest}.Sanitize())
		}
	}
	// A search's index names hold their table's name (searchsql.Fields):
	// the shadow's take the names the live table's declaration gives.
	if ts := r.s.tables[r.t.name]; ts != nil {
		live := ts.fieldsOf(r.t.table.Name)
		for i, f := range ts.fieldsOf(r.shadow) {
			stmts = append(stmts,
				`ALTER INDEX `+r.s.qualify(f.Index)+` RENAME TO `+pgx.Identifier{live[i].Index}.Sanitize(),
				`ALTER INDEX `+r.s.qualify(f.Trgm)+` RENAME TO `+pgx.Identifier{live[i].Trgm}.Sanitize())
		}
	}
	for _, s := range stmts {
		if _, err := tx.Exec(ctx, s); err != nil {
			return fmt.Errorf("swap: %w", err)
		}
	}
	return nil
}

// fail drops the shadow table and records the failure; the live table was
// never touched. It runs on the rebuild's own connection, since the pool
// may have none to spare (on a pool of one it is the rebuild's), and on the
// pool only when that connection broke; within failTimeout either way, also
// when ctx has ended.
func (r *rebuild) fail(ctx context.Context, cause error) {
	s := r.s
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), failTimeout)
	defer cancel()
	var q feature.DB = r.conn
	if r.conn.IsClosed() {
		q = s.pool
	}
	if _, err := q.Exec(ctx, `DROP TABLE IF EXISTS `+s.qualify(r.shadow)); err != nil {
		s.log.Error("rebuild: drop shadow table", "projection", r.t.name, "error", err)
	}
	if _, err := q.Exec(ctx, s.sql.markFailed,
		r.t.name, author.Storable(cause.Error(), 2000)); err != nil {
		s.log.Error("rebuild: record failure", "projection", r.t.name, "error", err)
	}
}

// checkBuilt answers projection_rebuild_in_progress while name's table is
// being built for the first time (see EnsureSchema): it lacks events a query
// would miss. A table being rebuilt behind a shadow table is complete and
// passes. Once complete, a table stays so: the answer is kept.
func (s *Side) checkBuilt(ctx context.Context, tx pgx.Tx, name string, msp bool) error {
	if _, ok := s.built.Load(name); ok {
		return nil
	}
	var until *int64
	if err := tx.QueryRow(ctx, s.sql.incompleteUntil, name).Scan(&until); err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return err
	}
	if until != nil && msp {
		cursor, err := s.consumers.LowestCursorTx(ctx, tx, name)
		if err != nil {
			return err
		}
		if cursor >= *until {
			until = nil
		}
	}
	if until != nil {
		return kumikotype.NewError(kumikotype.CodeProjectionRebuilding, "",
			fmt.Sprintf("projection %s is being built from the stored events; retry later", name), nil)
	}
	s.built.Store(name, true)
	return nil
}

// checkBuiltOnPool is checkBuilt in a read-only transaction of its own,
// once the answer is not known to be kept.
func (s *Side) checkBuiltOnPool(ctx context.Context, name string, msp bool) error {
	if _, ok := s.built.Load(name); ok {
		return nil
	}
	return pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		return s.checkBuilt(ctx, tx, name, msp)
	})
}

// ProjectionStatuses reports every inline projection and table-backed
// multi-stream projection, in registry order.
func (s *Side) ProjectionStatuses(ctx context.Context) ([]ProjectionStatus, error) {
	var targets []rebuildTarget
	for _, p := range s.reg.Projections() {
		t, _ := s.rebuildTarget(p.Name())
		targets = append(targets, t)
	}
	for _, m := range s.reg.MSPs() {
		if t, err := s.rebuildTarget(m.Name()); err == nil && t.kind == ProjectionMSP {
			targets = append(targets, t)
		}
	}
	var out []ProjectionStatus
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		out = out[:0]
		for _, t := range targets {
			st := ProjectionStatus{Name: t.name, Kind: t.kind, Status: ProjectionReady}
			var stored int64
			err := tx.QueryRow(ctx, s.sql.projectionState,
				t.name).Scan(&st.Status, &stored, &st.LastRebuildAt, &st.LastError)
			if err != nil && !errors.Is(err, pgx.ErrNoRows) {
				return err
			}
			if st.Head, err = s.store.HeadTx(ctx, tx, t.filter()); err != nil {
				return err
			}
			switch {
			case t.kind == ProjectionMSP:
				if st.Cursor, err = s.consumers.LowestCursorTx(ctx, tx, t.name); err != nil {
					return err
				}
			case st.Status == ProjectionReady:
				st.Cursor = st.Head // written with every event
			default:
				st.Cursor = stored
			}
			if st.Cursor < st.Head {
				if st.Lag, err = s.store.CountTx(ctx, tx, t.filter(), st.Cursor, 0); err != nil {
					return err
				}
				oldest, ok, err := s.store.OldestAfterTx(ctx, tx, t.filter(), st.Cursor)
				if err != nil {
					return err
				}
				if ok {
					st.LagSeconds = max(time.Since(oldest).Seconds(), 0)
				}
			}
			out = append(out, st)
		}
		return nil
	})
	if err != nil {
		return nil, eventstore.TranslateError(fmt.Errorf("projection statuses: %w", err))
	}
	return out, nil
}

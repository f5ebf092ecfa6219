package eventstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// querier is what the store needs of a pool, a connection or a transaction.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// Append appends events to one stream in a single autocommitted statement.
// expected is the version the stream must be at (0 = the stream must not
// exist yet, AnyVersion = no check). Committed events are announced on
// NotifyChannel.
func (s *Store) Append(ctx context.Context, stream Stream, expected int, events ...NewEvent) (AppendResult, error) {
	res, err := s.AppendBatch(ctx, []StreamAppend{{Stream: stream, Expected: expected, Events: events}})
	if err != nil {
		return AppendResult{}, TranslateError(unwrapBatch(err))
	}
	return res[0], nil
}

// AppendTx is Append inside the caller's transaction. The events commit or
// roll back with tx; they are announced only when tx commits: on a Tx (or
// a savepoint or view of one) by a function run after its commit, on any
// other transaction by a pg_notify that travels inside it.
func (s *Store) AppendTx(ctx context.Context, tx pgx.Tx, stream Stream, expected int, events ...NewEvent) (AppendResult, error) {
	res, err := s.AppendBatchTx(ctx, tx, []StreamAppend{{Stream: stream, Expected: expected, Events: events}})
	if err != nil {
		return AppendResult{}, TranslateError(unwrapBatch(err))
	}
	return res[0], nil
}

// AppendBatch appends to many streams in one statement: every stream's
// expectation holds and all events are written, or nothing is. A refused
// stream is reported as a *BatchError naming its index.
func (s *Store) AppendBatch(ctx context.Context, batch []StreamAppend) ([]AppendResult, error) {
	res, err := s.appendBatch(ctx, s.pool, nil, batch)
	if err != nil {
		return nil, TranslateError(err)
	}
	s.notifier.committed(ctx, lastID(res))
	return res, nil
}

// AppendBatchTx is AppendBatch inside the caller's transaction.
func (s *Store) AppendBatchTx(ctx context.Context, tx pgx.Tx, batch []StreamAppend) ([]AppendResult, error) {
	res, err := s.appendBatch(ctx, tx, tx, batch)
	if err != nil {
		return nil, TranslateError(err)
	}
	if err := s.announce(ctx, tx, lastID(res)); err != nil {
		return nil, TranslateError(err)
	}
	return res, nil
}

// appendBatch appends through q; tx is q when it is the caller's
// transaction, nil for the pool.
func (s *Store) appendBatch(ctx context.Context, q querier, tx pgx.Tx, batch []StreamAppend) ([]AppendResult, error) {
	batch, err := s.resolveAnyVersion(ctx, q, batch)
	if err != nil {
		return nil, err
	}
	a, err := encodeBatch(batch)
	if err != nil {
		return nil, err
	}
	p, err := s.sealingOf(batch, a)
	if err != nil {
		return nil, err
	}
	a.stored, a.personal = a.payloads, make([]*string, len(a.payloads))
	var ws []written
	for attempt := 1; ; attempt++ {
		if p != nil {
			if err := s.seal(ctx, p, a); err != nil {
				return nil, err
			}
		}
		if ws, err = s.insert(ctx, q, tx, a); err != nil {
			return nil, s.appendFailed(ctx, q, batch, err)
		}
		if len(ws) > 0 {
			break
		}
		if p != nil {
			// Nothing written: a key the fields were sealed with may not be
			// the subject's (any more).
			reseal, err := s.resealNeeded(ctx, q, p)
			if err != nil {
				return nil, fmt.Errorf("append: %w", err)
			}
			if reseal && attempt < maxSealAttempts {
				continue
			}
			if reseal {
				return nil, fmt.Errorf("append: the subjects' data keys changed under each of %d attempts", maxSealAttempts)
			}
		}
		return nil, s.appendFailed(ctx, q, batch, nil)
	}
	if p != nil {
		s.sealed(p)
	}
	if len(ws) != len(a.versions) {
		return nil, fmt.Errorf("append: wrote %d events, expected %d", len(ws), len(a.versions))
	}
	ws = inEventOrder(ws, a)
	out := make([]AppendResult, len(batch))
	k := 0
	for i, sa := range batch {
		r := AppendResult{AggregateID: uuid.UUID(a.aggIDs[i]), Events: make([]Event, len(sa.Events))}
		for j, ne := range sa.Events {
			w := ws[k]
			r.Events[j] = Event{
				ID: w.id, AggregateID: r.AggregateID, AggregateType: sa.Stream.AggregateType, TenantID: sa.Stream.TenantID,
				Version: w.version, Type: ne.Type, EventVersion: int(a.eventVersions[k]),
				Payload: json.RawMessage(a.payloads[k]), Metadata: ne.Metadata,
				CreatedAt: w.createdAt, CreatedBy: ne.Metadata.UserID,
			}
			r.Events[j].StoredEventVersion, r.Events[j].StoredPayload = r.Events[j].EventVersion, r.Events[j].Payload
			k++
		}
		r.Version = r.Events[len(r.Events)-1].Version
		out[i] = r
	}
	return out, nil
}

// maxSealAttempts bounds the attempts of an append whose personal fields'
// keys keep changing under it (see keyGuard).
const maxSealAttempts = 3

// insert runs the append statement of a through q (tx: see appendBatch):
// the events it wrote, none when an expectation or the key guard did not
// hold.
func (s *Store) insert(ctx context.Context, q querier, tx pgx.Tx, a *batchArgs) ([]written, error) {
	if len(a.versions) > 1 {
		return s.appendMany(ctx, q, tx, a)
	}
	// One event: the common case, without arrays, scanning one row.
	w := written{aggID: uuid.UUID(a.evAggIDs[0]), version: int(a.versions[0])}
	sql := pick(tx != nil, a.keys, s.sql.appendNext, s.sql.appendNextAlone, s.sql.keyedNext, s.sql.keyedNextAlone)
	args := []any{a.evAggIDs[0], a.evAggTypes[0], a.evTenants[0], a.versions[0],
		a.types[0], a.eventVersions[0], a.stored[0], a.metas[0], a.users[0], a.personal[0]}
	if w.version == 1 {
		sql = pick(tx != nil, a.keys, s.sql.appendNew, s.sql.appendNewAlone, s.sql.keyedNew, s.sql.keyedNewAlone)
		args = slices.Delete(args, 3, 4) // the version is the statement's
	}
	switch err := q.QueryRow(ctx, sql, a.keys.after(args)...).Scan(&w.id, &w.createdAt); {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, nil
	case err != nil:
		return nil, err
	}
	return []written{w}, nil
}

// pick chooses among the variants of an append statement: in the
// caller's transaction or alone, with the key guard of keys or without.
func pick(inTx bool, keys *keyArgs, tx, alone string, keyedTx, keyedAlone [2]string) string {
	switch {
	case keys != nil && inTx:
		return keyedTx[keys.variant()]
	case keys != nil:
		return keyedAlone[keys.variant()]
	case inTx:
		return tx
	}
	return alone
}

// inEventOrder returns ws, the rows the statement returned, in the order of
// a's events. They come in that order (the insert is ORDER BY ord); should
// they not, they are matched by stream and version.
func inEventOrder(ws []written, a *batchArgs) []written {
	ordered := true
	for k, w := range ws {
		if w.aggID != a.evAggIDs[k] || w.version != int(a.versions[k]) {
			ordered = false
			break
		}
	}
	if ordered {
		return ws
	}
	type key struct {
		id      uuid.UUID
		version int
	}
	byKey := make(map[key]written, len(ws))
	for _, w := range ws {
		byKey[key{w.aggID, w.version}] = w
	}
	out := make([]written, len(ws))
	for k := range out {
		out[k] = byKey[key{a.evAggIDs[k], int(a.versions[k])}]
	}
	return out
}

// written is what the database assigned to one appended event.
type written struct {
	id        int64
	aggID     uuid.UUID
	version   int
	createdAt time.Time
}

// appendMany runs the multi-event statement. Inside the caller's transaction
// it runs under a savepoint: a unique violation (a concurrent writer won)
// then rolls back to it and leaves the transaction usable, so the failure is
// explained by reading the head in the same transaction — never on a second
// pool connection while the first is held.
func (s *Store) appendMany(ctx context.Context, q querier, tx pgx.Tx, a *batchArgs) ([]written, error) {
	if tx != nil {
		sp, err := tx.Begin(ctx)
		if err != nil {
			return nil, err
		}
		ws, err := s.appendMany(ctx, sp, nil, a)
		if err != nil {
			if rbErr := sp.Rollback(ctx); rbErr != nil {
				return nil, rbErr
			}
			return nil, err
		}
		return ws, sp.Commit(ctx)
	}
	sql, args := s.sql.appendManyNew, []any{a.evAggIDs, a.evAggTypes, a.evTenants, a.versions,
		a.types, a.eventVersions, a.stored, a.metas, a.users, a.personal}
	if a.keys != nil {
		sql = s.sql.keyedManyNew[a.keys.variant()]
	}
	if slices.ContainsFunc(a.expected, func(v int32) bool { return v > 0 }) {
		sql, args = s.sql.appendMany, append(args, a.aggIDs, a.tenants, a.expected)
		if a.keys != nil {
			sql = s.sql.keyedMany[a.keys.variant()]
		}
	}
	rows, err := q.Query(ctx, sql, a.keys.after(args)...)
	if err != nil {
		return nil, err
	}
	ws := make([]written, 0, len(a.versions))
	for rows.Next() {
		var w written
		if err := rows.Scan(&w.id, (*[16]byte)(&w.aggID), &w.version, &w.createdAt); err != nil {
			rows.Close()
			return nil, fmt.Errorf("scan: %w", err)
		}
		ws = append(ws, w)
	}
	return ws, rows.Err()
}

// resolveAnyVersion replaces AnyVersion by the stream's current version, so
// every append below checks a definite version. A writer that appends in
// between makes the append fail with a version conflict.
func (s *Store) resolveAnyVersion(ctx context.Context, q querier, batch []StreamAppend) ([]StreamAppend, error) {
	resolved := batch
	for i, sa := range batch {
		if sa.Expected != AnyVersion {
			continue
		}
		if len(resolved) > 0 && &resolved[0] == &batch[0] {
			resolved = slices.Clone(batch) // never modify the caller's slice
		}
		if sa.Stream.AggregateID == uuid.Nil {
			resolved[i].Expected = 0
			continue
		}
		h, err := s.head(ctx, q, sa.Stream.AggregateID)
		if err != nil {
			return nil, fmt.Errorf("append: %w", err)
		}
		if err := h.check(sa.Stream, AnyVersion); err != nil {
			return nil, &BatchError{Index: i, Err: err}
		}
		resolved[i].Expected = h.version
	}
	return resolved, nil
}

// batchArgs are the parameters of the append statements: one entry per
// stream, and one per event.
type batchArgs struct {
	aggIDs, tenants [][16]byte // [16]byte, not uuid.UUID: pgx encodes it without text round trips
	expected        []int32

	evAggIDs, evTenants             [][16]byte
	evAggTypes, types, metas, users []string
	payloads                        [][]byte // shared with the appended events
	versions, eventVersions         []int32
	// stored are the payloads as written (personal fields sealed) and
	// personal the sealed fields of each (see sealBatch).
	stored   [][]byte
	personal []*string
	// keys are the data keys of the personal fields (nil: none).
	keys *keyArgs
}

// keyArgs are the parameters of the key guard (see keyGuard): one entry
// per subject.
type keyArgs struct {
	tenants        [][16]byte
	subjects, keks []string
	wrapped        [][]byte
	fresh          []bool
}

// variant is the index of the keyed statements that k's parameters are
// for: 0 for many subjects (arrays), 1 for one.
func (k *keyArgs) variant() int {
	if len(k.subjects) == 1 {
		return 1
	}
	return 0
}

// after returns args followed by the key guard's parameters, when k is not
// nil.
func (k *keyArgs) after(args []any) []any {
	switch {
	case k == nil:
		return args
	case k.variant() == 1:
		return append(args, k.tenants[0], k.subjects[0], k.keks[0], k.wrapped[0], k.fresh[0])
	}
	return append(args, k.tenants, k.subjects, k.keks, k.wrapped, k.fresh)
}

func encodeBatch(batch []StreamAppend) (*batchArgs, error) {
	if len(batch) == 0 {
		return nil, invalidf("empty batch")
	}
	n := 0
	for _, sa := range batch {
		n += len(sa.Events)
	}
	a := &batchArgs{
		aggIDs: make([][16]byte, 0, len(batch)), tenants: make([][16]byte, 0, len(batch)), expected: make([]int32, 0, len(batch)),
		evAggIDs: make([][16]byte, 0, n), evTenants: make([][16]byte, 0, n),
		evAggTypes: make([]string, 0, n), types: make([]string, 0, n), payloads: make([][]byte, 0, n),
		metas: make([]string, 0, n), users: make([]string, 0, n),
		versions: make([]int32, 0, n), eventVersions: make([]int32, 0, n),
	}
	seen := make(map[uuid.UUID]bool, len(batch))
	// Events of one request mostly share their metadata: encoded once.
	var (
		lastMeta    *Metadata
		lastEncoded string
	)
	for i, sa := range batch {
		st := sa.Stream
		if st.AggregateType == "" {
			return nil, &BatchError{i, invalidf("aggregate type is empty")}
		}
		if st.TenantID == uuid.Nil {
			return nil, &BatchError{i, invalidf("tenant id is empty")}
		}
		if sa.Expected < 0 {
			return nil, &BatchError{i, invalidf("expected version %d is negative", sa.Expected)}
		}
		if len(sa.Events) == 0 {
			return nil, &BatchError{i, invalidf("no events to append")}
		}
		id := st.AggregateID
		if id == uuid.Nil {
			if sa.Expected != 0 {
				return nil, &BatchError{i, invalidf("aggregate id is empty")}
			}
			id = uuid.Must(uuid.NewV7())
		}
		if seen[id] {
			return nil, &BatchError{i, invalidf("stream %s appears twice in the batch", id)}
		}
		seen[id] = true
		a.aggIDs = append(a.aggIDs, id)
		a.tenants = append(a.tenants, st.TenantID)
		a.expected = append(a.expected, int32(sa.Expected))
		for j, ne := range sa.Events {
			if ne.Type == "" {
				return nil, &BatchError{i, invalidf("event type is empty")}
			}
			if ne.EventVersion < 0 {
				return nil, &BatchError{i, invalidf("event %s: version %d is negative", ne.Type, ne.EventVersion)}
			}
			payload, err := encodePayload(ne.Payload)
			if err != nil {
				return nil, &BatchError{i, fmt.Errorf("%w: event %s: %w", ErrInvalidEvent, ne.Type, err)}
			}
			if lastMeta == nil || !sameMetadata(*lastMeta, ne.Metadata) {
				meta, err := json.Marshal(ne.Metadata)
				if err != nil {
					return nil, &BatchError{i, fmt.Errorf("%w: event %s metadata: %w", ErrInvalidEvent, ne.Type, err)}
				}
				lastMeta, lastEncoded = &sa.Events[j].Metadata, string(meta)
			}
			a.evAggIDs = append(a.evAggIDs, id)
			a.evAggTypes = append(a.evAggTypes, st.AggregateType)
			a.evTenants = append(a.evTenants, st.TenantID)
			a.versions = append(a.versions, int32(sa.Expected+j+1))
			a.types = append(a.types, ne.Type)
			a.eventVersions = append(a.eventVersions, int32(max(ne.EventVersion, 1)))
			a.payloads = append(a.payloads, payload)
			a.metas = append(a.metas, lastEncoded)
			a.users = append(a.users, ne.Metadata.UserID)
		}
	}
	return a, nil
}

func sameMetadata(a, b Metadata) bool {
	return a.UserID == b.UserID && a.RequestID == b.RequestID && a.CorrelationID == b.CorrelationID &&
		a.CausationID == b.CausationID && a.IdempotencyKey == b.IdempotencyKey && maps.Equal(a.Headers, b.Headers)
}

// encodePayload returns the payload as JSON and refuses anything but an
// object. The bytes are the store's own, never the caller's.
func encodePayload(p any) ([]byte, error) {
	var (
		b      []byte
		caller bool
	)
	switch v := p.(type) {
	case nil:
		return nil, errors.New("payload is missing")
	case json.RawMessage:
		b, caller = v, true
	case []byte:
		b, caller = v, true
	default:
		var err error
		if b, err = json.Marshal(v); err != nil {
			return nil, fmt.Errorf("payload: %w", err)
		}
	}
	b = bytes.TrimSpace(b)
	if len(b) == 0 || b[0] != '{' || !json.Valid(b) {
		return nil, errors.New("payload is not a JSON object")
	}
	if caller {
		b = bytes.Clone(b)
	}
	return b, nil
}

// appendFailed turns a refused or failed append into the error of the first
// stream that explains it. cause is the database error, or nil when the
// statement wrote nothing because an expectation did not hold.
func (s *Store) appendFailed(ctx context.Context, q querier, batch []StreamAppend, cause error) error {
	var pgErr *pgconn.PgError
	if cause != nil && (!errors.As(cause, &pgErr) || pgErr.Code != "23505") {
		return fmt.Errorf("append: %w", cause)
	}
	// The unique index refused, or an expectation did not hold: q is usable
	// either way (the pool, or a transaction rolled back to its savepoint),
	// and a new statement sees the winner's commit.
	raced := -1
	var racedHead streamHead
	for i, sa := range batch {
		if sa.Stream.AggregateID == uuid.Nil {
			continue // a freshly minted id cannot conflict
		}
		h, err := s.head(ctx, q, sa.Stream.AggregateID)
		if err != nil {
			return fmt.Errorf("append: %w", err)
		}
		if err := h.check(sa.Stream, sa.Expected); err != nil {
			return &BatchError{Index: i, Err: err}
		}
		if raced < 0 {
			raced, racedHead = i, h
		}
	}
	if raced < 0 {
		return fmt.Errorf("append: refused without a cause: %w", cause)
	}
	// Nothing explains it any more: a concurrent writer's transaction that
	// made us fail was rolled back since. Report the conflict; a retry with a
	// fresh read succeeds.
	sa := batch[raced]
	return &BatchError{Index: raced, Err: &VersionConflictError{AggregateID: sa.Stream.AggregateID, Expected: sa.Expected, Current: racedHead.version}}
}

// streamHead is what the store knows about a stream regardless of tenant.
type streamHead struct {
	exists        bool
	owner         uuid.UUID
	aggregateType string
	version       int
	archived      bool
}

func (s *Store) head(ctx context.Context, q querier, id uuid.UUID) (streamHead, error) {
	var h streamHead
	err := q.QueryRow(ctx, s.sql.streamHead, [16]byte(id)).Scan((*[16]byte)(&h.owner), &h.aggregateType, &h.version, &h.archived)
	if errors.Is(err, pgx.ErrNoRows) {
		return h, nil
	}
	if err != nil {
		return h, err
	}
	h.exists = true
	return h, nil
}

// check explains why an append with this expectation is refused, or returns nil.
func (h streamHead) check(st Stream, expected int) error {
	switch {
	case h.exists && h.owner != st.TenantID:
		// Behave as if the stream were missing; a create can only be told
		// that the id is taken.
		if expected == 0 || expected == AnyVersion {
			return &VersionConflictError{AggregateID: st.AggregateID, Expected: expected, Current: -1}
		}
		return fmt.Errorf("%w: %s", ErrAggregateNotFound, st.AggregateID)
	case !h.exists:
		if expected > 0 {
			return fmt.Errorf("%w: %s", ErrAggregateNotFound, st.AggregateID)
		}
		return nil
	case h.archived:
		return fmt.Errorf("%w: %s", ErrStreamArchived, st.AggregateID)
	case expected != AnyVersion && h.version != expected:
		return &VersionConflictError{AggregateID: st.AggregateID, Expected: expected, Current: h.version}
	}
	return nil
}

func unwrapBatch(err error) error {
	var be *BatchError
	if errors.As(err, &be) {
		return be.Err
	}
	return err
}

func lastID(res []AppendResult) int64 {
	var id int64
	for _, r := range res {
		for _, e := range r.Events {
			id = max(id, e.ID)
		}
	}
	return id
}

// hasPersonal reports whether an event of batch has personal fields.
func hasPersonal(batch []StreamAppend) bool {
	for _, sa := range batch {
		for _, ne := range sa.Events {
			if len(ne.Personal) > 0 {
				return true
			}
		}
	}
	return false
}

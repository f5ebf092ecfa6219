package eventstore

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strconv"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// KnownVersions are the event types a writer knows and the newest schema
// version of each: what [Store.RefuseUnknownVersionsTx] holds a stream's
// history against. Build it once (NewKnownVersions) and share it; it is
// read-only.
type KnownVersions struct {
	newest   map[string]int
	types    []string
	versions []int32
}

// NewKnownVersions returns the known versions of newest, event type →
// newest version.
func NewKnownVersions(newest map[string]int) KnownVersions {
	k := KnownVersions{newest: maps.Clone(newest)}
	for _, t := range slices.Sorted(maps.Keys(newest)) {
		k.types = append(k.types, t)
		k.versions = append(k.versions, int32(min(max(newest[t], 1), 1<<31-1)))
	}
	return k
}

// unknownVersionState is the SQLSTATE kumiko_refuse_unknown_versions raises.
const unknownVersionState = "KU001"

// RefuseUnknownVersionsTx makes tx fail with an *UnknownEventVersionError
// (Current: the newest version known) when tenant's stream id holds an event
// of a type in known at a version above known's: one a newer release wrote,
// which this writer could not read, so it must not append over it. Types
// known does not list pass, as the upcaster passes them; a missing stream or
// another tenant's passes (the append that follows answers for those).
//
// On a Tx itself (not a savepoint or view of it) the check costs no round trip of its
// own: it is queued and travels with tx's next statement — queue it before
// the append, so a refused stream gets nothing written — which then answers
// the error, as do every later statement and the commit. On any other tx (a
// savepoint among them) it runs at once. In the database it looks only
// at the stream's events above version 1, through a partial index holding
// just those: a stream whose events are all at version 1 costs one empty
// index lookup and is refused nothing.
func (s *Store) RefuseUnknownVersionsTx(ctx context.Context, tx pgx.Tx, tenant, id uuid.UUID, known KnownVersions) error {
	check := func(err error) error {
		var pg *pgconn.PgError
		if !errors.As(err, &pg) || pg.Code != unknownVersionState {
			return TranslateError(err)
		}
		v, _ := strconv.Atoi(pg.Hint)
		return &UnknownEventVersionError{Type: pg.Detail, Version: v, Current: known.newest[pg.Detail]}
	}
	args := []any{[16]byte(id), [16]byte(tenant), known.types, known.versions}
	if lt, ok := tx.(*Tx); ok {
		lt.Enqueue(check, s.sql.refuseUnknownVersions, args...)
		return nil
	}
	// A savepoint or another wrapper: the check runs now, so its failure is
	// this statement's alone (a savepoint rolled back to leaves the
	// transaction usable, as a consumer's pass needs to record the failure).
	if _, err := tx.Exec(ctx, s.sql.refuseUnknownVersions, args...); err != nil {
		return check(err)
	}
	return nil
}

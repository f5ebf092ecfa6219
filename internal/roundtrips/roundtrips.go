// Package roundtrips records what a pgx connection sends to PostgreSQL, one
// entry per round trip: the tests that hold a path to its count of round
// trips use it as the connection's tracer.
package roundtrips

import (
	"context"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
)

// Recorder is a pgx.QueryTracer and pgx.BatchTracer. Each round trip is
// recorded as the first words (upper-cased) of its statements: one for a
// statement sent alone, several for a batch. Statements for which Skip
// reports true are left out (a statement sent alone not at all).
type Recorder struct {
	// Skip, when set, leaves a statement out.
	Skip func(sql string) bool

	mu    sync.Mutex
	trips [][]string
	batch []string
}

func (r *Recorder) skip(sql string) bool { return r.Skip != nil && r.Skip(sql) }

func word(sql string) string { return strings.ToUpper(strings.Fields(sql)[0]) }

// TraceQueryStart records a statement sent alone.
func (r *Recorder) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if !r.skip(d.SQL) {
		r.mu.Lock()
		r.trips = append(r.trips, []string{word(d.SQL)})
		r.mu.Unlock()
	}
	return ctx
}

// TraceQueryEnd does nothing.
func (r *Recorder) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TraceBatchStart starts a batch's round trip.
func (r *Recorder) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	r.mu.Lock()
	r.batch = nil
	r.mu.Unlock()
	return ctx
}

// TraceBatchQuery records a statement of the batch.
func (r *Recorder) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	if !r.skip(d.SQL) {
		r.mu.Lock()
		r.batch = append(r.batch, word(d.SQL))
		r.mu.Unlock()
	}
}

// TraceBatchEnd ends the batch's round trip.
func (r *Recorder) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {
	r.mu.Lock()
	r.trips = append(r.trips, r.batch)
	r.mu.Unlock()
}

// Take returns the round trips recorded since the last call.
func (r *Recorder) Take() [][]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.trips
	r.trips = nil
	return t
}

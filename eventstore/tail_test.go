package eventstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/kumikotest"
)

// tail collects what Tail passes on.
func tail(t *testing.T, s *eventstore.Store, after int64, f eventstore.ReadFilter) ([]int64, int64) {
	t.Helper()
	var ids []int64
	pos, err := s.Tail(context.Background(), after, f, func(e eventstore.Event) error {
		ids = append(ids, e.ID)
		return nil
	})
	require.NoError(t, err)
	return ids, pos
}

// appendNew appends one event of each type, each to a new stream, and
// returns their ids.
func appendNew(t *testing.T, s *eventstore.Store, types ...string) []int64 {
	t.Helper()
	var ids []int64
	for _, typ := range types {
		res, err := s.Append(context.Background(), eventstore.Stream{TenantID: tenantA, AggregateType: "task"}, 0, ev(typ, `{}`))
		require.NoError(t, err)
		ids = append(ids, res.Events[0].ID)
	}
	return ids
}

// TailStart finds the last n matching events; Tail yields them, filtered,
// and moves the position past what did not match.
func TestTailStartAndFilter(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	ctx := context.Background()
	s := db.Store
	ids := appendNew(t, s, "task.created", "task.noted", "task.created", "task.noted", "task.created")
	head, err := s.TailStart(ctx, eventstore.ReadFilter{}, 0)
	require.NoError(t, err)
	require.Equal(t, ids[4], head)

	created := eventstore.ReadFilter{Types: []string{"task.created"}}
	start, err := s.TailStart(ctx, created, 2)
	require.NoError(t, err)
	require.Equal(t, ids[2]-1, start, "before the second-to-last task.created")
	got, pos := tail(t, s, start, created)
	require.Equal(t, []int64{ids[2], ids[4]}, got)
	require.Equal(t, ids[4], pos)

	start, err = s.TailStart(ctx, created, 10)
	require.NoError(t, err)
	require.Zero(t, start, "fewer than n: from the beginning")

	noted := appendNew(t, s, "task.noted")
	got, pos = tail(t, s, pos, created)
	require.Empty(t, got)
	require.Equal(t, noted[0], pos, "the position moves past events that do not match")
}

// Tail waits for the writers in flight: an event that commits after a
// higher one is not skipped.
func TestTailWaitsForWritersInFlight(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	ctx := context.Background()
	s := db.Store
	stream := eventstore.Stream{TenantID: tenantA, AggregateType: "task"}

	writer, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer writer.Rollback(ctx)
	late, err := s.AppendTx(ctx, writer, stream, 0, ev("task.created", `{}`))
	require.NoError(t, err)
	early, err := s.Append(ctx, stream, 0, ev("task.created", `{}`))
	require.NoError(t, err)
	require.Less(t, late.Events[0].ID, early.Events[0].ID)

	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	_, err = s.Tail(short, 0, eventstore.ReadFilter{}, func(eventstore.Event) error {
		t.Error("Tail passed on an event while a writer below it was open")
		return nil
	})
	require.ErrorIs(t, err, context.DeadlineExceeded, "Tail waits while the writer is open")

	require.NoError(t, writer.Commit(ctx))
	got, pos := tail(t, s, 0, eventstore.ReadFilter{})
	require.Equal(t, []int64{late.Events[0].ID, early.Events[0].ID}, got)
	require.Equal(t, early.Events[0].ID, pos)
}

// A failing callback stops Tail at the last event it accepted.
func TestTailStopsAtCallbackError(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	ctx := context.Background()
	s := db.Store
	ids := appendNew(t, s, "task.created", "task.created", "task.created")
	errFull := errors.New("full")
	pos, err := s.Tail(ctx, 0, eventstore.ReadFilter{}, func(e eventstore.Event) error {
		if e.ID == ids[1] {
			return errFull
		}
		return nil
	})
	require.ErrorIs(t, err, errFull)
	require.Equal(t, ids[0], pos)
}

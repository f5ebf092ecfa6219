package eventstore_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/kumikotest"
)

// HeadTx and CountTx see the events matching a filter: by tenant, aggregate
// type and event type, counting after a position and up to a bound.
func TestHeadAndCount(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	s := db.Store
	ctx := context.Background()
	ids := appendNew(t, s, "task.created", "task.done", "task.created")
	note, err := s.Append(ctx, eventstore.Stream{TenantID: tenantB, AggregateType: "note"}, 0, ev("note.created", `{}`))
	require.NoError(t, err)
	last := note.Events[0].ID

	err = s.WithTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		for _, c := range []struct {
			name        string
			f           eventstore.ReadFilter
			after, upTo int64
			head, count int64
		}{
			{"everything", eventstore.ReadFilter{}, 0, 0, last, 4},
			{"after a position", eventstore.ReadFilter{}, ids[0], 0, last, 3},
			{"up to a bound", eventstore.ReadFilter{}, ids[0], ids[2], last, 2},
			{"a tenant", eventstore.ReadFilter{TenantID: tenantA}, 0, 0, ids[2], 3},
			{"an aggregate type", eventstore.ReadFilter{AggregateTypes: []string{"note"}}, 0, 0, last, 1},
			{"event types", eventstore.ReadFilter{Types: []string{"task.created"}}, ids[0], 0, ids[2], 1},
			{"nothing matches", eventstore.ReadFilter{Types: []string{"none"}}, 0, 0, 0, 0},
		} {
			head, err := s.HeadTx(ctx, tx, c.f)
			require.NoError(t, err, c.name)
			require.Equal(t, c.head, head, c.name)
			n, err := s.CountTx(ctx, tx, c.f, c.after, c.upTo)
			require.NoError(t, err, c.name)
			require.Equal(t, c.count, n, c.name)
		}
		return nil
	})
	require.NoError(t, err)
}

// OldestAfterTx answers the creation time of the first matching event after
// a position, and false when there is none.
func TestOldestAfter(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	s := db.Store
	ctx := context.Background()
	ids := appendNew(t, s, "task.created", "task.done", "task.created")
	var evs []eventstore.Event
	for e, err := range s.ReadAll(ctx, 0, eventstore.ReadFilter{}) {
		require.NoError(t, err)
		evs = append(evs, e)
	}
	require.Len(t, evs, 3)
	err := s.WithTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		at, ok, err := s.OldestAfterTx(ctx, tx, eventstore.ReadFilter{Types: []string{"task.done"}}, 0)
		require.NoError(t, err)
		require.True(t, ok)
		require.True(t, at.Equal(evs[1].CreatedAt), "%s vs %s", at, evs[1].CreatedAt)
		_, ok, err = s.OldestAfterTx(ctx, tx, eventstore.ReadFilter{}, ids[2])
		require.NoError(t, err)
		require.False(t, ok)
		return nil
	})
	require.NoError(t, err)
}

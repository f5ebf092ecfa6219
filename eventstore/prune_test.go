package eventstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/kumikotest"
)

// Prune removes only the named aggregate types' events created before the
// cut-off, never beyond what the guard lets go; a dry run counts the same and
// removes nothing; a guard's error removes nothing; snapshots stay.
func TestPrune(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := kumikotest.NewDB(t)
	s := db.Store
	tasks := newStream(t, s, tenantA, 3) // ids 1..3, aggregate type "task"
	_, err := s.Append(ctx, eventstore.Stream{TenantID: tenantA, AggregateType: "note"}, 0, ev("note.made", `{}`))
	require.NoError(t, err)
	err = s.SaveSnapshot(ctx, eventstore.Snapshot{TenantID: tenantA, AggregateID: tasks.Events[2].AggregateID, Version: 3, State: []byte(`{}`)})
	require.NoError(t, err)
	var cut time.Time
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT now()").Scan(&cut))
	opts := eventstore.PruneOptions{OlderThan: cut, AggregateTypes: []string{"task"}}

	for _, bad := range []eventstore.PruneOptions{{AggregateTypes: []string{"task"}}, {OlderThan: cut}, {OlderThan: cut, AggregateTypes: []string{""}}} {
		_, err := s.Prune(ctx, bad)
		require.ErrorIs(t, err, eventstore.ErrInvalidPrune)
	}

	refused := errors.New("not yet")
	var asked int64
	opts.Guard = func(_ context.Context, _ pgx.Tx, upTo int64) (int64, error) { asked = upTo; return 0, refused }
	_, err = s.Prune(ctx, opts)
	require.ErrorIs(t, err, refused)
	require.Equal(t, tasks.Events[2].ID, asked, "the guard is asked about the newest event to remove")

	opts.Guard = func(_ context.Context, _ pgx.Tx, upTo int64) (int64, error) { return upTo - 1, nil }
	opts.DryRun = true
	res, err := s.Prune(ctx, opts)
	require.NoError(t, err)
	require.Equal(t, eventstore.PruneResult{Deleted: 2, UpTo: tasks.Events[1].ID, ByType: map[string]int64{"task": 2}}, res)
	require.Equal(t, 4, db.Count(t, "SELECT count(*) FROM kumiko_events"), "a dry run removes nothing")

	opts.DryRun = false
	res, err = s.Prune(ctx, opts)
	require.NoError(t, err)
	require.Equal(t, int64(2), res.Deleted)
	require.Equal(t, 2, db.Count(t, "SELECT count(*) FROM kumiko_events"), "the guard's bound holds, other types stay")
	require.Equal(t, 1, db.Count(t, "SELECT count(*) FROM kumiko_snapshots"))
}

package eventstore_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/kumikotest"
)

func horizon(t *testing.T, db *kumikotest.DB) eventstore.Horizon {
	t.Helper()
	var h eventstore.Horizon
	require.NoError(t, pgx.BeginFunc(context.Background(), db.Pool, func(tx pgx.Tx) error {
		var err error
		h, err = db.Store.HorizonTx(context.Background(), tx)
		return err
	}))
	return h
}

// A transaction that inserted events is a writer until it ends; one that
// only read is never one; LastID follows allocation, committed or not.
func TestHorizonSeesInFlightWritersOnly(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	ctx := context.Background()
	s := db.Store
	require.Equal(t, eventstore.Horizon{LastID: 0, Writers: []string{}}, horizon(t, db))

	reader, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer reader.Rollback(ctx)
	_, err = s.LoadTx(ctx, reader, tenantA, tenantB, eventstore.LoadOptions{})
	require.NoError(t, err)

	writer, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer writer.Rollback(ctx)
	res, err := s.AppendTx(ctx, writer, eventstore.Stream{TenantID: tenantA, AggregateType: "task"}, 0, ev("task.created", `{}`))
	require.NoError(t, err)
	var vxid string
	require.NoError(t, writer.QueryRow(ctx, "SELECT virtualtransaction FROM pg_locks WHERE pid = pg_backend_pid() AND locktype = 'virtualxid'").Scan(&vxid))

	h := horizon(t, db)
	require.Equal(t, res.Events[0].ID, h.LastID, "allocated, not yet committed")
	require.Equal(t, []string{vxid}, h.Writers, "the open reader is not a writer")

	require.NoError(t, writer.Rollback(ctx))
	h = horizon(t, db)
	require.Empty(t, h.Writers)
	require.Equal(t, res.Events[0].ID, h.LastID, "a rolled-back id stays allocated")

	// ReadRangeTx sees nothing of the rolled-back event.
	committed, err := s.Append(ctx, eventstore.Stream{TenantID: tenantA, AggregateType: "task"}, 0, ev("task.created", `{}`))
	require.NoError(t, err)
	require.NoError(t, pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		evs, err := s.ReadRangeTx(ctx, tx, 0, committed.Events[0].ID, 10)
		require.Len(t, evs, 1)
		require.Equal(t, committed.Events[0].ID, evs[0].ID)
		return err
	}))
}

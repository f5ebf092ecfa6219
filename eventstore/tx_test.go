package eventstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/kumikotest"
)

// A panic in WithTx's function goes on to the caller, but only after the
// transaction rolled back and its connection went back to the pool: the
// stream it wrote is free right away and nothing is left checked out.
func TestWithTxRollsBackOnPanic(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(db.URL)
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["application_name"] = "withtx-" + db.Schema
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	s, err := eventstore.New(pool, eventstore.Config{Schema: db.Schema})
	require.NoError(t, err)
	t.Cleanup(func() {
		s.Close()
		if pool.Stat().AcquiredConns() == 0 {
			pool.Close()
			return
		}
		// Closing would wait forever: end the abandoned transaction instead.
		db.Exec(t, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1", cfg.ConnConfig.RuntimeParams["application_name"])
	})

	stream := eventstore.Stream{TenantID: tenantA, AggregateType: "task", AggregateID: uuid.New()}
	require.PanicsWithValue(t, "boom", func() {
		_ = s.WithTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
			_, err := s.AppendTx(ctx, tx, stream, 0, ev("task.created", `{}`))
			require.NoError(t, err)
			panic("boom")
		})
	})
	require.Zero(t, pool.Stat().AcquiredConns(), "the connection is back in the pool")
	require.Zero(t, db.Count(t, "SELECT count(*) FROM kumiko_events"))
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = s.Append(wctx, stream, 0, ev("task.created", `{}`))
	require.NoError(t, err, "the stream's first version is free again")
}

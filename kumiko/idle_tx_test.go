package kumiko_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/eventstore"
	khttp "github.com/kumiko-go/kumiko/http"
	"github.com/kumiko-go/kumiko/kumiko"
	"github.com/kumiko-go/kumiko/kumikotest"
	"github.com/kumiko-go/kumiko/samples/tasks"
)

// A write transaction left open on the server's pool — a handler stuck or a
// transaction leaked — is ended by PostgreSQL after the idle timeout: the id
// it allocated is passed and delivery resumes without anyone stepping in.
func TestIdleWriterIsEndedAndDeliveryResumes(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	ctx := context.Background()
	server, err := kumiko.BuildServer(ctx, kumiko.Config{DatabaseURL: db.URL, Schema: db.Schema, JWTSecret: secret,
		Addr: "127.0.0.1:0", InstanceID: "idle-1", IdleInTransactionTimeout: 300 * time.Millisecond}, tasks.Feature, counter)
	require.NoError(t, err)
	require.NoError(t, server.Start(ctx))
	t.Cleanup(func() { require.NoError(t, server.Stop(context.Background())) })
	parts := server.Parts()

	stuck, err := parts.Pool.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = stuck.Rollback(context.Background()) })
	_, err = parts.Store.AppendTx(ctx, stuck, eventstore.Stream{TenantID: uuid.New(), AggregateType: "thing"}, 0,
		eventstore.NewEvent{Type: "thing.made", Payload: json.RawMessage(`{}`)})
	require.NoError(t, err)
	pid := stuck.Conn().PgConn().PID()

	token, err := khttp.IssueToken([]byte(secret), "u-1", "01900000-0000-7000-8000-000000000001", []string{"User"}, time.Minute)
	require.NoError(t, err)
	post(t, "http://"+server.Addr()+"/api/write", token, `{"type":"task.create","payload":{"title":"behind the stuck writer"}}`, http.StatusOK)

	require.Eventually(t, func() bool {
		return db.Count(t, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", int32(pid)) == 0
	}, 20*time.Second, 10*time.Millisecond, "the server ends the idle transaction's session")
	require.Eventually(t, func() bool {
		return db.Count(t, "SELECT COALESCE(sum(n), 0) FROM task_counts") == 1
	}, 20*time.Second, 10*time.Millisecond, "the gap is passed and the later event delivered")
	require.Error(t, stuck.Commit(ctx), "the stuck transaction is gone")
	require.Zero(t, db.Count(t, "SELECT count(*) FROM kumiko_events WHERE type = 'thing.made'"))
}

// The timeout is on by default and can be left to the server.
func TestIdleInTransactionTimeoutDefault(t *testing.T) {
	t.Parallel()
	for timeout, want := range map[time.Duration]string{0: "60000", 1500 * time.Millisecond: "1500", -1: ""} {
		app, err := kumiko.BuildServer(context.Background(), kumiko.Config{DatabaseURL: "postgres://127.0.0.1:1/x", JWTSecret: secret,
			InstanceID: "t", IdleInTransactionTimeout: timeout}, tasks.Feature)
		require.NoError(t, err)
		pool := app.Parts().Pool
		require.Equal(t, want, pool.Config().ConnConfig.RuntimeParams["idle_in_transaction_session_timeout"], "timeout %v", timeout)
		pool.Close() // never started: nothing else to stop
	}
}

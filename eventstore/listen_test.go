package eventstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/kumikotest"
)

// Listen wakes once it listens and on every committed event, and comes back
// after its connection is killed.
func TestListenWakesAndReconnects(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	ctx, cancel := context.WithCancel(context.Background())
	s := db.Store
	wakes := make(chan struct{}, 16)
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Listen(ctx, func() { wakes <- struct{}{} })
	}()
	t.Cleanup(func() { cancel(); <-done })
	woken := func(why string) {
		t.Helper()
		select {
		case <-wakes:
		case <-time.After(10 * time.Second):
			t.Fatal("no wake-up: " + why)
		}
	}
	woken("listening")

	stream := eventstore.Stream{TenantID: tenantA, AggregateType: "task"}
	_, err := s.Append(ctx, stream, 0, ev("task.created", `{}`))
	require.NoError(t, err)
	woken("an event committed")

	listen := `LISTEN "` + s.NotifyChannel() + `"`
	require.Equal(t, 1, db.Count(t, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE query = $1", listen))
	woken("listening again")
	_, err = s.Append(ctx, stream, 0, ev("task.created", `{}`))
	require.NoError(t, err)
	woken("an event committed after the reconnect")
}

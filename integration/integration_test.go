package integration_test

import (
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/consumer"
	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/integration"
	"github.com/kumiko-go/kumiko/kumikotest"
	"github.com/kumiko-go/kumiko/pipeline"
)

func TestRolledBackCommandPublishesNothingCommittedOnePublishesOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, integration.Config{})

	require.Error(t, e.ship(t, alice, ShipOrder{OrderID: "o-1", Fail: true}))
	require.Zero(t, e.Count(t, "SELECT count(*) FROM kumiko_events"), "a rolled-back publish leaves nothing in the outbox")
	e.relay(t)
	require.Zero(t, e.shop.callsOf("record"))

	require.NoError(t, e.ship(t, alice, ShipOrder{OrderID: "o-2"}))
	require.Equal(t, 1, e.Count(t, "SELECT count(*) FROM kumiko_events WHERE type = 'order.shipped' AND aggregate_type = $1", pipeline.MessageStream))
	e.relay(t)
	e.relay(t)
	require.Equal(t, 1, e.shop.callsOf("record"))
	require.Equal(t, 1, e.shop.callsOf("flaky"))
	require.Equal(t, 2, e.Count(t, "SELECT count(*) FROM received WHERE order_id = 'o-2'"))
	require.Equal(t, 2, e.Count(t, "SELECT count(*) FROM kumiko_inbox"))
}

func TestHandlersRunAsThePublisher(t *testing.T) {
	t.Parallel()
	e := newEnv(t, integration.Config{})
	require.NoError(t, e.ship(t, alice, ShipOrder{OrderID: "a"}))
	require.NoError(t, e.ship(t, bob, ShipOrder{OrderID: "b"}))
	e.relay(t)
	for _, c := range []pipeline.Caller{alice, bob} {
		require.Equal(t, 2, e.Count(t, `SELECT count(*) FROM received r JOIN kumiko_events e ON e.aggregate_id = r.message_id
WHERE r.tenant_id = $1 AND r.scope = $2 AND r.user_id = $3 AND r.correlation_id = $4 AND r.causation_id = r.message_id::text
  AND e.tenant_id = $1`, c.User.TenantID, c.User.TenantID.String(), c.User.ID, c.CorrelationID), c.User.ID)
	}
}

func TestRedeliveryRunsOnlyTheHandlersThatHaveNotHandledIt(t *testing.T) {
	t.Parallel()
	e := newEnv(t, integration.Config{Transport: nil})
	e.shop.poison.Store(true)
	require.NoError(t, e.ship(t, alice, ShipOrder{OrderID: "p", Poison: true}))
	m := e.message(t)

	err := e.svc.Handle(ctx, m)
	require.ErrorContains(t, err, "poisoned")
	require.Equal(t, 1, e.shop.callsOf("record"))
	require.Equal(t, 1, e.shop.callsOf("flaky"))
	require.Equal(t, 1, e.Count(t, "SELECT count(*) FROM received WHERE handler = 'record'"), "the failing handler does not undo the other")

	e.shop.poison.Store(false)
	require.NoError(t, e.svc.Handle(ctx, m))
	require.NoError(t, e.svc.Handle(ctx, m))
	require.Equal(t, 1, e.shop.callsOf("record"), "a redelivered message skips the handler that handled it")
	require.Equal(t, 2, e.shop.callsOf("flaky"))
	require.Equal(t, 2, e.Count(t, "SELECT count(*) FROM received"))
}

// Two receivers get the same message at once (a broker redelivering while
// the first still works): the second waits on the first's inbox row and
// then skips the handler.
func TestConcurrentDeliveriesRunAHandlerOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, integration.Config{})
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	e.shop.hold = func() { once.Do(func() { close(entered); <-release }) }
	require.NoError(t, e.ship(t, alice, ShipOrder{OrderID: "c"}))
	m := e.message(t)

	errs := make(chan error, 2)
	go func() { errs <- e.svc.Handle(ctx, m) }()
	<-entered
	go func() { errs <- e.svc.Handle(ctx, m) }()
	// The second delivery blocks on the first's uncommitted inbox row.
	deadline := time.Now().Add(10 * time.Second)
	for e.Count(t, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE 'INSERT INTO%kumiko_inbox%'`) == 0 {
		require.True(t, time.Now().Before(deadline), "the second delivery never waited on the inbox")
		time.Sleep(5 * time.Millisecond)
	}
	close(release)
	require.NoError(t, <-errs)
	require.NoError(t, <-errs)
	require.Equal(t, 1, e.shop.callsOf("record"))
	require.Equal(t, 1, e.Count(t, "SELECT count(*) FROM received WHERE handler = 'record'"))
}

func TestPoisonMessageIsKeptDeadOthersFlowAndItCanBeRetried(t *testing.T) {
	t.Parallel()
	e := newEnv(t, integration.Config{})
	e.shop.poison.Store(true)
	require.NoError(t, e.ship(t, alice, ShipOrder{OrderID: "bad", Poison: true}))
	require.NoError(t, e.ship(t, alice, ShipOrder{OrderID: "good"}))
	e.relay(t)

	require.Equal(t, integration.DefaultMaxAttempts, e.shop.callsOf("flaky")-1, "five tries of the poison message, one of the good one")
	require.Equal(t, 3, e.Count(t, "SELECT count(*) FROM received"), "record handled both, flaky the good one")
	dead, err := e.svc.Dead().List(ctx, 10)
	require.NoError(t, err)
	require.Len(t, dead, 1)
	require.Equal(t, "flaky", dead[0].Handler)
	require.Equal(t, integration.DefaultMaxAttempts, dead[0].Attempts)
	require.Equal(t, "internal_error: handler flaky: poisoned", dead[0].LastError, "the code first, then the handler")
	require.Equal(t, alice.User.TenantID, dead[0].Message.TenantID)

	id := dead[0].Message.ID
	require.ErrorContains(t, e.svc.Dead().Retry(ctx, id, ""), "poisoned")
	e.shop.poison.Store(false)
	require.NoError(t, e.svc.Dead().Retry(ctx, id, ""))
	require.Equal(t, 4, e.Count(t, "SELECT count(*) FROM received"))
	dead, err = e.svc.Dead().List(ctx, 10)
	require.NoError(t, err)
	require.Empty(t, dead)
	_, err = e.svc.Dead().Drop(ctx, id, "")
	require.ErrorIs(t, err, integration.ErrDeadNotFound)
}

// A writer holding a publish open delays the relay; the message goes out
// once it commits, before the one committed meanwhile.
func TestRelayNeverSkipsAMessageCommittedLate(t *testing.T) {
	t.Parallel()
	e := newEnv(t, integration.Config{})
	tx, err := e.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	require.NoError(t, e.Executor.RunInTx(ctx, tx, alice, "shop", "", func(cc feature.CommandContext) error {
		return cc.Publish("order.shipped", OrderShipped{OrderID: "first"})
	}))
	require.NoError(t, e.ship(t, alice, ShipOrder{OrderID: "second"}))
	e.relay(t)
	require.Zero(t, e.shop.callsOf("record"), "the relay waits for the open writer")

	require.NoError(t, tx.Commit(ctx))
	e.relay(t)
	var order []string
	rows, err := e.Pool.Query(ctx, "SELECT order_id FROM received WHERE handler = 'record' ORDER BY seq")
	require.NoError(t, err)
	for rows.Next() {
		var id string
		require.NoError(t, rows.Scan(&id))
		order = append(order, id)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{"first", "second"}, order)
}

type placed struct {
	OrderID string `json:"orderId" validate:"required"`
}

// A multi-stream projection publishes in its pass transaction: the message
// leaves once the pass commits, caused by the event, as its user and tenant.
func TestMultiStreamProjectionPublishes(t *testing.T) {
	t.Parallel()
	var got []feature.Message
	var mu sync.Mutex
	f := feature.Define("warehouse", func(r *feature.Registrar) {
		r.DefineEvent("order.placed", placed{})
		r.IntegrationEvent("order.shipped", OrderShipped{})
		feature.HandleCommand(r, "order.place", feature.AnyUser(), func(ctx feature.CommandContext, in placed) (any, error) {
			_, err := ctx.AppendEvent(feature.AppendSpec{AggregateType: "order", Type: "order.placed", Payload: in})
			return nil, err
		})
		r.MultiStreamProjection(feature.MultiStreamProjection{Name: "ship-on-place", Apply: map[string]feature.ApplyFunc{
			"order.placed": func(ctx feature.ApplyContext, e feature.Event) error {
				p, err := feature.Decode[placed](e)
				if err != nil {
					return err
				}
				return ctx.Publish("order.shipped", OrderShipped{OrderID: p.OrderID})
			},
		}})
		r.OnIntegrationEvent("order.shipped", "seen", func(ctx feature.CommandContext, m feature.Message) error {
			mu.Lock()
			got = append(got, m)
			mu.Unlock()
			return nil
		})
	})
	app := kumikotest.NewApp(t, []*feature.Feature{f})
	svc, err := integration.New(app.Executor, app.Store, integration.Config{})
	require.NoError(t, err)
	relay, _ := svc.Relay()
	d, err := consumer.New(app.Store, consumer.Config{InstanceID: "msp"}, append(app.Executor.Consumers(), relay)...)
	require.NoError(t, err)
	require.NoError(t, d.Register(ctx))
	_, err = app.Executor.Command(ctx, alice, pipeline.Request{Type: "order.place", Payload: []byte(`{"orderId":"o-9"}`)})
	require.NoError(t, err)

	kumikotest.CatchUp(t, d, integration.RelayName)
	require.Empty(t, got, "nothing is published before the projection's pass")
	kumikotest.CatchUp(t, d, "ship-on-place", integration.RelayName)
	require.Len(t, got, 1)
	var placedID int64
	require.NoError(t, app.Pool.QueryRow(ctx, "SELECT id FROM kumiko_events WHERE type = 'order.placed'").Scan(&placedID))
	require.Equal(t, strconv.FormatInt(placedID, 10), got[0].CausationID)
	require.Equal(t, alice.User.TenantID, got[0].TenantID)
	require.Equal(t, alice.User.ID, got[0].UserID)
	require.Equal(t, alice.CorrelationID, got[0].CorrelationID)
}

package integration_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/consumer"
	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/integration"
	"github.com/kumiko-go/kumiko/internal/lifecycle"
	"github.com/kumiko-go/kumiko/kumikotest"
)

// stuck makes a handler block, ignoring its context, while blocking is
// set: it signals entered, then waits for release.
type stuck struct {
	blocking atomic.Bool
	entered  chan struct{}
	release  chan struct{}
	returned chan struct{}
}

func newStuck(t *testing.T) *stuck {
	s := &stuck{entered: make(chan struct{}, 10), release: make(chan struct{}), returned: make(chan struct{}, 10)}
	s.blocking.Store(true)
	t.Cleanup(s.unblock)
	return s
}

func (s *stuck) hold() {
	if !s.blocking.Load() {
		return
	}
	s.entered <- struct{}{}
	<-s.release
	s.returned <- struct{}{}
}

func (s *stuck) unblock() {
	if s.blocking.CompareAndSwap(true, false) {
		close(s.release)
	}
}

// bound is what a part's stop may take past its deadline.
const bound = lifecycle.Grace + time.Second

// An in-process handler that ignores its context and never returns: the
// dispatcher's Stop gives up on the relay's pass and the service's Stop
// names the handler, both within their deadline + Grace; nothing of the
// handler commits, the relay's cursor stays before the message, and the
// next start delivers it to the handler.
func TestStopAbandonsABlockedHandlerInProcess(t *testing.T) {
	t.Parallel()
	e := newEnv(t, integration.Config{})
	s := newStuck(t)
	e.shop.hold = s.hold
	require.NoError(t, e.svc.Start(ctx))
	require.NoError(t, e.events.Start(ctx))
	require.NoError(t, e.ship(t, alice, ShipOrder{OrderID: "stuck"}))
	<-s.entered

	const timeout = 300 * time.Millisecond
	sctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	began := time.Now()
	err := e.events.Stop(sctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorContains(t, err, integration.RelayName)
	err = e.svc.Stop(sctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorContains(t, err, "record (message "+e.message(t).ID.String()+")")
	require.Less(t, time.Since(began), timeout+bound, "both stops are bounded, sharing the grace")
	relayCursor := func() int {
		return e.Count(t, "SELECT last_processed_event_id FROM kumiko_event_consumers WHERE name = $1", integration.RelayName)
	}
	require.Zero(t, relayCursor(), "the relay did not move past the message")

	s.unblock()
	<-s.returned
	// The next start delivers the message to both handlers.
	svc, err := integration.New(e.Executor, e.Store, integration.Config{})
	require.NoError(t, err)
	relay, _ := svc.Relay()
	d, err := consumer.New(e.Store, consumer.Config{InstanceID: "test-2"}, relay)
	require.NoError(t, err)
	require.NoError(t, d.Register(ctx))
	kumikotest.CatchUp(t, d, integration.RelayName)
	require.Equal(t, 2, e.Count(t, "SELECT count(*) FROM received WHERE order_id = 'stuck'"))
	require.Equal(t, 2, e.Count(t, "SELECT count(*) FROM kumiko_inbox"))
	require.Equal(t, 2, e.shop.callsOf("record"), "the abandoned handler's inbox row rolled back: it ran again")
	require.Positive(t, relayCursor())
}

// A RabbitMQ delivery whose handler ignores its context and never returns:
// Stop returns within its deadline + Grace naming the message, cancels the
// handler's context and closes the connection, so the broker returns the
// message to the queue; nothing of the handler commits, and another
// instance handles the message.
func TestRabbitStopAbandonsABlockedHandler(t *testing.T) {
	t.Parallel()
	br := newBroker(t, rabbitURL())
	s := newStuck(t)
	var sawCancel atomic.Bool
	billing := receiverApp(t, feature.Define("billing", func(r *feature.Registrar) {
		contracts(r)
		r.OnIntegrationEvent("order.shipped", "invoice", func(ctx feature.CommandContext, m feature.Message) error {
			if _, err := ctx.DB().Exec(ctx.Context(), `INSERT INTO received (message_id, handler) VALUES ($1, 'invoice')`, m.ID); err != nil {
				return err
			}
			s.hold()
			if ctx.Context().Err() != nil {
				sawCancel.Store(true)
			}
			return nil
		})
	}))
	first, err := integration.New(billing.Executor, billing.Store, integration.Config{Transport: br.transport(t, "billing", 0)})
	require.NoError(t, err)
	require.NoError(t, first.Start(ctx))
	orders := publisher(t, br.transport(t, "orders", 0))
	publish(t, orders, alice, "order.shipped", "alice-stuck", false)
	<-s.entered

	const timeout = 300 * time.Millisecond
	sctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	began := time.Now()
	err = first.Stop(sctx)
	require.Less(t, time.Since(began), timeout+bound, "Stop is bounded")
	require.True(t, errors.Is(err, context.DeadlineExceeded), "%v", err)
	require.ErrorContains(t, err, "rabbitmq: abandoned the handling of message order.shipped")
	require.ErrorContains(t, err, "invoice (message ")

	s.unblock()
	<-s.returned
	require.True(t, sawCancel.Load(), "the abandoned handler's context was cancelled")
	// The broker has the message back; another instance handles it.
	instance(t, billing, br.transport(t, "billing", 0))
	waitRows(t, billing, 1, "SELECT count(*) FROM received")
	require.Equal(t, 1, billing.Count(t, "SELECT count(*) FROM kumiko_inbox"))
}

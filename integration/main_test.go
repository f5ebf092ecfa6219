package integration_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/kumiko-go/kumiko/consumer"
	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/integration"
	"github.com/kumiko-go/kumiko/kumikotest"
	"github.com/kumiko-go/kumiko/pipeline"
)

func TestMain(m *testing.M) {
	if raw := os.Getenv(childReceiverEnv); raw != "" {
		runChildReceiver(raw) // a subprocess of TestRabbitReceiverKilledMidHandler
		return
	}
	goleak.VerifyTestMain(m)
}

var (
	ctx     = context.Background()
	tenantA = uuid.MustParse("0190a000-0000-7000-8000-00000000000a")
	tenantB = uuid.MustParse("0190b000-0000-7000-8000-00000000000b")
	alice   = kumikotest.User(tenantA, "alice", "User")
	bob     = kumikotest.User(tenantB, "bob", "User")
)

// OrderShipped is the contract the test apps share.
type OrderShipped struct {
	OrderID string `json:"orderId" validate:"required"`
	// Poison makes the "flaky" handler fail while the shop's poison switch
	// is on.
	Poison bool `json:"poison,omitempty"`
}

// ShipOrder publishes order.shipped; Fail makes the command fail after
// publishing, so its transaction rolls back.
type ShipOrder struct {
	OrderID string `json:"orderId" validate:"required"`
	Poison  bool   `json:"poison,omitempty"`
	Fail    bool   `json:"fail,omitempty"`
}

// shop is a test app: a command that publishes order.shipped, and two
// handlers of it that record what they see in the table received, keyed by
// (message, handler) so a second run of a handler fails loudly.
type shop struct {
	// poison, while set, makes the handler "flaky" fail on messages with
	// Poison.
	poison atomic.Bool
	// calls counts handler runs by handler name.
	mu    sync.Mutex
	calls map[string]int
	// hold, when set, is called by "record" before it writes.
	hold func()
}

func newShop() *shop { return &shop{calls: map[string]int{}} }

func (s *shop) feature() *feature.Feature {
	return feature.Define("shop", func(r *feature.Registrar) {
		r.IntegrationEvent("order.shipped", OrderShipped{})
		feature.HandleCommand(r, "order.ship", feature.AnyUser(), func(ctx feature.CommandContext, in ShipOrder) (any, error) {
			if err := ctx.Publish("order.shipped", OrderShipped{OrderID: in.OrderID, Poison: in.Poison}); err != nil {
				return nil, err
			}
			if in.Fail {
				return nil, errors.New("refused after publishing")
			}
			return nil, nil
		})
		r.OnIntegrationEvent("order.shipped", "record", func(ctx feature.CommandContext, m feature.Message) error {
			s.count("record")
			if s.hold != nil {
				s.hold()
			}
			return s.record(ctx, m, "record")
		})
		r.OnIntegrationEvent("order.shipped", "flaky", func(ctx feature.CommandContext, m feature.Message) error {
			s.count("flaky")
			var p OrderShipped
			if err := m.Decode(&p); err != nil {
				return err
			}
			if p.Poison && s.poison.Load() {
				return errors.New("poisoned")
			}
			return s.record(ctx, m, "flaky")
		})
	})
}

func (s *shop) count(handler string) {
	s.mu.Lock()
	s.calls[handler]++
	s.mu.Unlock()
}

func (s *shop) callsOf(handler string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[handler]
}

// record writes what the handler saw in the handler's transaction.
func (s *shop) record(ctx feature.CommandContext, m feature.Message, handler string) error {
	var p OrderShipped
	if err := m.Decode(&p); err != nil {
		return err
	}
	_, err := ctx.DB().Exec(ctx.Context(), `INSERT INTO received (message_id, handler, order_id, tenant_id, user_id, correlation_id, causation_id, scope)
VALUES ($1, $2, $3, $4, $5, $6, $7, current_setting('kumiko.tenant_id'))`,
		m.ID, handler, p.OrderID, ctx.Tenant(), ctx.User().ID, ctx.CorrelationID(), m.ID.String())
	return err
}

// env is a shop on a test database with the integration service and a
// dispatcher holding only the relay.
type env struct {
	*kumikotest.App
	shop   *shop
	svc    *integration.Service
	events *consumer.Dispatcher
}

func newEnv(t *testing.T, cfg integration.Config) *env {
	t.Helper()
	s := newShop()
	app := kumikotest.NewApp(t, []*feature.Feature{s.feature()})
	app.Exec(t, `CREATE TABLE received (message_id uuid, handler text, order_id text, tenant_id uuid, user_id text,
correlation_id text, causation_id text, scope text, seq bigserial, PRIMARY KEY (message_id, handler))`)
	if cfg.RetryBackoff == 0 {
		cfg.RetryBackoff = 1 // a nanosecond: the retries' count matters here, not their pace
	}
	svc, d := withRelay(t, app, cfg)
	return &env{App: app, shop: s, svc: svc, events: d}
}

// withRelay is app's integration service with cfg and a dispatcher holding
// only its relay, registered, not started: the test catches the relay up.
func withRelay(t *testing.T, app *kumikotest.App, cfg integration.Config) (*integration.Service, *consumer.Dispatcher) {
	t.Helper()
	svc, err := integration.New(app.Executor, app.Store, cfg)
	require.NoError(t, err)
	relay, ok := svc.Relay()
	require.True(t, ok)
	d, err := consumer.New(app.Store, consumer.Config{InstanceID: "test"}, relay)
	require.NoError(t, err)
	require.NoError(t, d.Register(ctx))
	return svc, d
}

func (e *env) ship(t *testing.T, c pipeline.Caller, in ShipOrder) error {
	t.Helper()
	payload := fmt.Sprintf(`{"orderId":%q,"poison":%t,"fail":%t}`, in.OrderID, in.Poison, in.Fail)
	_, err := e.Executor.Command(ctx, c, pipeline.Request{Type: "order.ship", Payload: []byte(payload)})
	return err
}

func (e *env) relay(t *testing.T) { t.Helper(); kumikotest.CatchUp(t, e.events, integration.RelayName) }

// message is the one message the shop published, as the relay reads it.
func (e *env) message(t *testing.T) feature.Message {
	t.Helper()
	var m feature.Message
	require.NoError(t, e.Pool.QueryRow(ctx, `SELECT aggregate_id, type, event_version, payload, tenant_id,
  coalesce(metadata->>'userId', ''), coalesce(metadata->>'correlationId', '') FROM kumiko_events WHERE aggregate_type = $1`,
		pipeline.MessageStream).Scan(&m.ID, &m.Type, &m.Version, &m.Payload, &m.TenantID, &m.UserID, &m.CorrelationID))
	return m
}

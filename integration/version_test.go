package integration_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/consumer"
	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/integration"
	"github.com/kumiko-go/kumiko/kumikotest"
	"github.com/kumiko-go/kumiko/pipeline"
	"github.com/kumiko-go/kumiko/registry"
)

// Three releases of the contract "order.placed", as the shared contracts
// package would hold them over time: v2 renamed orderId to order and added
// currency, v3 added channel.
type PlacedV1 struct {
	OrderID string `json:"orderId" validate:"required"`
}

type PlacedV2 struct {
	Order    string `json:"order" validate:"required"`
	Currency string `json:"currency" validate:"required"`
}

type PlacedV3 struct {
	Order    string `json:"order" validate:"required"`
	Currency string `json:"currency" validate:"required"`
	Channel  string `json:"channel" validate:"required"`
}

// placedContract declares release v of the contract with its migrations.
func placedContract(r *feature.Registrar, v int) {
	switch v {
	case 1:
		r.IntegrationEvent("order.placed", PlacedV1{})
	case 2:
		r.IntegrationEvent("order.placed", PlacedV2{}, feature.EventVersion(2))
		r.EventMigration("order.placed", 1, 2, feature.Rename("orderId", "order"), feature.DefaultValue("currency", "EUR"))
	case 3:
		r.IntegrationEvent("order.placed", PlacedV3{}, feature.EventVersion(3))
		r.EventMigration("order.placed", 1, 2, feature.Rename("orderId", "order"), feature.DefaultValue("currency", "EUR"))
		r.EventMigration("order.placed", 2, 3, feature.DefaultValue("channel", "unknown"))
	}
}

// Place is the command publishing order.placed.
type Place struct {
	Order string `json:"order" validate:"required"`
}

// placing is release v of an app that publishes order.placed with the
// command order.place, and handles it with "book", which records the
// payload as it sees it: "<order> <currency> <channel> v<version> from
// v<published version>".
func placing(name string, v int, publishes, handles bool) *feature.Feature {
	return feature.Define(name, func(r *feature.Registrar) {
		placedContract(r, v)
		if handles {
			r.OnIntegrationEvent("order.placed", "book", book)
		}
		if !publishes {
			return
		}
		feature.HandleCommand(r, "order.place", feature.AnyUser(), func(ctx feature.CommandContext, in Place) (any, error) {
			switch v {
			case 1:
				return nil, ctx.Publish("order.placed", PlacedV1{OrderID: in.Order})
			case 2:
				return nil, ctx.Publish("order.placed", PlacedV2{Order: in.Order, Currency: "USD"})
			}
			return nil, ctx.Publish("order.placed", PlacedV3{Order: in.Order, Currency: "USD", Channel: "shop"})
		})
	})
}

func book(ctx feature.CommandContext, m feature.Message) error {
	var p PlacedV3 // a v2 handler finds no channel
	if err := m.Decode(&p); err != nil {
		return err
	}
	published := m.PublishedVersion
	if published == 0 {
		published = m.Version
	}
	seen := fmt.Sprintf("%s %s %s v%d from v%d", p.Order, p.Currency, p.Channel, m.Version, published)
	_, err := ctx.DB().Exec(ctx.Context(), `INSERT INTO received (message_id, handler, order_id, tenant_id, user_id)
VALUES ($1, 'book', $2, $3, $4)`, m.ID, seen, ctx.Tenant(), ctx.User().ID)
	return err
}

func place(t *testing.T, app *kumikotest.App, order string) {
	t.Helper()
	_, err := app.Executor.Command(ctx, alice, pipeline.Request{Type: "order.place", Payload: fmt.Appendf(nil, `{"order":%q}`, order)})
	require.NoError(t, err)
}

// sameDB is another release of the app on db: features compiled into a
// registry of their own, with an executor and a store that upcasts with it.
func sameDB(t *testing.T, db *kumikotest.DB, features ...*feature.Feature) *kumikotest.App {
	t.Helper()
	reg, err := registry.Build(features...)
	require.NoError(t, err)
	store, err := eventstore.New(db.Pool, eventstore.Config{Schema: db.Schema, Upcaster: reg})
	require.NoError(t, err)
	exec, err := pipeline.New(reg, store, pipeline.Config{})
	require.NoError(t, err)
	require.NoError(t, exec.EnsureSchema(ctx))
	return &kumikotest.App{DB: &kumikotest.DB{Pool: db.Pool, Store: store, Schema: db.Schema, URL: db.URL}, Registry: reg, Executor: exec}
}

// relayLocally runs app's relay in process until it has caught up.
func relayLocally(t *testing.T, app *kumikotest.App) *integration.Service {
	t.Helper()
	svc, err := integration.New(app.Executor, app.Store, integration.Config{RetryBackoff: 1})
	require.NoError(t, err)
	relay, ok := svc.Relay()
	require.True(t, ok)
	d, err := consumer.New(app.Store, consumer.Config{InstanceID: "relay"}, relay)
	require.NoError(t, err)
	require.NoError(t, d.Register(ctx))
	kumikotest.CatchUp(t, d, integration.RelayName)
	return svc
}

func seen(t *testing.T, app *kumikotest.App) []string {
	t.Helper()
	rows, err := app.Pool.Query(ctx, "SELECT order_id FROM received ORDER BY order_id")
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return out
}

// In process: messages the app published as v1 and relays after its
// upgrade to v3 (a backlog across a rolling upgrade) reach the handler as
// v3, through both migrations.
func TestOlderContractVersionIsUpcastOnReceiveInProcess(t *testing.T) {
	t.Parallel()
	v1 := receiverApp(t, placing("placing", 1, true, true))
	place(t, v1, "o-1") // not relayed yet

	v3 := sameDB(t, v1.DB, placing("placing", 3, true, true))
	relayLocally(t, v3)
	require.Equal(t, []string{"o-1 EUR unknown v3 from v1"}, seen(t, v3))
}

// In process: an app rolled back to v2 meets a v3 message in its outbox.
// It keeps the message dead with event_schema_unknown_version at once —
// no retries, the handler never sees it — and moves on; the app upgraded
// to v3 again retries it and handles it.
func TestNewerContractVersionIsKeptDeadInProcessUntilAnUpgradedAppRetriesIt(t *testing.T) {
	t.Parallel()
	v3 := receiverApp(t, placing("placing", 3, true, true))
	place(t, v3, "o-3") // not relayed yet

	v2 := sameDB(t, v3.DB, placing("placing", 2, true, true))
	svc2 := relayLocally(t, v2)
	place(t, v2, "o-2")
	relayLocally(t, v2)
	require.Equal(t, []string{"o-2 USD  v2 from v2"}, seen(t, v2), "the v3 message does not hold back the next one")
	dead, err := svc2.Dead().List(ctx, 10)
	require.NoError(t, err)
	require.Len(t, dead, 1)
	require.Equal(t, "book", dead[0].Handler)
	require.Equal(t, 3, dead[0].Message.Version)
	require.Equal(t, 1, dead[0].Attempts, "an unknown version is not retried")
	require.Contains(t, dead[0].LastError, "event_schema_unknown_version")
	require.Contains(t, dead[0].LastError, "this app knows version 2")

	require.ErrorContains(t, svc2.Dead().Retry(ctx, dead[0].Message.ID, ""), "event_schema_unknown_version", "the v2 app still cannot")

	svc3, err := integration.New(v3.Executor, v3.Store, integration.Config{})
	require.NoError(t, err)
	require.NoError(t, svc3.Dead().Retry(ctx, dead[0].Message.ID, ""))
	require.Equal(t, []string{"o-2 USD  v2 from v2", "o-3 USD shop v3 from v3"}, seen(t, v3))
	dead, err = svc3.Dead().List(ctx, 10)
	require.NoError(t, err)
	require.Empty(t, dead)
}

// Over RabbitMQ: a sender still on v1 and a receiver on v2 (apps upgrade
// one at a time): the receiver's handler gets v2.
func TestOlderContractVersionIsUpcastOnReceiveOverRabbit(t *testing.T) {
	t.Parallel()
	br := newBroker(t, rabbitURL())
	billing := receiverApp(t, placingReceiver(2))
	instance(t, billing, br.transport(t, "billing", 0))
	sender := publisherOf(t, kumikotest.NewApp(t, []*feature.Feature{placing("placing", 1, true, false)}),
		integration.Config{Transport: br.transport(t, "orders", 0)})

	place(t, sender, "o-1")
	waitRows(t, billing, 1, "SELECT count(*) FROM received")
	require.Equal(t, []string{"o-1 EUR  v2 from v1"}, seen(t, billing))
}

// Over RabbitMQ: a sender already on v3 and a receiver still on v2: the
// message goes to <queue>.dead at once with event_schema_unknown_version;
// the receiver upgraded to v3 retries it and handles it.
func TestNewerContractVersionIsKeptDeadOverRabbitUntilAnUpgradedAppRetriesIt(t *testing.T) {
	t.Parallel()
	br := newBroker(t, rabbitURL())
	billing := receiverApp(t, placingReceiver(2))
	old := instance(t, billing, br.transport(t, "billing", 5))
	sender := publisherOf(t, kumikotest.NewApp(t, []*feature.Feature{placing("placing", 3, true, false)}),
		integration.Config{Transport: br.transport(t, "orders", 0)})

	place(t, sender, "o-3")
	var dead []integration.DeadMessage
	require.Eventually(t, func() bool {
		var err error
		dead, err = old.Dead().List(ctx, 10)
		require.NoError(t, err)
		return len(dead) == 1
	}, 30*time.Second, 20*time.Millisecond)
	require.Equal(t, 1, dead[0].Attempts, "an unknown version is not redelivered")
	require.Contains(t, dead[0].LastError, "event_schema_unknown_version")
	require.Equal(t, 3, dead[0].Message.Version)
	require.False(t, dead[0].DeadAt.IsZero())
	require.Zero(t, billing.Count(t, "SELECT count(*) FROM received"))
	require.NoError(t, old.Stop(context.Background()))

	upgraded := sameDB(t, billing.DB, placingReceiver(3))
	svc := instance(t, upgraded, br.transport(t, "billing", 5))
	require.NoError(t, svc.Dead().Retry(ctx, dead[0].Message.ID, ""))
	waitRows(t, upgraded, 1, "SELECT count(*) FROM received")
	require.Equal(t, []string{"o-3 USD shop v3 from v3"}, seen(t, upgraded))
}

// placingReceiver is release v of an app that only handles order.placed.
func placingReceiver(v int) *feature.Feature { return placing("billing", v, false, true) }

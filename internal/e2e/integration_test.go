package e2e_test

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/integration"
)

// rabbitURL is the broker: RABBITMQ_URL, else the local one.
func rabbitURL() string {
	if u := os.Getenv("RABBITMQ_URL"); u != "" {
		return u
	}
	return integration.DefaultRabbitURL
}

// queueState is what the broker says of a queue.
func queueState(ch *amqp.Channel, name string) (messages, consumers int, err error) {
	q, err := ch.QueueDeclarePassive(name, true, false, false, false, amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeQuorum})
	return q.Messages, q.Consumers, err
}

// Two apps on their own databases, the orders sample's feature under serve
// and billing's under worker, with RABBITMQ_URL: an order shipped over
// HTTP in one is invoiced by the other through the broker. The apps are
// e2eapp with names unique to the run, so their queues are too.
func TestIntegrationEventsOverRabbitMQ(t *testing.T) {
	t.Parallel()
	reserve(t, 2)
	url := rabbitURL()
	conn, err := amqp.Dial(url)
	require.NoError(t, err, "RabbitMQ at %s must be running (make services)", url)
	t.Cleanup(func() { _ = conn.Close() })
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	prefix := "e2e-" + hex.EncodeToString(b)
	t.Cleanup(func() {
		ch, err := conn.Channel()
		require.NoError(t, err)
		defer ch.Close()
		for _, app := range []string{"orders", "billing"} {
			for _, q := range []string{prefix + "-" + app, prefix + "-" + app + ".dead"} {
				_, err := ch.QueueDelete(q, false, false, false)
				require.NoError(t, err, q)
			}
		}
	})

	billing := newApp(t, "e2eapp", "E2E_FEATURES=billing", "E2E_NAME="+prefix+"-billing", "RABBITMQ_URL="+url)
	billing.worker(t, "billing-w")
	orders := newApp(t, "e2eapp", "E2E_FEATURES=orders", "E2E_NAME="+prefix+"-orders", "RABBITMQ_URL="+url)
	shop := orders.serve(t, "orders-1")

	ch, err := conn.Channel()
	require.NoError(t, err)
	t.Cleanup(func() { _ = ch.Close() })
	queue := prefix + "-billing"
	waitFor(t, 20*time.Second, "billing consumes its queue", func() (bool, string) {
		_, consumers, err := queueState(ch, queue)
		if err != nil { // the passive declare of a missing queue closes the channel
			if ch, err = conn.Channel(); err != nil {
				return false, err.Error()
			}
			return false, "no queue yet"
		}
		return consumers > 0, fmt.Sprint(consumers, " consumers")
	})

	tenant := uuid.New()
	clerk := orders.as(t, shop, tenant, "clerk", "User")
	order := ok[entity](clerk.write("order.create", map[string]any{"customer": "ACME", "total": 120.5}))
	ok[entity](clerk.command("order.ship", map[string]any{"id": order.ID, "version": 1}))

	waitFor(t, 30*time.Second, "the other app invoices the shipped order", countIs(t, billing.db, 1,
		"SELECT count(*) FROM read_invoice WHERE order_id = $1 AND tenant_id = $2 AND customer = 'ACME' AND amount = 120.5", order.ID, tenant))
	waitFor(t, 10*time.Second, "the broker has handed the message over and it was acknowledged", func() (bool, string) {
		msgs, _, err := queueState(ch, queue)
		return err == nil && msgs == 0, fmt.Sprint(msgs, " messages, ", err)
	})
	dead, _, err := queueState(ch, queue+".dead")
	require.NoError(t, err)
	require.Zero(t, dead, "nothing dead-lettered")
	require.Equal(t, 1, billing.db.Count(t, "SELECT count(*) FROM read_invoice WHERE tenant_id = $1", tenant), "one invoice: the message handled once")
}

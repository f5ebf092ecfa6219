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

// broker connects to the broker for one test and returns the connection
// and a name prefix unique to the run, so the test's queues are its own;
// deleteQueues deletes them when the test ends.
func broker(t *testing.T) (*amqp.Connection, string) {
	t.Helper()
	url := rabbitURL()
	conn, err := amqp.Dial(url)
	require.NoError(t, err, "RabbitMQ at %s must be running (make services)", url)
	t.Cleanup(func() { _ = conn.Close() })
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return conn, "e2e-" + hex.EncodeToString(b)
}

// deleteQueues deletes queues when the test ends (before conn closes).
func deleteQueues(t *testing.T, conn *amqp.Connection, queues ...string) {
	t.Helper()
	t.Cleanup(func() {
		ch, err := conn.Channel()
		require.NoError(t, err)
		defer ch.Close()
		for _, q := range queues {
			_, err := ch.QueueDelete(q, false, false, false)
			require.NoError(t, err, q)
		}
	})
}

// waitConsumed waits until queue exists and has a consumer; it returns a
// channel on conn, closed when the test ends.
func waitConsumed(t *testing.T, conn *amqp.Connection, queue, what string) *amqp.Channel {
	t.Helper()
	ch, err := conn.Channel()
	require.NoError(t, err)
	t.Cleanup(func() { _ = ch.Close() })
	waitFor(t, 20*time.Second, what, func() (bool, string) {
		_, consumers, err := queueState(ch, queue)
		if err != nil { // the passive declare of a missing queue closes the channel
			if ch, err = conn.Channel(); err != nil {
				return false, err.Error()
			}
			return false, "no queue yet"
		}
		return consumers > 0, fmt.Sprint(consumers, " consumers")
	})
	return ch
}

// Two apps on their own databases, the orders sample's feature under serve
// and billing's under worker, with RABBITMQ_URL: an order shipped over
// HTTP in one is invoiced by the other through the broker. The apps are
// e2eapp with names unique to the run, so their queues are too.
func TestIntegrationEventsOverRabbitMQ(t *testing.T) {
	t.Parallel()
	reserve(t, 2)
	url := rabbitURL()
	conn, prefix := broker(t)
	deleteQueues(t, conn, prefix+"-orders", prefix+"-orders.dead", prefix+"-billing", prefix+"-billing.dead")

	billing := newApp(t, "e2eapp", "E2E_FEATURES=billing", "E2E_NAME="+prefix+"-billing", "RABBITMQ_URL="+url)
	billing.worker(t, "billing-w")
	orders := newApp(t, "e2eapp", "E2E_FEATURES=orders", "E2E_NAME="+prefix+"-orders", "RABBITMQ_URL="+url)
	shop := orders.serve(t, "orders-1")

	queue := prefix + "-billing"
	ch := waitConsumed(t, conn, queue, "billing consumes its queue")

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

// An app whose handler asks for order (e2eapp's ledger) runs as two worker
// processes: eight streams of a foreign publisher, interleaved, are each
// handled in publish order, once, although the worker that receives is
// killed (SIGKILL) on the way and the other takes over.
func TestOrderedIntegrationHandlingAcrossWorkers(t *testing.T) {
	t.Parallel()
	reserve(t, 2)
	url := rabbitURL()
	conn, prefix := broker(t)
	queue := prefix + "-ledger"
	deleteQueues(t, conn, queue+".ordered", queue+".dead")
	ledger := newApp(t, "e2eapp", "E2E_FEATURES=ledger", "E2E_NAME="+queue, "RABBITMQ_URL="+url)
	ledger.db.Exec(t, `CREATE TABLE e2e_steps (n bigserial PRIMARY KEY, stream text NOT NULL, seq int NOT NULL, pid int NOT NULL)`)
	first := ledger.worker(t, "ledger-1")
	ch := waitConsumed(t, conn, queue+".ordered", "the first worker consumes the ordered queue")
	ledger.worker(t, "ledger-2")

	const streams, perStream = 8, 100
	require.NoError(t, ch.Confirm(false))
	tenant := uuid.New()
	next := make([]int, streams)
	// publish sends messages from to to-1 of the run, interleaved over the
	// streams with each stream's seqs in order, and waits for the confirms.
	publish := func(from, to int) {
		var pending []*amqp.DeferredConfirmation
		for i := from; i < to; i++ {
			s := (i*5 + i/streams) % streams
			for next[s] == perStream {
				s = (s + 1) % streams
			}
			body := fmt.Sprintf(`{"stream":"s%d","seq":%d}`, s, next[s])
			next[s]++
			dc, err := ch.PublishWithDeferredConfirmWithContext(t.Context(), integration.DefaultExchange, "e2e.step", false, false, amqp.Publishing{
				Headers: amqp.Table{"kumiko-tenant": tenant.String()}, ContentType: "application/json",
				DeliveryMode: amqp.Persistent, MessageId: fmt.Sprintf("step-%d", i), Body: []byte(body),
			})
			require.NoError(t, err)
			pending = append(pending, dc)
		}
		for _, dc := range pending {
			ok, err := dc.WaitContext(t.Context())
			require.NoError(t, err)
			require.True(t, ok)
		}
	}
	total := streams * perStream
	publish(0, total*3/4)
	waitFor(t, 60*time.Second, "the first worker handles some", func() (bool, string) {
		n := ledger.db.Count(t, "SELECT count(*) FROM e2e_steps")
		return n >= total/8, fmt.Sprint(n, " handled")
	})
	first.kill9()
	publish(total*3/4, total)
	waitFor(t, 60*time.Second, "the other worker handles the rest", countIs(t, ledger.db, total, "SELECT count(*) FROM e2e_steps"))
	require.Equal(t, 2, ledger.db.Count(t, "SELECT count(DISTINCT pid) FROM e2e_steps"), "both workers handled steps")
	require.Zero(t, ledger.db.Count(t, `SELECT count(*) FROM (
  SELECT seq, row_number() OVER (PARTITION BY stream ORDER BY n) - 1 AS pos FROM e2e_steps) s WHERE seq <> pos`),
		"each stream's steps were handled in publish order, each once")
}

package integration_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/integration"
)

// channel opens a channel on a connection of its own, closed when the
// test ends.
func (b broker) channel(t *testing.T) *amqp.Channel {
	t.Helper()
	conn, err := amqp.Dial(b.url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	require.NoError(t, err)
	return ch
}

// sendRaw publishes p to the test's exchange as a foreign publisher would,
// with publisher confirms.
func (b broker) sendRaw(t *testing.T, routingKey string, p amqp.Publishing) {
	t.Helper()
	ch := b.channel(t)
	require.NoError(t, ch.Confirm(false))
	dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, b.exchange, routingKey, false, false, p)
	require.NoError(t, err)
	ok, err := dc.WaitContext(ctx)
	require.NoError(t, err)
	require.True(t, ok)
}

// depth is how many messages the broker holds in queue.
func (b broker) depth(t *testing.T, queue string) int {
	t.Helper()
	q, err := b.channel(t).QueueDeclarePassive(queue, true, false, false, false, nil)
	require.NoError(t, err, queue)
	return q.Messages
}

// foreign is a message as another language's client sends it: no type
// property, the version header as given (nil leaves it out).
func foreign(tenant uuid.UUID, id string, version any, body string) amqp.Publishing {
	h := amqp.Table{"kumiko-tenant": tenant.String()}
	if version != nil {
		h["kumiko-event-version"] = version
	}
	return amqp.Publishing{MessageId: id, ContentType: "application/json", DeliveryMode: amqp.Persistent, Headers: h, Body: []byte(body)}
}

// A foreign publisher's messages are handled whatever integer type (or
// string) carries the version, and without it; an id that is not a UUID
// becomes a stable one, and one without id is handled too.
func TestRabbitAcceptsForeignPublishers(t *testing.T) {
	t.Parallel()
	br := newBroker(t, rabbitURL())
	rc := &receiver{calls: map[string]int{}}
	billing := receiverApp(t, billingFeature(rc))
	instance(t, billing, br.transport(t, "billing", 0))
	tenant := alice.User.TenantID
	versions := []any{int8(1), uint8(1), int16(1), int32(1), int64(1), "1", " 1 ", float64(1), nil}
	for i, v := range versions {
		br.sendRaw(t, "order.shipped", foreign(tenant, fmt.Sprintf("node-order-%d", i), v, fmt.Sprintf(`{"orderId":"o-%d"}`, i)))
	}
	br.sendRaw(t, "order.shipped", foreign(tenant, "", nil, `{"orderId":"no-id"}`))
	want := 2 * (len(versions) + 1)
	waitRows(t, billing, want, "SELECT count(*) FROM received WHERE tenant_id = $1", tenant)
	require.Equal(t, 2, billing.Count(t, "SELECT count(*) FROM received WHERE message_id = $1 AND order_id = 'o-0'",
		integration.MessageID("node-order-0")), "a non-UUID id is the UUID MessageID makes of it")
	require.Equal(t, integration.MessageID("node-order-0"), integration.MessageID("node-order-0"))
	require.Zero(t, br.depth(t, br.prefix+"-billing.dead"))
}

// Messages that break the wire format or the contract go dead at once,
// with an error that starts with validation_error and names the path; a
// dead message with a non-UUID id (or none) can be named, retried and
// dropped.
func TestRabbitInvalidMessagesGoDeadAtOnceAndCanBeHandled(t *testing.T) {
	t.Parallel()
	br := newBroker(t, rabbitURL())
	rc := &receiver{calls: map[string]int{}}
	billing := receiverApp(t, billingFeature(rc))
	svc := instance(t, billing, br.transport(t, "billing", 0))
	tenant := alice.User.TenantID

	noTenant := foreign(tenant, "bad-tenant", nil, `{"orderId":"x"}`)
	delete(noTenant.Headers, "kumiko-tenant")
	br.sendRaw(t, "order.shipped", noTenant)
	br.sendRaw(t, "order.shipped", foreign(tenant, "bad-payload", int8(1), `{"poison":true}`))
	br.sendRaw(t, "order.shipped", foreign(tenant, "bad-version", "v1", `{"orderId":"x"}`))
	br.sendRaw(t, "order.shipped", foreign(tenant, "good", int8(1), `{"orderId":"good"}`))
	waitRows(t, billing, 2, "SELECT count(*) FROM received")

	var dead []integration.DeadMessage
	require.Eventually(t, func() bool {
		var err error
		dead, err = svc.Dead().List(ctx, 10)
		require.NoError(t, err)
		return len(dead) == 3
	}, 30*time.Second, 20*time.Millisecond)
	byRaw := map[string]integration.DeadMessage{}
	for _, d := range dead {
		byRaw[d.RawID] = d
		require.Equal(t, 1, d.Attempts, "dead at once: %+v", d)
		require.True(t, strings.HasPrefix(d.LastError, "validation_error: "), d.LastError)
		require.Equal(t, integration.MessageID(d.RawID), d.Message.ID)
		require.Equal(t, "order.shipped", d.Message.Type)
	}
	require.Contains(t, byRaw["bad-tenant"].LastError, "headers.kumiko-tenant")
	require.Contains(t, byRaw["bad-payload"].LastError, "orderId")
	require.Contains(t, byRaw["bad-version"].LastError, "headers.kumiko-event-version")
	require.Zero(t, rc.callsOf("invoice order.shipped")-1, "no handler saw an invalid message")

	n, err := svc.Dead().Drop(ctx, integration.MessageID("bad-tenant"), "")
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	require.NoError(t, svc.Dead().Retry(ctx, integration.MessageID("bad-payload"), ""), "over RabbitMQ a retry puts the message back into the queue")
	require.Eventually(t, func() bool {
		dead, err = svc.Dead().List(ctx, 10)
		require.NoError(t, err)
		return len(dead) == 2
	}, 30*time.Second, 20*time.Millisecond, "the retried message is dead again, the dropped one gone")
	for _, d := range dead {
		require.NotEqual(t, "bad-tenant", d.RawID)
	}
}

// A handler that fails twice and then succeeds sees its deliveries at
// least the backoff apart; while the message waits it is in the broker's
// retry queue, not in a process: the receiver is stopped while it waits,
// and a new one gets the message.
func TestRabbitRetriesWaitInTheBroker(t *testing.T) {
	t.Parallel()
	br := newBroker(t, rabbitURL())
	var (
		mu    sync.Mutex
		calls []time.Time
	)
	flaky := feature.Define("billing", func(r *feature.Registrar) {
		contracts(r)
		r.OnIntegrationEvent("order.shipped", "flaky", func(ctx feature.CommandContext, m feature.Message) error {
			mu.Lock()
			defer mu.Unlock()
			calls = append(calls, time.Now())
			if len(calls) <= 2 {
				return fmt.Errorf("dependency away (call %d)", len(calls))
			}
			_, err := ctx.DB().Exec(ctx.Context(), `INSERT INTO received (message_id, handler, order_id, tenant_id, user_id)
VALUES ($1, 'flaky', 'x', $2, '')`, m.ID, ctx.Tenant())
			return err
		})
	})
	ncalls := func() int { mu.Lock(); defer mu.Unlock(); return len(calls) }
	billing := receiverApp(t, flaky)
	const backoff = 400 * time.Millisecond
	rabbit := func() *integration.Rabbit {
		r, err := integration.NewRabbit(integration.RabbitConfig{URL: br.url, Exchange: br.exchange, Queue: br.prefix + "-billing", RetryBackoff: backoff})
		require.NoError(t, err)
		return r
	}
	first, err := integration.New(billing.Executor, billing.Store, integration.Config{Transport: rabbit()})
	require.NoError(t, err)
	require.NoError(t, first.Start(ctx))
	br.sendRaw(t, "order.shipped", foreign(alice.User.TenantID, uuid.NewString(), int32(1), `{"orderId":"x"}`))
	require.Eventually(t, func() bool { return ncalls() == 1 }, 30*time.Second, 5*time.Millisecond)
	require.NoError(t, first.Stop(ctx))
	require.Eventually(t, func() bool { return br.depth(t, br.prefix+"-billing.retry."+backoff.String()) == 1 }, 10*time.Second, 5*time.Millisecond,
		"the waiting message is in the broker's retry queue")
	require.Zero(t, br.depth(t, br.prefix+"-billing"))

	instanceWith(t, billing, integration.Config{Transport: rabbit()})
	waitRows(t, billing, 1, "SELECT count(*) FROM received WHERE handler = 'flaky'")
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, calls, 3)
	require.GreaterOrEqual(t, calls[1].Sub(calls[0]), backoff, "the first retry waited the backoff")
	require.GreaterOrEqual(t, calls[2].Sub(calls[1]), 2*backoff, "the second waited twice as long")
	require.Zero(t, br.depth(t, br.prefix+"-billing.dead"))
}

package pipeline

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/internal/author"
	"github.com/kumiko-go/kumiko/kumikotype"
	"github.com/kumiko-go/kumiko/registry"
)

// MessageStream is the aggregate type of published integration events: each
// message is a stream of its own in kumiko_events (its id the message id,
// one event of the contract's type), so publishing never contends with
// other writers and the relay reads messages in id order like any consumer.
const MessageStream = "kumiko.message"

// MessageKeyHeader is the event header a published message keeps its
// ordering key in (feature.Message.Key): the contract's feature.MessageKey
// field, else the stream the transaction last appended to or the stream of
// the event applied. The relay sends it as the AMQP header of that name.
const MessageKeyHeader = "kumiko-key"

// Publish appends an integration event to the transaction of the context,
// as a stream of its own in the caller's tenant; it leaves the app only if
// that transaction commits. The contract's personal fields are sealed like
// an event's: the relay sends them open while their subject's key exists,
// as null once the subject is forgotten. The message's headers carry the trace context
// of the publishing span, so the relay's and the handlers' spans continue
// its trace.
func (cc *commandContext) Publish(event string, payload any) error {
	c, ok := cc.d.reg.Contract(event)
	if !ok {
		return newError(CodeInternal, kumikotype.ReasonUnknownIntegrationEvent, "internal error",
			fmt.Errorf("feature %s publishes %q, which is not an integration event of the app", cc.feature, event))
	}
	raw, err := encodeAny(payload)
	if err != nil {
		return fmt.Errorf("publish %s: %w", event, err)
	}
	decoded, err := cc.d.reg.DecodePayload(event, raw)
	if err != nil {
		return err
	}
	if raw, err = json.Marshal(decoded); err != nil {
		return fmt.Errorf("publish %s: %w", event, err)
	}
	id, err := uuid.NewV7()
	if err != nil {
		return err
	}
	headers := withTraceparent(cc.ctx, cc.c.Headers)
	if key := cc.messageKey(c, raw); key != "" {
		headers = maps.Clone(headers)
		if headers == nil {
			headers = map[string]string{}
		}
		headers[MessageKeyHeader] = key
	}
	stream := eventstore.Stream{TenantID: cc.c.User.TenantID, AggregateType: MessageStream, AggregateID: id}
	personal, err := cc.d.personalFields(cc.ctx, cc.tx, event, "", c.Personal, stream, raw, nil)
	if err != nil {
		return err
	}
	res, err := cc.d.store.AppendTx(cc.ctx, cc.tx, stream, 0, eventstore.NewEvent{
		Type: event, EventVersion: c.Version, Payload: raw, Personal: personal,
		Metadata: eventstore.Metadata{
			UserID: cc.c.User.ID, RequestID: cc.c.RequestID, CorrelationID: cc.c.CorrelationID,
			CausationID: cc.causation, IdempotencyKey: cc.c.IdempotencyKey, Headers: headers,
		},
	})
	if err != nil {
		return err
	}
	cc.c.appended = append(cc.c.appended, res.Events...)
	return nil
}

// messageKey is the ordering key of a message of c with payload: the
// contract's key field, else the stream last appended to in the
// transaction, else the stream of the event applied.
func (cc *commandContext) messageKey(c registry.Contract, payload json.RawMessage) string {
	if c.Key != "" {
		return c.KeyOf(payload)
	}
	for _, ev := range slices.Backward(cc.c.appended) {
		if ev.AggregateType != MessageStream {
			return StreamKey(ev.AggregateType, ev.AggregateID)
		}
	}
	return cc.source
}

// StreamKey is the ordering key of messages published about a stream:
// "<aggregate type>/<aggregate id>".
func StreamKey(aggregateType string, id uuid.UUID) string {
	return aggregateType + "/" + id.String()
}

// RunInTx runs fn with a feature.CommandContext bound to tx, as c in c's
// tenant, for work that holds its own write transaction (integration
// handlers, jobs): fn appends, reads and publishes through it like a
// command handler of featureName. causation is recorded on every event
// appended; the transaction is scoped to the tenant like a multi-stream
// projection's (current_setting('kumiko.tenant_id')). A panic in fn is an
// error; committing or rolling back tx is the caller's.
func (d *Executor) RunInTx(ctx context.Context, tx pgx.Tx, c Caller, featureName, causation string, fn func(feature.CommandContext) error) error {
	if err := scopeTenant(ctx, tx, c.User.TenantID); err != nil {
		return err
	}
	cc := &commandContext{ctx: ctx, tx: tx, d: d, c: &c, feature: featureName, causation: causation}
	return author.Run(d.log, func() error { return fn(cc) }, "feature", featureName, "causation", causation)
}

// scopeTenant sets kumiko.tenant_id for the rest of tx: the tenant, or empty
// for the system tenant, whose events are cross-tenant.
func scopeTenant(ctx context.Context, tx pgx.Tx, tenant uuid.UUID) error {
	scope := tenant.String()
	if tenant == eventstore.SystemTenant {
		scope = ""
	}
	_, err := tx.Exec(ctx, "SELECT set_config('kumiko.tenant_id', $1, true)", scope)
	return err
}

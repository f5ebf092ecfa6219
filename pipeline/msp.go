package pipeline

import (
	"context"
	"encoding/json"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/kumiko-go/kumiko/consumer"
	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/registry"
)

// Consumers returns the jobs' event trigger (see jobs.Runner.Consumer), a
// consumer for every multi-stream projection of the registry and one for
// every search that runs on a search engine ("search.<entity>"), to run on
// a consumer.Executor. Each applies its events inside the pass transaction
// (a table-backed projection's rows commit with the cursor) and sees them
// upcast, as every read does.
func (d *Executor) Consumers() []consumer.Consumer {
	var out []consumer.Consumer
	if d.jobs != nil {
		if c, ok := d.jobs.Consumer(); ok {
			out = append(out, c)
		}
	}
	for _, m := range d.reg.MSPs() {
		table := ""
		if t, ok := m.Table(); ok {
			table = pgx.Identifier{d.schema, t.Name}.Sanitize()
		}
		out = append(out, consumer.Consumer{
			Name:            m.Name(),
			Delivery:        m.Delivery(),
			Types:           m.Events(),
			MaxAttempts:     m.MaxAttempts(),
			SkipApplyErrors: m.SkipApplyErrors(),
			StartFrom:       m.StartFrom(),
			BatchSize:       m.BatchSize(),
			StuckAfter:      m.StuckAfter(),
			HandlerTimeout:  m.HandlerTimeout(),
			Partitions:      m.Partitions(),
			PartitionKey:    partitionKey(m.PartitionBy()),
			Park:            m.Park(),
			Pipelined:       true,
			Handle: func(ctx context.Context, tx pgx.Tx, ev eventstore.Event) error {
				_, err := d.applyMSP(ctx, tx, m, table, ev)
				return err
			},
		})
	}
	return append(out, d.proj.SearchConsumers()...)
}

// partitionKey is the stream key of a projection partitioned by the
// payload field field: its value as text (a string as it is, anything else
// as JSON), or the aggregate id when the field is missing, null or empty.
// nil when field is "": the dispatcher's default, the aggregate id.
func partitionKey(field string) func(eventstore.Event) string {
	if field == "" {
		return nil
	}
	return func(ev eventstore.Event) string {
		var payload map[string]json.RawMessage
		if json.Unmarshal(ev.Payload, &payload) == nil {
			raw := payload[field]
			var s string
			switch {
			case len(raw) == 0 || string(raw) == "null":
			case json.Unmarshal(raw, &s) == nil:
				if s != "" {
					return s
				}
			default:
				return string(raw)
			}
		}
		return ev.AggregateID.String()
	}
}

// applyMSP runs a projection's apply function for ev, writing to table, and
// returns how many events the apply appended. Events it appends are caused by
// ev, inherit its correlation id, run as its user in its tenant, and must be
// events the projection's feature may emit.
func (d *Executor) applyMSP(ctx context.Context, tx pgx.Tx, m *registry.MSP, table string, ev eventstore.Event) (int, error) {
	apply, ok := m.Apply(ev.Type)
	if !ok {
		return 0, nil
	}
	// Scope the transaction to the event's tenant for row-level security
	// policies and the projection's own SQL. SET LOCAL semantics: it ends
	// with the pass.
	if err := scopeTenant(ctx, tx, ev.TenantID); err != nil {
		return 0, err
	}
	c := &Caller{
		User:          feature.User{ID: ev.Metadata.UserID, TenantID: ev.TenantID, Authenticated: ev.Metadata.UserID != ""},
		RequestID:     ev.Metadata.RequestID,
		CorrelationID: ev.Metadata.CorrelationID,
	}
	ac := &applyContext{
		commandContext: commandContext{ctx: ctx, tx: tx, d: d, c: c, feature: m.Feature(), causation: strconv.FormatInt(ev.ID, 10),
			source: StreamKey(ev.AggregateType, ev.AggregateID)},
		table: table,
	}
	err := apply(ac, ev)
	return len(c.appended), err
}

// applyContext is the feature.ApplyContext of one multi-stream projection
// event: the command context of the event's tenant and user, in the pass
// transaction.
type applyContext struct {
	commandContext
	table string
}

var _ feature.ApplyContext = (*applyContext)(nil)

// Table is the projection's schema-qualified table, "" for side-effect
// consumers.
func (a *applyContext) Table() string { return a.table }

package pipeline_test

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/consumer"
	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/kumikotest"
)

type contactWelcomed struct {
	Channel string `json:"channel" validate:"required"`
}

// crm has a counting projection with a table and a saga that appends an
// event in reaction; flags records the reason of every note.flagged it sees.
var crm = feature.Define("crm", func(r *feature.Registrar) {
	r.Entity("contact", feature.Fields{"name": feature.Text().Required()})
	r.Crud("contact", feature.Access{Write: feature.Roles("User"), Read: feature.AnyUser()})
	r.DefineEvent("contact.welcomed", contactWelcomed{})
	r.MultiStreamProjection(feature.MultiStreamProjection{
		Name: "contact-counter",
		Table: &feature.TableDef{Name: "contact_counts", Columns: []feature.Column{
			{Name: "tenant_id", Type: "uuid", NotNull: true},
			{Name: "n", Type: "bigint", NotNull: true},
		}, PrimaryKey: []string{"tenant_id"}},
		Apply: map[string]feature.ApplyFunc{
			"contact.created": func(ctx feature.ApplyContext, e feature.Event) error {
				_, err := ctx.DB().Exec(ctx.Context(), "INSERT INTO "+ctx.Table()+` AS t (tenant_id, n) VALUES ($1, 1)
					ON CONFLICT (tenant_id) DO UPDATE SET n = t.n + 1`, ctx.Tenant())
				return err
			},
		},
	})
	r.MultiStreamProjection(feature.MultiStreamProjection{
		Name: "welcomer",
		Apply: map[string]feature.ApplyFunc{
			"contact.created": func(ctx feature.ApplyContext, e feature.Event) error {
				_, err := ctx.AppendEvent(feature.AppendSpec{AggregateID: e.AggregateID, AggregateType: "contact",
					Type: "contact.welcomed", Payload: contactWelcomed{Channel: "mail"}, ExpectedVersion: feature.AnyVersion})
				return err
			},
		},
	})
	r.MultiStreamProjection(feature.MultiStreamProjection{
		Name: "scope-log",
		Table: &feature.TableDef{Name: "scope_log", Columns: []feature.Column{
			{Name: "event_id", Type: "bigint", NotNull: true},
			{Name: "scope", Type: "text", NotNull: true},
		}, PrimaryKey: []string{"event_id"}},
		Apply: map[string]feature.ApplyFunc{
			"contact.created": func(ctx feature.ApplyContext, e feature.Event) error {
				_, err := ctx.DB().Exec(ctx.Context(), "INSERT INTO "+ctx.Table()+
					" (event_id, scope) VALUES ($1, current_setting('kumiko.tenant_id', true))", e.ID)
				return err
			},
		},
	})
	r.MultiStreamProjection(feature.MultiStreamProjection{
		Name: "flag-log",
		Table: &feature.TableDef{Name: "flag_log", Columns: []feature.Column{
			{Name: "tenant_id", Type: "uuid", NotNull: true},
			{Name: "event_id", Type: "bigint", NotNull: true},
			{Name: "reason", Type: "text"},
			{Name: "severity", Type: "text"},
		}, PrimaryKey: []string{"event_id"}},
		Apply: map[string]feature.ApplyFunc{
			"note.flagged": func(ctx feature.ApplyContext, e feature.Event) error {
				p, err := feature.Decode[NoteFlagged](e)
				if err != nil {
					return err
				}
				_, err = ctx.DB().Exec(ctx.Context(), "INSERT INTO "+ctx.Table()+" (tenant_id, event_id, reason, severity) VALUES ($1, $2, $3, $4)",
					ctx.Tenant(), e.ID, p.Reason, p.Severity)
				return err
			},
		},
	})
})

func TestMultiStreamProjections(t *testing.T) {
	t.Parallel()
	app := kumikotest.NewApp(t, []*feature.Feature{crm, notes})
	e, err := consumer.New(app.Store, consumer.Config{InstanceID: "p1"}, app.Executor.Consumers()...)
	require.NoError(t, err)
	require.NoError(t, e.Register(ctx))

	a1 := write(t, app, alice, "contact.create", `{"name":"Ann"}`)
	write(t, app, alice, "contact.create", `{"name":"Al"}`)
	write(t, app, bob, "contact.create", `{"name":"Bo"}`)
	kumikotest.CatchUp(t, e, "contact-counter", "welcomer")

	require.Equal(t, 2, app.Count(t, "SELECT n FROM contact_counts WHERE tenant_id = $1", tenantA))
	require.Equal(t, 1, app.Count(t, "SELECT n FROM contact_counts WHERE tenant_id = $1", tenantB))

	// The saga's event: caused by the created event, correlated with the
	// request that created the contact, in the contact's tenant.
	var created, causation, correlation, tenant string
	require.NoError(t, app.Pool.QueryRow(ctx, `SELECT c.id::text, w.metadata->>'causationId', w.metadata->>'correlationId', w.tenant_id::text
		FROM kumiko_events c JOIN kumiko_events w ON w.aggregate_id = c.aggregate_id AND w.type = 'contact.welcomed'
		WHERE c.type = 'contact.created' AND c.aggregate_id = $1`, a1["id"]).Scan(&created, &causation, &correlation, &tenant))
	require.Equal(t, created, causation)
	require.Equal(t, "corr-alice", correlation)
	require.Equal(t, tenantA.String(), tenant)
	require.Equal(t, 3, app.Count(t, "SELECT count(*) FROM kumiko_events WHERE type = 'contact.welcomed'"))
	detail := row(t, query(t, app, alice, "contact.detail", fmt.Sprintf(`{"id":%q}`, a1["id"])))
	require.Equal(t, float64(2), detail["version"], "the saga's event moved the contact's row version")

	// Running the passes again changes nothing: each event was applied once.
	kumikotest.CatchUp(t, e, "contact-counter", "welcomer")
	require.Equal(t, 2, app.Count(t, "SELECT n FROM contact_counts WHERE tenant_id = $1", tenantA))
	require.Equal(t, 3, app.Count(t, "SELECT count(*) FROM kumiko_events WHERE type = 'contact.welcomed'"))
}

// Live delivery upcasts: an event stored at version 1 reaches the projection
// at the current version.
func TestMultiStreamProjectionsSeeUpcastEvents(t *testing.T) {
	t.Parallel()
	app := kumikotest.NewApp(t, []*feature.Feature{crm, notes})
	e, err := consumer.New(app.Store, consumer.Config{InstanceID: "p1"}, app.Executor.Consumers()...)
	require.NoError(t, err)
	require.NoError(t, e.Register(ctx))
	n := write(t, app, alice, "note.create", `{"title":"x"}`)
	app.Exec(t, `INSERT INTO kumiko_events (aggregate_id, aggregate_type, tenant_id, version, type, event_version, payload)
		VALUES ($1, 'note', $2, 2, 'note.flagged', 1, '{"why":"spam"}')`, n["id"], tenantA)
	kumikotest.CatchUp(t, e, "flag-log")
	var reason, severity, id string
	require.NoError(t, app.Pool.QueryRow(ctx, "SELECT reason, severity, event_id::text FROM flag_log").Scan(&reason, &severity, &id))
	require.Equal(t, "spam", reason)
	require.Equal(t, "low", severity)
	_, err = strconv.Atoi(id)
	require.NoError(t, err)
}

// The pass transaction is scoped to each event's tenant (kumiko.tenant_id)
// and unscoped for events of the system tenant.
func TestMultiStreamProjectionsRunTenantScoped(t *testing.T) {
	t.Parallel()
	app := kumikotest.NewApp(t, []*feature.Feature{crm, notes})
	e, err := consumer.New(app.Store, consumer.Config{InstanceID: "p1"}, app.Executor.Consumers()...)
	require.NoError(t, err)
	require.NoError(t, e.Register(ctx))
	a := write(t, app, alice, "contact.create", `{"name":"Ann"}`)
	b := write(t, app, bob, "contact.create", `{"name":"Bo"}`)
	sys, err := app.Store.Append(ctx, eventstore.Stream{TenantID: eventstore.SystemTenant, AggregateType: "contact"}, 0,
		eventstore.NewEvent{Type: "contact.created", Payload: map[string]any{"name": "System"}})
	require.NoError(t, err)
	kumikotest.CatchUp(t, e, "scope-log")

	scopeOf := func(aggregateID any) string {
		return queryString(t, app, `SELECT s.scope FROM scope_log s JOIN kumiko_events e ON e.id = s.event_id WHERE e.aggregate_id = $1`, aggregateID)
	}
	require.Equal(t, tenantA.String(), scopeOf(a["id"]))
	require.Equal(t, tenantB.String(), scopeOf(b["id"]))
	require.Equal(t, "", scopeOf(sys.AggregateID))
}

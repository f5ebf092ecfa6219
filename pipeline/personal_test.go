package pipeline_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/kumikotest"
	"github.com/kumiko-go/kumiko/pipeline"
)

// people declares personal data: a person's name is theirs, their email
// their customer's; person.noted carries a note of the customer's.
var people = feature.Define("people", func(r *feature.Registrar) {
	r.Entity("person", feature.Fields{
		"name":       feature.Text().Required().Personal(),
		"email":      feature.Text().PersonalOf("customerId"),
		"customerId": feature.UUID(),
		"plan":       feature.Text(),
	}, feature.SnapshotEvery(2))
	r.Crud("person", feature.Access{Write: feature.AnyUser(), Read: feature.AnyUser()})
	// A projection that copies a personal value, and removes it when its
	// subject is forgotten, in the forget's transaction.
	r.Projection("person_names", feature.InlineProjection{
		Source: "person",
		Table: feature.TableDef{Name: "person_names", PrimaryKey: []string{"id"}, Columns: []feature.Column{
			{Name: "id", Type: "uuid", NotNull: true}, {Name: "tenant_id", Type: "uuid", NotNull: true}, {Name: "name", Type: "text"}}},
		Apply: map[string]feature.ProjectionApplyFunc{
			"person.created": func(ctx feature.ProjectionContext, e feature.Event) error {
				var p struct{ Name *string }
				if err := json.Unmarshal(e.Payload, &p); err != nil {
					return err
				}
				_, err := ctx.DB().Exec(ctx.Context(), "INSERT INTO "+ctx.Table()+" (id, tenant_id, name) VALUES ($1, $2, $3)", e.AggregateID, ctx.Tenant(), p.Name)
				return err
			},
			feature.SubjectForgottenEvent: func(ctx feature.ProjectionContext, e feature.Event) error {
				var p feature.SubjectForgotten
				if err := json.Unmarshal(e.Payload, &p); err != nil {
					return err
				}
				_, err := ctx.DB().Exec(ctx.Context(), "UPDATE "+ctx.Table()+" SET name = NULL WHERE id::text = $1 AND tenant_id = $2", p.Subject, ctx.Tenant())
				return err
			},
		},
	})
	type noted struct {
		Customer string `json:"customer"`
		Note     string `json:"note"`
	}
	r.DefineEvent("person.noted", noted{}, feature.Personal("note"), feature.SubjectField("customer"))
	type note struct {
		ID       uuid.UUID `json:"id"`
		Customer string    `json:"customer"`
		Note     string    `json:"note"`
	}
	feature.HandleCommand(r, "person.note", feature.AnyUser(), func(ctx feature.CommandContext, in note) (any, error) {
		_, err := ctx.AppendEvent(feature.AppendSpec{AggregateID: in.ID, AggregateType: "person", ExpectedVersion: eventstore.AnyVersion,
			Type: "person.noted", Payload: noted{Customer: in.Customer, Note: in.Note}})
		return nil, err
	})
	type forget struct {
		Subject string `json:"subject"`
	}
	feature.HandleCommand(r, "person.forget", feature.AnyUser(), func(ctx feature.CommandContext, in forget) (any, error) {
		return nil, ctx.ForgetSubject(in.Subject)
	})
})

func command(t *testing.T, app *kumikotest.App, typ, payload string) {
	t.Helper()
	_, err := app.Executor.Command(ctx, alice, req(typ, payload))
	require.NoError(t, err)
}

// stored is every stored byte of events and snapshots, as text.
func stored(t *testing.T, app *kumikotest.App) string {
	t.Helper()
	return queryString(t, app, `SELECT COALESCE((SELECT string_agg(payload::text, ' ') FROM kumiko_events), '') || ' ' ||
		COALESCE((SELECT string_agg(state::text, ' ') FROM kumiko_snapshots), '')`)
}

// Personal fields of CRUD events, command events and snapshots are stored
// sealed and read open; a subject forgotten in a command nulls its fields
// in the read rows in the same transaction and in every fold, another
// subject's stay; a personal value without a subject is refused.
func TestPersonalDataThroughTheExecutor(t *testing.T) {
	t.Parallel()
	app := kumikotest.NewApp(t, []*feature.Feature{people})
	customer := uuid.NewString()
	ada := write(t, app, alice, "person.create", fmt.Sprintf(`{"name":"Ada Lovelace","email":"ada@example.org","customerId":%q,"plan":"gold"}`, customer))
	id := ada["id"].(string)
	write(t, app, alice, "person.update", fmt.Sprintf(`{"id":%q,"version":1,"changes":{"email":"ada@lovelace.org"}}`, id))
	write(t, app, alice, "person.update", fmt.Sprintf(`{"id":%q,"version":2,"changes":{"plan":"silver"}}`, id))
	command(t, app, "person.note", fmt.Sprintf(`{"id":%q,"customer":%q,"note":"prefers mornings"}`, id, customer))
	bob := write(t, app, alice, "person.create", `{"name":"Bob Byron","plan":"gold"}`)
	require.Equal(t, 2, app.Count(t, "SELECT count(*) FROM kumiko_snapshots WHERE aggregate_id = $1", id), "snapshots at versions 2 and 4")

	dump := stored(t, app)
	for _, v := range []string{"Ada Lovelace", "ada@example.org", "ada@lovelace.org", "prefers mornings", "Bob Byron"} {
		require.NotContains(t, dump, v)
	}
	detail := row(t, query(t, app, alice, "person.detail", fmt.Sprintf(`{"id":%q}`, id)))
	require.Equal(t, "Ada Lovelace", detail["name"])
	require.Equal(t, "ada@lovelace.org", detail["email"])
	require.Equal(t, "silver", detail["plan"])
	evs, err := app.Store.Load(ctx, tenantA, uuid.MustParse(id), eventstore.LoadOptions{})
	require.NoError(t, err)
	require.Contains(t, string(evs[3].Payload), "prefers mornings")

	// The export: every personal value of a subject, in events and rows.
	exported := func(subject string) string {
		t.Helper()
		x, err := app.Executor.ExportSubject(ctx, tenantA, subject)
		require.NoError(t, err)
		var out string
		for _, e := range x.Events {
			b, _ := json.Marshal(e.Fields)
			out += fmt.Sprintf("%s v%d %s; ", e.Type, e.Version, b)
		}
		for _, r := range x.Rows {
			b, _ := json.Marshal(r.Fields)
			out += fmt.Sprintf("%s %s; ", r.Entity, b)
		}
		return out
	}
	require.Equal(t, `person.created v1 {"name":"Ada Lovelace"}; person {"name":"Ada Lovelace"}; `, exported(id))
	require.Equal(t, `person.created v1 {"email":"ada@example.org"}; person.updated v2 {"email":"ada@lovelace.org"}; `+
		`person.noted v4 {"note":"prefers mornings"}; person {"email":"ada@lovelace.org"}; `, exported(customer))
	require.Empty(t, exported("nobody"))

	// No subject, no personal value: nothing is written.
	_, err = app.Executor.Write(ctx, alice, req("person.update", fmt.Sprintf(`{"id":%q,"version":4,"changes":{"customerId":null,"email":"x@example.org"}}`, id)))
	c, perr := code(t, err)
	require.Equal(t, "validation_error", c)
	require.Equal(t, "subject_missing", perr.Reason())
	require.Equal(t, 4, app.Count(t, "SELECT count(*) FROM kumiko_events WHERE aggregate_id = $1", id))

	// Forget Ada herself, in a command: her name goes, her customer's email stays.
	require.Equal(t, "Ada Lovelace", queryString(t, app, "SELECT name FROM person_names WHERE id = $1", id))
	command(t, app, "person.forget", fmt.Sprintf(`{"subject":%q}`, id))
	require.Equal(t, 1, app.Count(t, "SELECT count(*) FROM person_names WHERE id = $1 AND name IS NULL", id), "the projection nulled its copy in the forget")
	require.Equal(t, 1, app.Count(t, `SELECT count(*) FROM kumiko_events WHERE type = 'kumiko.subject.forgotten' AND payload->>'subject' = $1
		AND aggregate_type = 'kumiko.subject' AND created_by = 'alice'`, id), "the forget appended its event, as the caller")
	detail = row(t, query(t, app, alice, "person.detail", fmt.Sprintf(`{"id":%q}`, id)))
	require.Nil(t, detail["name"])
	require.Equal(t, "ada@lovelace.org", detail["email"])
	command(t, app, "person.forget", fmt.Sprintf(`{"subject":%q}`, id)) // again: no error
	command(t, app, "person.forget", `{"subject":"nobody"}`)            // unknown: no error
	_, err = app.Executor.Command(ctx, alice, req("person.forget", `{"subject":""}`))
	c, perr = code(t, err)
	require.Equal(t, "validation_error", c)
	require.Equal(t, "invalid_subject", perr.Reason())
	err = app.Executor.ForgetSubject(ctx, tenantA, "a\x00b")
	c, perr = code(t, err)
	require.Equal(t, "validation_error", c, "a NUL is no subject")
	require.Equal(t, "invalid_subject", perr.Reason())

	// Forget the customer: the email and the note go; Bob is untouched.
	require.NoError(t, app.Executor.ForgetSubject(ctx, tenantA, customer))
	detail = row(t, query(t, app, alice, "person.detail", fmt.Sprintf(`{"id":%q}`, id)))
	require.Nil(t, detail["email"])
	require.Equal(t, "silver", detail["plan"])
	evs, err = app.Store.Load(ctx, tenantA, uuid.MustParse(id), eventstore.LoadOptions{})
	require.NoError(t, err)
	require.Len(t, evs, 4)
	var n map[string]any
	require.NoError(t, json.Unmarshal(evs[3].Payload, &n))
	require.Equal(t, map[string]any{"customer": customer, "note": nil}, n)
	require.Equal(t, "Bob Byron", row(t, query(t, app, alice, "person.detail", fmt.Sprintf(`{"id":%q}`, bob["id"])))["name"])
	require.Equal(t, `person.created v1 {"name":null}; `, exported(id), "forgotten: nulls, no rows")

	// A rebuild of the projection after the forgets equals the live table.
	live := queryString(t, app, "SELECT string_agg(id::text || '=' || COALESCE(name, 'NULL'), ',' ORDER BY id) FROM person_names")
	_, err = app.Executor.RebuildProjection(ctx, "person_names", pipeline.RebuildOptions{})
	require.NoError(t, err)
	require.Equal(t, live, queryString(t, app, "SELECT string_agg(id::text || '=' || COALESCE(name, 'NULL'), ',' ORDER BY id) FROM person_names"))
	require.Contains(t, live, id+"=NULL")

	// The fold (from the snapshot and without it) equals the forgotten row.
	snap, after, err := app.Store.LoadWithSnapshot(ctx, tenantA, uuid.MustParse(id), 1, eventstore.LoadOptions{})
	require.NoError(t, err)
	require.NotNil(t, snap)
	require.Empty(t, after)
	var state map[string]any
	require.NoError(t, json.Unmarshal(snap.State, &state))
	require.Nil(t, state["name"])
	require.Nil(t, state["email"])
}

// Steps added with OnForget run in the forget's transaction, after the key
// is gone, with the forget's tenant and subject, whether the forget comes
// from the executor or a command; their after-commit work runs only once it
// committed, and a failing step fails the forget: the key stays.
func TestForgetSteps(t *testing.T) {
	t.Parallel()
	app := kumikotest.NewApp(t, []*feature.Feature{people})
	keyed := alice
	keyed.IdempotencyKey, keyed.RequestHash = "create-ada", "h"
	ada := write(t, app, keyed, "person.create", `{"name":"Ada Lovelace","plan":"gold"}`)["id"].(string)
	bob := write(t, app, alice, "person.create", `{"name":"Bob Byron","plan":"gold"}`)["id"].(string)
	type call struct {
		tenant      uuid.UUID
		subject     string
		keysLeft    int
		committed   bool
		requestKeys []eventstore.RequestKey
	}
	var calls []*call
	fail := false
	app.Executor.OnForget(func(ctx context.Context, tx pgx.Tx, tenant uuid.UUID, subject string) error {
		c := &call{tenant: tenant, subject: subject}
		require.NoError(t, tx.QueryRow(ctx, `SELECT count(*) FROM kumiko_subject_keys WHERE tenant_id = $1 AND subject = $2`, tenant, subject).Scan(&c.keysLeft))
		var err error
		c.requestKeys, err = app.Store.SubjectRequestsTx(ctx, tx, tenant, subject)
		require.NoError(t, err)
		eventstore.TxOf(tx).AfterCommit(func() { c.committed = true })
		calls = append(calls, c)
		if fail {
			return errors.New("the other store is down")
		}
		return nil
	})

	fail = true
	require.ErrorContains(t, app.Executor.ForgetSubject(ctx, tenantA, ada), "internal error")
	require.Len(t, calls, 1)
	require.False(t, calls[0].committed, "after-commit work of a rolled back forget never runs")
	require.Equal(t, "Ada Lovelace", row(t, query(t, app, alice, "person.detail", fmt.Sprintf(`{"id":%q}`, ada)))["name"], "the key stays")

	fail = false
	require.NoError(t, app.Executor.ForgetSubject(ctx, tenantA, ada))
	command(t, app, "person.forget", fmt.Sprintf(`{"subject":%q}`, bob))
	require.Len(t, calls, 3)
	for i, subject := range []string{ada, ada, bob} {
		require.Equal(t, tenantA, calls[i].tenant)
		require.Equal(t, subject, calls[i].subject)
	}
	for i, c := range calls {
		require.Zero(t, c.keysLeft, "the step runs after the key is deleted")
		require.Equal(t, i > 0, c.committed)
	}
	require.Equal(t, []eventstore.RequestKey{{UserID: alice.User.ID, Key: "create-ada"}}, calls[1].requestKeys,
		"the keyed request that wrote Ada's data, found after her key is gone")
	require.Empty(t, calls[2].requestKeys, "Bob was written without a key")
}

// accounts is an aggregate that is no entity, whose snapshots copy the
// personal name of its events.
var accounts = feature.Define("accounts", func(r *feature.Registrar) {
	type opened struct {
		Name string `json:"name"`
	}
	r.DefineEvent("account.opened", opened{}, feature.Personal("name"))
	type open struct {
		ID   uuid.UUID `json:"id"`
		Name string    `json:"name"`
	}
	feature.HandleCommand(r, "account.open", feature.AnyUser(), func(ctx feature.CommandContext, in open) (any, error) {
		if _, err := ctx.AppendEvent(feature.AppendSpec{AggregateID: in.ID, AggregateType: "account", Type: "account.opened",
			Payload: opened{Name: in.Name}}); err != nil {
			return nil, err
		}
		return nil, ctx.SnapshotAggregate(feature.SnapshotSpec{AggregateID: in.ID, AggregateType: "account", Version: 1,
			State: map[string]any{"name": in.Name, "balance": 5}, Personal: map[string]string{"name": ""}})
	})
	type read struct {
		ID uuid.UUID `json:"id"`
	}
	feature.HandleCommand(r, "account.read", feature.AnyUser(), func(ctx feature.CommandContext, in read) (any, error) {
		snap, _, err := ctx.LoadAggregateWithSnapshot(in.ID, "account", 0)
		return snap.State, err
	})
})

// A snapshot of an aggregate that is no entity seals the fields its
// SnapshotSpec names as personal: stored sealed, read open, null once the
// subject is forgotten.
func TestPersonalFieldsOfAnotherAggregatesSnapshot(t *testing.T) {
	t.Parallel()
	app := kumikotest.NewApp(t, []*feature.Feature{accounts})
	id := uuid.New()
	command(t, app, "account.open", fmt.Sprintf(`{"id":%q,"name":"Ada Lovelace"}`, id))
	require.Equal(t, 1, app.Count(t, "SELECT count(*) FROM kumiko_snapshots WHERE aggregate_id = $1 AND personal IS NOT NULL", id))
	require.NotContains(t, stored(t, app), "Ada Lovelace")
	read := func() string {
		out, err := app.Executor.Command(ctx, alice, req("account.read", fmt.Sprintf(`{"id":%q}`, id)))
		require.NoError(t, err)
		raw, err := json.Marshal(out)
		require.NoError(t, err)
		return string(raw)
	}
	require.JSONEq(t, `{"name":"Ada Lovelace","balance":5}`, read())
	require.NoError(t, app.Executor.ForgetSubject(ctx, tenantA, id.String()))
	require.JSONEq(t, `{"name":null,"balance":5}`, read())
}

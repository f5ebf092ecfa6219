package ops_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/internal/ops"
	"github.com/kumiko-go/kumiko/kumikotest"
	"github.com/kumiko-go/kumiko/pipeline"
)

// crm keeps contacts whose email is their own personal data.
func crmFeature() *feature.Feature {
	return feature.Define("crm", func(r *feature.Registrar) {
		r.Entity("contact", feature.Fields{
			"name":  feature.Text().Required(),
			"email": feature.Text().Personal(),
		})
		r.Crud("contact", feature.Access{Write: feature.AnyUser(), Read: feature.AnyUser()})
	})
}

// newDataKey is a KUMIKO_DATA_KEY: base64 of 32 random bytes.
func newDataKey(t *testing.T) string {
	t.Helper()
	k := make([]byte, 32)
	_, err := rand.Read(k)
	require.NoError(t, err)
	return base64.StdEncoding.EncodeToString(k)
}

// localKeys is the provider of a KUMIKO_DATA_KEY value.
func localKeys(t *testing.T, s string) *eventstore.LocalKeys {
	t.Helper()
	k, err := eventstore.ParseLocalKeys(s)
	require.NoError(t, err)
	return k
}

// withDataKey runs the commands of an app of features (nil: the generic
// binary's, which reads KUMIKO_DATA_KEY from the environment) whose
// configuration sets dataKey, on app's database, in this process.
func withDataKey(app *kumikotest.App, features []*feature.Feature, dataKey string) func(args ...string) (string, error) {
	return func(args ...string) (string, error) {
		root := ops.Generic()
		if features != nil {
			root = ops.NewCommand(ops.App{Name: "crm", Features: features,
				Resolve: func(s ops.Settings) ops.Settings { s.Name, s.DataKey = "crm", dataKey; return s }})
		}
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&bytes.Buffer{})
		root.SetArgs(append(args, "--database-url", app.URL, "--schema", app.Schema))
		err := root.ExecuteContext(context.Background())
		return out.String(), err
	}
}

// createContacts creates a contact of tenant per email and answers their
// ids.
func createContacts(t *testing.T, app *kumikotest.App, tenant uuid.UUID, emails ...string) []uuid.UUID {
	t.Helper()
	ids := make([]uuid.UUID, 0, len(emails))
	for _, email := range emails {
		res, err := app.Executor.Write(context.Background(), kumikotest.User(tenant, "wes", "User"), pipeline.Request{
			Type: "contact.create", Payload: json.RawMessage(fmt.Sprintf(`{"name":"n","email":%q}`, email))})
		require.NoError(t, err)
		b, _ := json.Marshal(res)
		var row struct{ ID uuid.UUID }
		require.NoError(t, json.Unmarshal(b, &row))
		ids = append(ids, row.ID)
	}
	return ids
}

// contactTable is the contacts' read table.
func contactTable(t *testing.T, app *kumikotest.App) string {
	t.Helper()
	e, ok := app.Registry.Entity("contact")
	require.True(t, ok)
	return pgx.Identifier{e.Table().Name}.Sanitize()
}

// contactEmail is the email of a contact as its read row and as its
// creation event, loaded through store, hold it (nil: null).
func contactEmail(t *testing.T, app *kumikotest.App, store *eventstore.Store, tenant, id uuid.UUID) (row, event any) {
	t.Helper()
	ctx := context.Background()
	var email *string
	require.NoError(t, app.Pool.QueryRow(ctx, "SELECT email FROM "+contactTable(t, app)+" WHERE tenant_id = $1 AND id = $2",
		tenant, id).Scan(&email))
	if email != nil {
		row = *email
	}
	evs, err := store.Load(ctx, tenant, id, eventstore.LoadOptions{})
	require.NoError(t, err)
	require.Len(t, evs, 1)
	var p map[string]any
	require.NoError(t, json.Unmarshal(evs[0].Payload, &p))
	require.Contains(t, p, "email")
	return row, p["email"]
}

// `subject forget` of the app's binary nulls the subject's personal fields
// in its read rows and in its events, leaves another subject's, answers
// the same for a subject that has no data, and refuses a bad tenant or
// subject; the generic binary refuses it.
func TestSubjectForgetCommand(t *testing.T) {
	t.Parallel()
	crm := crmFeature()
	key := newDataKey(t)
	app := kumikotest.NewApp(t, []*feature.Feature{crm}, kumikotest.StoreConfig(eventstore.Config{Keys: localKeys(t, key)}))
	cli := withDataKey(app, []*feature.Feature{crm}, key)
	tenant := uuid.New()
	ids := createContacts(t, app, tenant, "ada@example.org", "bob@example.org")
	ada, bob := ids[0], ids[1]
	row, ev := contactEmail(t, app, app.Store, tenant, ada)
	require.Equal(t, "ada@example.org", row)
	require.Equal(t, "ada@example.org", ev)

	out, err := cli("subject", "forget", ada.String(), "--tenant", tenant.String())
	require.NoError(t, err, out)
	forgot := func(subject string) string {
		return fmt.Sprintf("forgot subject %q of tenant %s: its data key is deleted and its personal fields in the read rows are null\n", subject, tenant)
	}
	require.Equal(t, forgot(ada.String()), out)
	row, ev = contactEmail(t, app, app.Store, tenant, ada)
	require.Nil(t, row, "the read row's email is null")
	require.Nil(t, ev, "the event's email reads as null")
	row, ev = contactEmail(t, app, app.Store, tenant, bob)
	require.Equal(t, "bob@example.org", row, "another subject's data is intact")
	require.Equal(t, "bob@example.org", ev)
	var name string
	require.NoError(t, app.Pool.QueryRow(context.Background(), "SELECT name FROM "+contactTable(t, app)+" WHERE id = $1", ada).Scan(&name))
	require.Equal(t, "n", name, "a field that is not personal stays")

	// No oracle: again, an unknown subject and another tenant's subject
	// answer the same.
	out, err = cli("subject", "forget", ada.String(), "--tenant", tenant.String())
	require.NoError(t, err)
	require.Equal(t, forgot(ada.String()), out)
	out, err = cli("subject", "forget", "nobody", "--tenant", tenant.String())
	require.NoError(t, err)
	require.Equal(t, forgot("nobody"), out)
	other := uuid.New()
	out, err = cli("subject", "forget", bob.String(), "--tenant", other.String(), "--json")
	require.NoError(t, err)
	require.JSONEq(t, fmt.Sprintf(`{"tenant":%q,"subject":%q,"forgotten":true}`, other, bob), out)
	row, _ = contactEmail(t, app, app.Store, tenant, bob)
	require.Equal(t, "bob@example.org", row, "another tenant's forget leaves bob of this tenant")

	// Usage errors.
	_, err = cli("subject", "forget", bob.String())
	require.EqualError(t, err, "--tenant is required (a UUID)")
	_, err = cli("subject", "forget", bob.String(), "--tenant", "acme")
	require.EqualError(t, err, `--tenant "acme" is not a UUID`)
	_, err = cli("subject", "forget", "--tenant", tenant.String())
	require.ErrorContains(t, err, "accepts 1 arg(s), received 0")
	for _, subject := range []string{"", strings.Repeat("x", 201), "a\x00b", "\xff"} {
		_, err = cli("subject", "forget", subject, "--tenant", tenant.String())
		require.Error(t, err, "%q", subject)
		require.Regexp(t, `^invalid_subject: a subject id is `, err.Error(), "%q", subject)
	}

	// The generic binary cannot null the read rows: it refuses, and the
	// key stays.
	_, err = withDataKey(app, nil, "")("subject", "forget", bob.String(), "--tenant", tenant.String())
	require.EqualError(t, err, "subject forget needs the app's own binary: only it knows the read tables whose personal "+
		"fields must be set to null along with the subject's data key; run the app binary's `subject forget`")
	row, ev = contactEmail(t, app, app.Store, tenant, bob)
	require.Equal(t, "bob@example.org", row)
	require.Equal(t, "bob@example.org", ev)
}

// exported is the output of `subject export`, decoded.
type exported struct {
	Subject string `json:"subject"`
	Events  []struct {
		EventID       int64                      `json:"eventId"`
		AggregateType string                     `json:"aggregateType"`
		AggregateID   uuid.UUID                  `json:"aggregateId"`
		Version       int                        `json:"version"`
		Type          string                     `json:"type"`
		Fields        map[string]json.RawMessage `json:"fields"`
	} `json:"events"`
	Rows []struct {
		Entity string         `json:"entity"`
		ID     uuid.UUID      `json:"id"`
		Fields map[string]any `json:"fields"`
	} `json:"rows"`
}

// `subject export` of the app's binary prints, as indented JSON with or
// without --json, the subject's personal values in its events (each event
// that holds them, in order) and in its read rows, nothing of another
// subject; after a forget the event fields are null and no row is left. A
// subject without data, and another tenant's export of the same id, are
// empty lists. It refuses a bad tenant or subject; the generic binary
// refuses it.
func TestSubjectExportCommand(t *testing.T) {
	t.Parallel()
	crm := crmFeature()
	key := newDataKey(t)
	app := kumikotest.NewApp(t, []*feature.Feature{crm}, kumikotest.StoreConfig(eventstore.Config{Keys: localKeys(t, key)}))
	cli := withDataKey(app, []*feature.Feature{crm}, key)
	tenant := uuid.New()
	ids := createContacts(t, app, tenant, "ada@example.org", "bob@example.org")
	ada, bob := ids[0], ids[1]
	_, err := app.Executor.Write(context.Background(), kumikotest.User(tenant, "wes", "User"), pipeline.Request{Type: "contact.update",
		Payload: json.RawMessage(fmt.Sprintf(`{"id":%q,"version":1,"changes":{"email":"ada@lovelace.example"}}`, ada))})
	require.NoError(t, err)
	export := func(args ...string) exported {
		t.Helper()
		out, err := cli(append([]string{"subject", "export"}, args...)...)
		require.NoError(t, err, out)
		require.True(t, strings.HasPrefix(out, "{\n  \"subject\": "), "indented JSON: %s", out)
		var x exported
		require.NoError(t, json.Unmarshal([]byte(out), &x), out)
		return x
	}

	x := export(ada.String(), "--tenant", tenant.String())
	require.Equal(t, ada.String(), x.Subject)
	require.Len(t, x.Events, 2)
	for i, want := range []struct{ typ, email string }{{"contact.created", "ada@example.org"}, {"contact.updated", "ada@lovelace.example"}} {
		ev := x.Events[i]
		require.Equal(t, want.typ, ev.Type)
		require.Equal(t, "contact", ev.AggregateType)
		require.Equal(t, ada, ev.AggregateID)
		require.Equal(t, i+1, ev.Version)
		require.Equal(t, map[string]json.RawMessage{"email": json.RawMessage(fmt.Sprintf("%q", want.email))}, ev.Fields,
			"the subject's personal fields only, open")
	}
	require.Less(t, x.Events[0].EventID, x.Events[1].EventID)
	require.Len(t, x.Rows, 1)
	require.Equal(t, "contact", x.Rows[0].Entity)
	require.Equal(t, ada, x.Rows[0].ID)
	require.Equal(t, map[string]any{"email": "ada@lovelace.example"}, x.Rows[0].Fields)
	require.Equal(t, x, export(ada.String(), "--tenant", tenant.String(), "--json"), "--json changes nothing")

	// Another subject's export holds its own values only.
	x = export(bob.String(), "--tenant", tenant.String())
	require.Len(t, x.Events, 1)
	require.JSONEq(t, `{"email":"bob@example.org"}`, mustJSON(t, x.Events[0].Fields))
	require.Len(t, x.Rows, 1)
	require.Equal(t, bob, x.Rows[0].ID)

	// Unknown subjects and another tenant: empty lists, not null.
	for _, args := range [][]string{{"nobody", "--tenant", tenant.String()}, {uuid.NewString(), "--tenant", tenant.String()},
		{ada.String(), "--tenant", uuid.NewString()}} {
		out, err := cli(append([]string{"subject", "export"}, args...)...)
		require.NoError(t, err, out)
		require.JSONEq(t, fmt.Sprintf(`{"subject":%q,"events":[],"rows":[]}`, args[0]), out, "%v", args)
	}

	// After a forget: the events are still listed, their fields null; no
	// row is left. Bob's export is intact.
	_, err = cli("subject", "forget", ada.String(), "--tenant", tenant.String())
	require.NoError(t, err)
	x = export(ada.String(), "--tenant", tenant.String())
	require.Len(t, x.Events, 2)
	for _, ev := range x.Events {
		require.Equal(t, map[string]json.RawMessage{"email": json.RawMessage("null")}, ev.Fields)
	}
	require.Empty(t, x.Rows)
	out, err := cli("subject", "export", ada.String(), "--tenant", tenant.String())
	require.NoError(t, err)
	require.NotContains(t, out, "ada@", "nothing of the forgotten values is left")
	require.Contains(t, out, `"rows": []`)
	x = export(bob.String(), "--tenant", tenant.String())
	require.Equal(t, map[string]any{"email": "bob@example.org"}, x.Rows[0].Fields)

	// Usage errors.
	_, err = cli("subject", "export", bob.String())
	require.EqualError(t, err, "--tenant is required (a UUID)")
	_, err = cli("subject", "export", bob.String(), "--tenant", "acme")
	require.EqualError(t, err, `--tenant "acme" is not a UUID`)
	_, err = cli("subject", "export", "--tenant", tenant.String())
	require.ErrorContains(t, err, "accepts 1 arg(s), received 0")
	for _, subject := range []string{"", strings.Repeat("x", 201), "a\x00b", "\xff"} {
		_, err = cli("subject", "export", subject, "--tenant", tenant.String())
		require.Error(t, err, "%q", subject)
		require.Regexp(t, `^invalid_subject: a subject id is `, err.Error(), "%q", subject)
	}

	// The generic binary does not know the read tables: it refuses.
	out, err = withDataKey(app, nil, "")("subject", "export", bob.String(), "--tenant", tenant.String())
	require.EqualError(t, err, "subject export needs the app's own binary: only it knows the read tables whose personal "+
		"fields belong to the export along with the subject's events; run the app binary's `subject export`")
	require.Empty(t, out)
}

// mustJSON is v as JSON.
func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}

// `subject rotate-key` with KUMIKO_DATA_KEY=new,old re-wraps every data key
// with the new key, after which the new key alone opens the store and the
// old one alone no longer does; without the old key it fails and says what
// to configure; without any key it says to set one. The generic binary
// (KUMIKO_DATA_KEY from the environment) and the app's binary (its
// configuration) both run it. Not parallel: it sets the environment.
func TestSubjectRotateKeyCommand(t *testing.T) {
	crm := crmFeature()
	oldKey, newKey := newDataKey(t), newDataKey(t)
	app := kumikotest.NewApp(t, []*feature.Feature{crm}, kumikotest.StoreConfig(eventstore.Config{Keys: localKeys(t, oldKey)}))
	generic := withDataKey(app, nil, "")
	ctx := context.Background()
	tenant := uuid.New()
	ids := createContacts(t, app, tenant, "ada@example.org", "bob@example.org", "cy@example.org")
	require.NoError(t, app.Store.CheckKeys(ctx))
	storeWith := func(key string) *eventstore.Store {
		t.Helper()
		s, err := eventstore.New(app.Pool, eventstore.Config{Schema: app.Schema, Upcaster: app.Registry, Keys: localKeys(t, key)})
		require.NoError(t, err)
		return s
	}
	newID := localKeys(t, newKey).KeyID()

	// No key at all.
	t.Setenv("KUMIKO_DATA_KEY", "")
	_, err := generic("subject", "rotate-key")
	require.EqualError(t, err, "no data key is configured: set KUMIKO_DATA_KEY to the new key-encryption key followed by "+
		"the previous one (<new>,<previous>, base64 of 32 random bytes each)")

	// The new key without the previous one: nothing opens.
	t.Setenv("KUMIKO_DATA_KEY", newKey)
	_, err = generic("subject", "rotate-key")
	require.ErrorContains(t, err, "no key-encryption key "+localKeys(t, oldKey).KeyID()+" is configured")
	require.ErrorContains(t, err, "KUMIKO_DATA_KEY must hold the new key-encryption key first and every previous one after it "+
		"(<new>,<previous>); 0 data keys were re-wrapped before this, and running it again goes on")
	require.Error(t, storeWith(newKey).CheckKeys(ctx), "nothing changed")
	require.NoError(t, storeWith(oldKey).CheckKeys(ctx))

	t.Setenv("KUMIKO_DATA_KEY", newKey+","+oldKey)
	out, err := generic("subject", "rotate-key")
	require.NoError(t, err, out)
	require.Equal(t, "re-wrapped 3 data keys with key-encryption key "+newID+"; every data key is wrapped by it now, "+
		"so the previous key can be removed from KUMIKO_DATA_KEY\n", out)
	rotated := storeWith(newKey)
	require.NoError(t, rotated.CheckKeys(ctx), "the new key alone opens the store")
	for i, email := range []string{"ada@example.org", "bob@example.org", "cy@example.org"} {
		_, ev := contactEmail(t, app, rotated, tenant, ids[i])
		require.Equal(t, email, ev, "the new key alone opens the personal values")
	}
	require.ErrorIs(t, storeWith(oldKey).CheckKeys(ctx), eventstore.ErrDataKey, "the old key alone no longer does")

	// Again, through the app's binary: nothing left to re-wrap.
	out, err = withDataKey(app, []*feature.Feature{crm}, newKey+","+oldKey)("subject", "rotate-key", "--json")
	require.NoError(t, err, out)
	require.JSONEq(t, fmt.Sprintf(`{"rewrapped":0,"keyId":%q}`, newID), out)
	out, err = withDataKey(app, []*feature.Feature{crm}, newKey)("subject", "rotate-key")
	require.NoError(t, err, out)
	require.Equal(t, "re-wrapped 0 data keys with key-encryption key "+newID+"; every data key is wrapped by it now, "+
		"so the previous key can be removed from KUMIKO_DATA_KEY\n", out)
	_, err = withDataKey(app, []*feature.Feature{crm}, "")("subject", "rotate-key")
	require.ErrorContains(t, err, "no data key is configured")
}

package eventstore_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/kumikotest"
)

func newKEK(t *testing.T) []byte {
	t.Helper()
	k := make([]byte, 32)
	_, err := rand.Read(k)
	require.NoError(t, err)
	return k
}

func localKeys(t *testing.T, current []byte, previous ...[]byte) *eventstore.LocalKeys {
	t.Helper()
	p, err := eventstore.NewLocalKeys(current, previous...)
	require.NoError(t, err)
	return p
}

// dumpOf is every stored byte of the schema's event store tables that could
// hold a payload, as text.
func dumpOf(t *testing.T, db *kumikotest.DB) string {
	t.Helper()
	var out string
	require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT
		COALESCE((SELECT string_agg(payload::text || personal::text, ' ') FROM kumiko_events WHERE personal IS NOT NULL), '') || ' ' ||
		COALESCE((SELECT string_agg(state::text, ' ') FROM kumiko_snapshots), '')`).Scan(&out))
	return out
}

// Personal fields are sealed in the stored rows and open on every read
// path while the subject's key exists; forgetting a subject deletes its
// key and its values read as null everywhere, the events still load and
// upcast, and another subject — also one of the same id in another tenant —
// keeps its data.
func TestPersonalFieldsSealForgetAndOpen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := kumikotest.NewDB(t, kumikotest.StoreConfig(eventstore.Config{Keys: localKeys(t, newKEK(t)), Upcaster: renameUpcaster}))
	s := db.Store
	require.NoError(t, s.CheckKeys(ctx))
	customer := uuid.NewString()
	appendPerson := func(tenant uuid.UUID, name, email string) eventstore.AppendResult {
		t.Helper()
		res, err := s.Append(ctx, eventstore.Stream{TenantID: tenant, AggregateType: "person"}, 0,
			eventstore.NewEvent{Type: "person.registered", Payload: map[string]any{"name": name, "email": email, "customer": customer, "plan": "gold"},
				Personal: map[string]string{"name": "", "email": customer}},
			eventstore.NewEvent{Type: "task.renamed", EventVersion: 1, Payload: map[string]any{"name": name}, Personal: map[string]string{"name": ""}})
		require.NoError(t, err)
		return res
	}
	ada := appendPerson(tenantA, "Ada Lovelace", "ada@example.org")
	bob := appendPerson(tenantA, "Bob Byron", "bob@example.org")
	other := appendPerson(tenantB, "Cleo Other", "cleo@example.org")
	// The appended events carry plain payloads; the rows hold none of it.
	require.Contains(t, string(ada.Events[0].Payload), "Ada Lovelace")
	dump := dumpOf(t, db)
	for _, v := range []string{"Ada Lovelace", "ada@example.org", "Bob Byron", "Cleo Other"} {
		require.NotContains(t, dump, v)
	}
	require.Contains(t, dump, `"plan": "gold"`)
	require.Contains(t, dump, "kumiko:pd1:")

	snap := eventstore.Snapshot{TenantID: tenantA, AggregateID: ada.AggregateID, Version: 2,
		State: json.RawMessage(`{"name":"Ada Lovelace","plan":"gold"}`), Personal: map[string]string{"name": ""}}
	require.NoError(t, s.SaveSnapshot(ctx, snap))
	require.NotContains(t, dumpOf(t, db), "Ada Lovelace")

	type view struct{ name, email, title any }
	read := func(tenant, id uuid.UUID) view {
		t.Helper()
		evs, err := s.Load(ctx, tenant, id, eventstore.LoadOptions{})
		require.NoError(t, err)
		require.Len(t, evs, 2)
		var reg, renamed map[string]any
		require.NoError(t, json.Unmarshal(evs[0].Payload, &reg))
		require.NoError(t, json.Unmarshal(evs[1].Payload, &renamed))
		require.Equal(t, 2, evs[1].EventVersion, "upcast after opening")
		require.Equal(t, "gold", reg["plan"])
		return view{reg["name"], reg["email"], renamed["title"]}
	}
	require.Equal(t, view{"Ada Lovelace", "ada@example.org", "Ada Lovelace"}, read(tenantA, ada.AggregateID))
	snapped, _, err := s.LoadWithSnapshot(ctx, tenantA, ada.AggregateID, 1, eventstore.LoadOptions{})
	require.NoError(t, err)
	require.JSONEq(t, `{"name":"Ada Lovelace","plan":"gold"}`, string(snapped.State))
	var ranged int
	for ev, err := range s.ReadAll(ctx, 0, eventstore.ReadFilter{TenantID: tenantA}) {
		require.NoError(t, err)
		if ev.AggregateID == ada.AggregateID && ev.Type == "person.registered" {
			require.Contains(t, string(ev.Payload), "ada@example.org")
			ranged++
		}
	}
	require.Equal(t, 1, ranged)

	// A subject's export: the events holding its fields, only its fields.
	exported := func(tenant uuid.UUID, subject string) []string {
		t.Helper()
		evs, err := s.SubjectEvents(ctx, tenant, subject)
		require.NoError(t, err)
		var out []string
		for _, e := range evs {
			b, err := json.Marshal(e.Fields)
			require.NoError(t, err)
			out = append(out, e.Type+" "+string(b))
		}
		return out
	}
	require.Equal(t, []string{`person.registered {"name":"Ada Lovelace"}`, `task.renamed {"name":"Ada Lovelace"}`}, exported(tenantA, ada.AggregateID.String()))
	require.Equal(t, []string{`person.registered {"email":"ada@example.org"}`, `person.registered {"email":"bob@example.org"}`}, exported(tenantA, customer))
	require.Equal(t, []string{`person.registered {"email":"cleo@example.org"}`}, exported(tenantB, customer))

	// Forget Ada (her own id) in tenant A.
	forget := func(tenant uuid.UUID, subject string) bool {
		t.Helper()
		var had bool
		require.NoError(t, pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
			var err error
			had, err = s.ForgetSubjectTx(ctx, tx, tenant, subject)
			return err
		}))
		return had
	}
	require.True(t, forget(tenantA, ada.AggregateID.String()))
	require.False(t, forget(tenantA, ada.AggregateID.String()), "forgetting twice is no error")
	require.False(t, forget(tenantA, uuid.NewString()), "an unknown subject is no error")
	require.Equal(t, view{nil, "ada@example.org", nil}, read(tenantA, ada.AggregateID))
	snapped, _, err = s.LoadWithSnapshot(ctx, tenantA, ada.AggregateID, 1, eventstore.LoadOptions{})
	require.NoError(t, err)
	require.JSONEq(t, `{"name":null,"plan":"gold"}`, string(snapped.State))
	require.Equal(t, view{"Bob Byron", "bob@example.org", "Bob Byron"}, read(tenantA, bob.AggregateID))
	require.Equal(t, []string{`person.registered {"name":null}`, `task.renamed {"name":null}`}, exported(tenantA, ada.AggregateID.String()))

	// The customer subject: the emails of both of tenant A, not tenant B's.
	require.True(t, forget(tenantA, customer))
	require.Equal(t, view{"Bob Byron", nil, "Bob Byron"}, read(tenantA, bob.AggregateID))
	require.Equal(t, view{"Cleo Other", "cleo@example.org", "Cleo Other"}, read(tenantB, other.AggregateID))

	// A value moved to another event does not open there.
	db.Exec(t, `UPDATE kumiko_events SET payload = jsonb_set(payload, '{name}', (SELECT payload->'name' FROM kumiko_events WHERE aggregate_id = $1 AND version = 1))
		WHERE aggregate_id = $1 AND version = 2`, other.AggregateID)
	require.Equal(t, view{"Cleo Other", "cleo@example.org", nil}, read(tenantB, other.AggregateID))
}

// A store without Keys refuses personal fields; CheckKeys fails the start
// when the database holds data keys and the configured KEK is missing or
// another one, and passes with a provider that knows the old KEK after a
// rotation.
func TestDataKeyChecks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	kek := newKEK(t)
	db := kumikotest.NewDB(t, kumikotest.StoreConfig(eventstore.Config{Keys: localKeys(t, kek)}))
	require.NoError(t, db.Store.CheckKeys(ctx))
	res, err := db.Store.Append(ctx, eventstore.Stream{TenantID: tenantA, AggregateType: "person"}, 0,
		eventstore.NewEvent{Type: "person.registered", Payload: map[string]any{"name": "Ada"}, Personal: map[string]string{"name": ""}})
	require.NoError(t, err)

	storeWith := func(keys eventstore.KeyProvider) *eventstore.Store {
		s, err := eventstore.New(db.Pool, eventstore.Config{Schema: db.Schema, Keys: keys})
		require.NoError(t, err)
		t.Cleanup(s.Close)
		return s
	}
	err = storeWith(nil).CheckKeys(ctx)
	require.ErrorIs(t, err, eventstore.ErrDataKey)
	require.ErrorContains(t, err, "KUMIKO_DATA_KEY")
	err = storeWith(localKeys(t, newKEK(t))).CheckKeys(ctx)
	require.ErrorIs(t, err, eventstore.ErrDataKey)
	require.ErrorContains(t, err, "does not open")
	next := newKEK(t)
	rotated := storeWith(localKeys(t, next, kek))
	require.NoError(t, rotated.CheckKeys(ctx))
	n, err := rotated.RotateKeys(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	n, err = rotated.RotateKeys(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "nothing left to re-wrap")
	// The previous KEK can go now.
	after := storeWith(localKeys(t, next))
	require.NoError(t, after.CheckKeys(ctx))
	evs, err := after.Load(ctx, tenantA, res.AggregateID, eventstore.LoadOptions{})
	require.NoError(t, err)
	require.JSONEq(t, `{"name":"Ada"}`, string(evs[0].Payload))
	require.ErrorIs(t, storeWith(localKeys(t, kek)).CheckKeys(ctx), eventstore.ErrDataKey, "the old KEK alone opens nothing any more")

	_, err = storeWith(nil).Append(ctx, eventstore.Stream{TenantID: tenantA, AggregateType: "person"}, 0,
		eventstore.NewEvent{Type: "person.registered", Payload: map[string]any{"name": "Ada"}, Personal: map[string]string{"name": ""}})
	require.ErrorIs(t, err, eventstore.ErrNoDataKey)

	_, err = eventstore.NewLocalKeys([]byte("short"))
	require.ErrorContains(t, err, "32")
	p, err := eventstore.ParseLocalKeys(base64.StdEncoding.EncodeToString(kek) + ", " + base64.RawURLEncoding.EncodeToString(newKEK(t)))
	require.NoError(t, err)
	require.Equal(t, localKeys(t, kek).KeyID(), p.KeyID())
	require.True(t, strings.HasPrefix(p.KeyID(), "local:"))
	w, err := p.Wrap(ctx, bytes.Repeat([]byte{1}, 32))
	require.NoError(t, err)
	_, err = p.Unwrap(ctx, "local:other", w)
	require.ErrorIs(t, err, eventstore.ErrDataKey)
}

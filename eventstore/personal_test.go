package eventstore_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

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

// keyRaces is a schema with two stores on it, as two processes: separate
// caches of subjects' keys, one KEK.
type keyRaces struct {
	db   *kumikotest.DB
	a, b *eventstore.Store
}

func newKeyRaces(t *testing.T) keyRaces {
	t.Helper()
	kek := newKEK(t)
	db := kumikotest.NewDB(t, kumikotest.StoreConfig(eventstore.Config{Keys: localKeys(t, kek)}))
	b, err := eventstore.New(db.Pool, eventstore.Config{Schema: db.Schema, Keys: localKeys(t, kek)})
	require.NoError(t, err)
	t.Cleanup(b.Close)
	return keyRaces{db: db, a: db.Store, b: b}
}

// email is an event whose email field is subject's.
func email(value, subject string) eventstore.NewEvent {
	return eventstore.NewEvent{Type: "person.emailed", Payload: map[string]any{"email": value, "plan": "gold"},
		Personal: map[string]string{"email": subject}}
}

// emails reads the email fields of a stream's events through s.
func emails(t *testing.T, s *eventstore.Store, id uuid.UUID) []any {
	t.Helper()
	evs, err := s.Load(context.Background(), tenantA, id, eventstore.LoadOptions{})
	require.NoError(t, err)
	out := make([]any, len(evs))
	for i, e := range evs {
		var p map[string]any
		require.NoError(t, json.Unmarshal(e.Payload, &p))
		out[i] = p["email"]
	}
	return out
}

// keyOf is the wrapped key stored for subject of tenant A; nil when none.
func (r keyRaces) keyOf(t *testing.T, subject string) []byte {
	t.Helper()
	var w []byte
	err := r.db.Pool.QueryRow(context.Background(), `SELECT wrapped FROM kumiko_subject_keys WHERE tenant_id = $1 AND subject = $2`, tenantA, subject).Scan(&w)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	require.NoError(t, err)
	return w
}

// forget forgets subject of tenant A through s.
func forget(t *testing.T, s *eventstore.Store, subject string) {
	t.Helper()
	require.NoError(t, s.WithTx(context.Background(), func(ctx context.Context, tx pgx.Tx) error {
		_, err := s.ForgetSubjectTx(ctx, tx, tenantA, subject)
		return err
	}))
}

// withEvent appends through a the first event of a new stream with a
// field of a new subject: the subject and the stream, at version 1.
func (r keyRaces) withEvent(t *testing.T) (string, eventstore.Stream) {
	t.Helper()
	subject := uuid.NewString()
	res, err := r.a.Append(context.Background(), eventstore.Stream{TenantID: tenantA, AggregateType: "person"}, 0, email("ada@example.org", subject))
	require.NoError(t, err)
	return subject, eventstore.Stream{TenantID: tenantA, AggregateType: "person", AggregateID: res.AggregateID}
}

// begin opens a transaction the test holds; it rolls back at the end
// unless committed.
func (r keyRaces) begin(t *testing.T) pgx.Tx {
	t.Helper()
	tx, err := r.db.Pool.Begin(context.Background())
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	return tx
}

// blocking waits until a statement waits for the transaction of tx.
func (r keyRaces) blocking(t *testing.T, tx pgx.Tx) {
	t.Helper()
	pid := tx.Conn().PgConn().PID()
	require.Eventually(t, func() bool {
		return r.db.Count(t, `SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY (pg_blocking_pids(pid))`, int(pid)) > 0
	}, 10*time.Second, 2*time.Millisecond)
}

// async runs fn in a goroutine; the returned function waits for its error.
func async(fn func() error) func() error {
	done := make(chan error, 1)
	go func() { done <- fn() }()
	return func() error { return <-done }
}

// Two processes appending for a subject new to both at once: the one
// whose key insert waits for the other's uncommitted key finds, once that
// commits, that its own key was not stored, seals again with the stored
// one and appends. One key row; both events open in both processes.
func TestPersonalNewSubjectRace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := newKeyRaces(t)
	subject := uuid.NewString()
	person := eventstore.Stream{TenantID: tenantA, AggregateType: "person"}

	tx := r.begin(t)
	first, err := r.a.AppendTx(ctx, tx, person, 0, email("ada@example.org", subject))
	require.NoError(t, err)
	var second eventstore.AppendResult
	wait := async(func() error {
		var err error
		second, err = r.b.Append(ctx, person, 0, email("bob@example.org", subject))
		return err
	})
	r.blocking(t, tx)
	require.NoError(t, tx.Commit(ctx))
	require.NoError(t, wait())

	require.Equal(t, 1, r.db.Count(t, `SELECT count(*) FROM kumiko_subject_keys WHERE subject = $1`, subject))
	for _, s := range []*eventstore.Store{r.a, r.b} {
		require.Equal(t, []any{"ada@example.org"}, emails(t, s, first.AggregateID))
		require.Equal(t, []any{"bob@example.org"}, emails(t, s, second.AggregateID))
	}
	// Each process appends on with the one key.
	_, err = r.a.Append(ctx, eventstore.Stream{TenantID: tenantA, AggregateType: "person", AggregateID: second.AggregateID}, 1, email("cleo@example.org", subject))
	require.NoError(t, err)
	require.Equal(t, []any{"bob@example.org", "cleo@example.org"}, emails(t, r.b, second.AggregateID))
	require.Equal(t, 1, r.db.Count(t, `SELECT count(*) FROM kumiko_subject_keys WHERE subject = $1`, subject))
}

// A process that has a subject's key cached appends after another process
// forgot the subject: the append finds the key gone, makes a new one — the
// old one is not stored again — and the new event opens while the old one
// stays null.
func TestPersonalAppendAfterForgetElsewhere(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := newKeyRaces(t)
	subject, stream := r.withEvent(t)
	old := r.keyOf(t, subject)
	require.NotNil(t, old)

	forget(t, r.b, subject)
	_, err := r.a.Append(ctx, stream, 1, email("ada@example.net", subject))
	require.NoError(t, err)
	renewed := r.keyOf(t, subject)
	require.NotNil(t, renewed)
	require.NotEqual(t, old, renewed, "a new key, not the forgotten one")
	require.Equal(t, []any{nil, "ada@example.net"}, emails(t, r.a, stream.AggregateID))
	require.Equal(t, []any{nil, "ada@example.net"}, emails(t, r.b, stream.AggregateID))
}

// A forget racing an append of a subject the appending process has
// cached, either way round: no event sealed with the deleted key is
// committed after the forget, and none opens.
func TestPersonalForgetRacingAppend(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("forget first", func(t *testing.T) {
		t.Parallel()
		r := newKeyRaces(t)
		subject, stream := r.withEvent(t)
		old := r.keyOf(t, subject)

		// The forget has deleted the key, not committed yet; the append
		// with the cached key waits for it, then makes a new key.
		tx := r.begin(t)
		had, err := r.b.ForgetSubjectTx(ctx, tx, tenantA, subject)
		require.NoError(t, err)
		require.True(t, had)
		wait := async(func() error {
			_, err := r.a.Append(ctx, stream, 1, email("ada@example.net", subject))
			return err
		})
		r.blocking(t, tx)
		require.NoError(t, tx.Commit(ctx))
		require.NoError(t, wait())
		require.NotEqual(t, old, r.keyOf(t, subject))
		require.Equal(t, []any{nil, "ada@example.net"}, emails(t, r.a, stream.AggregateID))
	})

	t.Run("append first", func(t *testing.T) {
		t.Parallel()
		r := newKeyRaces(t)
		subject, stream := r.withEvent(t)

		// The append holds the key until it commits; the forget waits for
		// it and then forgets both events.
		tx := r.begin(t)
		_, err := r.a.AppendTx(ctx, tx, stream, 1, email("ada@example.net", subject))
		require.NoError(t, err)
		wait := async(func() error {
			return r.b.WithTx(ctx, func(ctx context.Context, ftx pgx.Tx) error {
				_, err := r.b.ForgetSubjectTx(ctx, ftx, tenantA, subject)
				return err
			})
		})
		r.blocking(t, tx)
		require.NoError(t, tx.Commit(ctx))
		require.NoError(t, wait())
		require.Nil(t, r.keyOf(t, subject))
		require.Equal(t, []any{nil, nil}, emails(t, r.a, stream.AggregateID))
		require.Equal(t, []any{nil, nil}, emails(t, r.b, stream.AggregateID))
	})
}

// The cache of subjects' keys never decides that a key exists: a key made
// in a transaction that rolled back, or re-wrapped by a rotation in
// another process, makes the next append seal again with what is stored.
func TestPersonalCachedKeyNotStored(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	kek, next := newKEK(t), newKEK(t)
	db := kumikotest.NewDB(t, kumikotest.StoreConfig(eventstore.Config{Keys: localKeys(t, next, kek)}))
	s := db.Store
	subject := uuid.NewString()
	person := eventstore.Stream{TenantID: tenantA, AggregateType: "person"}

	rollback := errors.New("roll back")
	require.ErrorIs(t, s.WithTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		_, err := s.AppendTx(ctx, tx, person, 0, email("ada@example.org", subject))
		require.NoError(t, err)
		return rollback
	}), rollback)
	require.Zero(t, db.Count(t, `SELECT count(*) FROM kumiko_subject_keys`))
	res, err := s.Append(ctx, person, 0, email("ada@example.org", subject))
	require.NoError(t, err)
	require.Equal(t, []any{"ada@example.org"}, emails(t, s, res.AggregateID))

	// Another process wraps the keys with a KEK of its own; this one, which
	// knows that KEK too, appends with its cached key, which is no longer
	// the stored one.
	old, err := eventstore.New(db.Pool, eventstore.Config{Schema: db.Schema, Keys: localKeys(t, kek, next)})
	require.NoError(t, err)
	defer old.Close()
	n, err := old.RotateKeys(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	stream := eventstore.Stream{TenantID: tenantA, AggregateType: "person", AggregateID: res.AggregateID}
	_, err = s.Append(ctx, stream, 1, email("ada@example.net", subject))
	require.NoError(t, err)
	require.Equal(t, []any{"ada@example.org", "ada@example.net"}, emails(t, old, res.AggregateID))
	require.Equal(t, 1, db.Count(t, `SELECT count(*) FROM kumiko_subject_keys`))
}

// Appends of many events of one subject (the key guard of one subject) and
// of events of two subjects (the guard of many) store one key per subject,
// with a new key, a known one, one another process stored first, inside a
// transaction and after a forget.
func TestPersonalManyEvents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := newKeyRaces(t)
	subject, other := uuid.NewString(), uuid.NewString()
	res, err := r.a.Append(ctx, eventstore.Stream{TenantID: tenantA, AggregateType: "person"}, 0,
		email("a1", subject), email("a2", subject))
	require.NoError(t, err)
	stream := eventstore.Stream{TenantID: tenantA, AggregateType: "person", AggregateID: res.AggregateID}
	// b has not seen the key: its fresh one loses, and it seals again.
	_, err = r.b.Append(ctx, stream, 2, email("b1", subject), email("b2", subject))
	require.NoError(t, err)
	require.NoError(t, r.a.WithTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		_, err := r.a.AppendTx(ctx, tx, stream, 4, email("a3", subject), email("o1", other))
		return err
	}))
	for _, s := range []*eventstore.Store{r.a, r.b} {
		require.Equal(t, []any{"a1", "a2", "b1", "b2", "a3", "o1"}, emails(t, s, stream.AggregateID))
	}
	require.Equal(t, 2, r.db.Count(t, `SELECT count(*) FROM kumiko_subject_keys WHERE subject IN ($1, $2)`, subject, other))

	// Forgotten through b: a's cached key is gone, and a new one seals on.
	forget(t, r.b, subject)
	_, err = r.a.Append(ctx, stream, 6, email("a4", subject), email("a5", subject))
	require.NoError(t, err)
	require.Equal(t, []any{nil, nil, nil, nil, nil, "o1", "a4", "a5"}, emails(t, r.b, stream.AggregateID))
}

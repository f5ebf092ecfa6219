package pipeline_test

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/kumikotest"
	"github.com/kumiko-go/kumiko/pipeline"
)

// NoteFlagged is version 3 of "note.flagged": v1 said "why", v2 renamed it
// to "reason", v3 added "severity".
type NoteFlagged struct {
	Reason   string `json:"reason" validate:"required"`
	Severity string `json:"severity" validate:"omitempty,oneof=low high"`
}

type flagNote struct {
	ID      uuid.UUID `json:"id" validate:"required"`
	Version int       `json:"version" validate:"required"`
	Reason  string    `json:"reason"`
}

type emitInput struct {
	ID   uuid.UUID `json:"id"`
	Type string    `json:"type"`
}

type historyInput struct {
	ID uuid.UUID `json:"id" validate:"required"`
}

var errApply = errors.New("projection refused the event")

// notes is a test feature built to break: its projection fails on demand,
// its code field is unique, and its commands append what they are told.
var notes = feature.Define("notes", func(r *feature.Registrar) {
	r.Entity("note", feature.Fields{
		"title": feature.Text().Required(),
		"code":  feature.Text().Unique(),
	})
	r.Crud("note", feature.Access{Write: feature.Roles("User"), Read: feature.AnyUser()})
	r.EventMigration("note.created", 1, 2, feature.Rename("name", "title"))

	r.DefineEvent("note.flagged", NoteFlagged{}, feature.EventVersion(3))
	r.EventMigration("note.flagged", 1, 2, feature.Rename("why", "reason"))
	r.EventMigration("note.flagged", 2, 3, feature.DefaultValue("severity", "low"))

	r.Projection("note_titles", feature.InlineProjection{
		Source: "note",
		Table: feature.TableDef{Name: "note_titles", Columns: []feature.Column{
			{Name: "tenant_id", Type: "uuid", NotNull: true},
			{Name: "id", Type: "uuid", NotNull: true},
			{Name: "title", Type: "text"},
		}, PrimaryKey: []string{"id"}},
		Apply: map[string]feature.ProjectionApplyFunc{
			"note.created": func(ctx feature.ProjectionContext, e feature.Event) error {
				p, err := feature.Decode[struct{ Title string }](e)
				if err != nil {
					return err
				}
				if p.Title == "boom-before" {
					return errApply
				}
				if _, err := ctx.DB().Exec(ctx.Context(), "INSERT INTO "+ctx.Table()+" (tenant_id, id, title) VALUES ($1, $2, $3)",
					ctx.Tenant(), e.AggregateID, p.Title); err != nil {
					return err
				}
				if p.Title == "boom-after" {
					return errApply // after the projection row was written
				}
				return nil
			},
		},
	})

	feature.HandleCommand(r, "note.flag", feature.Roles("User"), func(ctx feature.CommandContext, in flagNote) (any, error) {
		n, err := ctx.FetchForWriting(in.ID, "note", in.Version)
		if err != nil {
			return nil, err
		}
		return n.Version() + 1, n.Append("note.flagged", NoteFlagged{Reason: in.Reason})
	})
	feature.HandleCommand(r, "note.emit", feature.Roles("User"), func(ctx feature.CommandContext, in emitInput) (any, error) {
		_, err := ctx.AppendEvent(feature.AppendSpec{AggregateID: in.ID, AggregateType: "note", Type: in.Type, Payload: map[string]any{}, ExpectedVersion: feature.AnyVersion})
		return nil, err
	})
	feature.HandleCommand(r, "note.try_flag", feature.Roles("User"), func(ctx feature.CommandContext, in flagNote) (any, error) {
		// Two attempts at the same version: the second loses, the first stays.
		spec := feature.AppendSpec{AggregateID: in.ID, AggregateType: "note", Type: "note.flagged", Payload: NoteFlagged{Reason: in.Reason}, ExpectedVersion: in.Version}
		_, ok1, err := ctx.TryAppendEvent(spec)
		if err != nil {
			return nil, err
		}
		_, ok2, err := ctx.TryAppendEvent(spec)
		return []bool{ok1, ok2}, err
	})
	feature.HandleCommand(r, "note.archive", feature.Roles("User"), func(ctx feature.CommandContext, in historyInput) (any, error) {
		if err := ctx.ArchiveStream(in.ID, "test"); err != nil {
			return nil, err
		}
		return ctx.IsStreamArchived(in.ID)
	})
	feature.HandleCommand(r, "note.unarchive", feature.Roles("User"), func(ctx feature.CommandContext, in historyInput) (any, error) {
		if err := ctx.RestoreStream(in.ID); err != nil {
			return nil, err
		}
		return ctx.IsStreamArchived(in.ID)
	})
	feature.HandleQuery(r, "note.titles", feature.AnyUser(), func(ctx feature.CommandContext, _ struct{}) (any, error) {
		return ctx.QueryProjection("note_titles").Count(feature.ProjectionFilter{})
	})
	feature.HandleQuery(r, "note.history", feature.AnyUser(), func(ctx feature.CommandContext, in historyInput) (any, error) {
		n, err := ctx.LoadAggregate(in.ID, "note", feature.LoadOptions{})
		if err != nil {
			return nil, err
		}
		return map[string]any{"state": n.State(), "events": n.Events(), "version": n.Version()}, nil
	})
})

func newNotes(t *testing.T) *kumikotest.App {
	return newTasks(t, notes)
}

// An event and its rows never exist one without the other: a failure after
// the append (the row's unique index, the projection before it writes) or
// after the projection wrote its row leaves nothing, alone or in a batch.
func TestEventAndRowsCommitTogether(t *testing.T) {
	t.Parallel()
	app := newNotes(t)
	write(t, app, alice, "note.create", `{"title":"first","code":"A-1"}`)
	counts := func() [3]int {
		return [3]int{events(t, app), app.Count(t, "SELECT count(*) FROM read_note"), app.Count(t, "SELECT count(*) FROM note_titles")}
	}
	before := counts()
	require.Equal(t, [3]int{1, 1, 1}, before)

	for name, payload := range map[string]string{
		"unique row violated after the append": `{"title":"dup","code":"A-1"}`,
		"projection fails before its write":    `{"title":"boom-before"}`,
		"projection fails after its write":     `{"title":"boom-after"}`,
	} {
		_, err := app.Executor.Write(ctx, alice, req("note.create", payload))
		require.Error(t, err, name)
		require.Equal(t, before, counts(), name)
	}
	_, err := app.Executor.Write(ctx, alice, req("note.create", `{"title":"dup","code":"A-1"}`))
	c, pe := code(t, err)
	require.Equal(t, "unique_violation", c)
	require.Equal(t, "code", pe.Details()["field"], "the violation names the field")

	// In a batch: the first command succeeds on its own, the second fails;
	// neither is kept.
	_, err = app.Executor.Batch(ctx, alice, []pipeline.Request{
		req("note.create", `{"title":"fine"}`),
		req("task.create", `{"title":"also fine"}`),
		req("note.create", `{"title":"boom-after"}`),
	})
	_, pe = code(t, err)
	require.Equal(t, 2, pe.Details()["failedIndex"])
	require.Equal(t, before, counts())
	require.Equal(t, 0, app.Count(t, "SELECT count(*) FROM read_task"))

	// A batch that passes commits everything.
	out, err := app.Executor.Batch(ctx, alice, []pipeline.Request{
		req("note.create", `{"title":"one"}`),
		req("task.create", `{"title":"two"}`),
	})
	require.NoError(t, err)
	require.Len(t, out, 2)
	require.Equal(t, [3]int{3, 2, 2}, counts())
}

// labels has a unique field and nothing else that writes after a create's
// row: the row insert travels with the next statement or the commit.
var labels = feature.Define("labels", func(r *feature.Registrar) {
	r.Entity("label", feature.Fields{"code": feature.Text().Unique()})
	r.Crud("label", feature.Access{Write: feature.Roles("User"), Read: feature.AnyUser()})
})

// A row that violates its unique index fails its own request and nothing is
// kept: in the middle of a batch, as its last request (the row travelling
// with the commit), alone, and keyed, where no key is recorded (its retry is
// refused the same way, not told it was applied).
func TestUniqueRowFailsItsOwnRequest(t *testing.T) {
	t.Parallel()
	app := newTasks(t, labels)
	write(t, app, alice, "label.create", `{"code":"A-1"}`)
	dup := req("label.create", `{"code":"A-1"}`)
	for i := range 2 {
		reqs := []pipeline.Request{req("label.create", `{"code":"B"}`), req("task.create", `{"title":"fine"}`)}
		_, err := app.Executor.Batch(ctx, alice, slices.Insert(reqs, i+1, dup))
		c, pe := code(t, err)
		require.Equal(t, "unique_violation", c, "at %d", i+1)
		require.Equal(t, i+1, pe.Details()["failedIndex"])
		require.Equal(t, "code", pe.Details()["field"])
	}
	keyed := alice
	keyed.IdempotencyKey, keyed.RequestHash = "dup-key", "h1"
	for range 2 {
		_, err := app.Executor.Write(ctx, keyed, dup)
		c, _ := code(t, err)
		require.Equal(t, "unique_violation", c)
	}
	require.Equal(t, 0, app.Count(t, "SELECT count(*) FROM kumiko_idempotency_keys"))
	require.Equal(t, 1, events(t, app))
	require.Equal(t, 1, app.Count(t, "SELECT count(*) FROM read_label"))
	require.Equal(t, 0, app.Count(t, "SELECT count(*) FROM read_task"))
}

func TestBatchGatesEveryRequestFirst(t *testing.T) {
	t.Parallel()
	app := newNotes(t)
	_, err := app.Executor.Batch(ctx, alice, []pipeline.Request{
		req("note.create", `{"title":"ok"}`),
		req("note.create", `{"title":""}`),
	})
	c, pe := code(t, err)
	require.Equal(t, "validation_error", c)
	require.Equal(t, 1, pe.Details()["failedIndex"])
	_, err = app.Executor.Batch(ctx, alice, nil)
	c, _ = code(t, err)
	require.Equal(t, "validation_error", c)
	_, err = app.Executor.Batch(ctx, alice, []pipeline.Request{req("note.list", `{}`)})
	c, pe = code(t, err)
	require.Equal(t, "not_found", c, "a query is not a batch command")
	require.Equal(t, 0, pe.Details()["failedIndex"])
	require.Equal(t, 0, events(t, app))
}

// Appending an undefined event or another feature's event is refused at the
// emit site; an invalid payload is a validation error with field paths; in
// every case nothing is persisted.
func TestEmitSiteRefusals(t *testing.T) {
	t.Parallel()
	app := newNotes(t)
	n := write(t, app, alice, "note.create", `{"title":"x"}`)
	before := events(t, app)

	for _, typ := range []string{"note.never_defined", "task.completed"} {
		_, err := app.Executor.Command(ctx, alice, req("note.emit", fmt.Sprintf(`{"id":%q,"type":%q}`, n["id"], typ)))
		c, pe := code(t, err)
		require.Equal(t, "internal_error", c, typ)
		require.Contains(t, []string{"unknown_event", "foreign_event"}, pe.Reason(), typ)
		require.Equal(t, before, events(t, app), typ)
	}

	// note.flagged requires a reason.
	_, err := app.Executor.Command(ctx, alice, req("note.flag", fmt.Sprintf(`{"id":%q,"version":1,"reason":""}`, n["id"])))
	c, pe := code(t, err)
	require.Equal(t, "validation_error", c)
	require.Equal(t, "reason", pe.Fields()[0].Path)
	require.Equal(t, "required", pe.Fields()[0].Code)

	// Invalid request payloads never reach the handler.
	for payload, path := range map[string]string{
		`{"title":42}`:                   "title",
		`{"title":"ok","bogus":1}`:       "bogus",
		`{"code":"no title"}`:            "title",
		`{"title":"ok","id":"not-uuid"}`: "id",
	} {
		_, err := app.Executor.Write(ctx, alice, req("note.create", payload))
		c, pe := code(t, err)
		require.Equal(t, "validation_error", c, payload)
		require.Equal(t, path, pe.Fields()[0].Path, payload)
	}
	require.Equal(t, before, events(t, app))
}

// The gates run in order: unknown handler, then access, then payload.
func TestGateOrder(t *testing.T) {
	t.Parallel()
	app := newNotes(t)
	anonymous := pipeline.Caller{}
	reader := kumikotest.User(tenantA, "reader", "Reader")
	cases := []struct {
		caller pipeline.Caller
		req    pipeline.Request
		code   string
		reason string
	}{
		{alice, req("note.nope", `{"title":1}`), "not_found", "handler_not_found"},
		{alice, req("note.list", `{}`), "not_found", "handler_not_found"}, // a query sent as a write
		{anonymous, req("note.create", `{"title":1}`), "unauthenticated", "unauthenticated"},
		{reader, req("note.create", `{"title":1}`), "access_denied", "access_denied"},
		{alice, req("note.create", `{"title":1}`), "validation_error", "validation_error"},
	}
	for _, tc := range cases {
		_, err := app.Executor.Write(ctx, tc.caller, tc.req)
		c, pe := code(t, err)
		require.Equal(t, tc.code, c, tc.req.Type)
		require.Equal(t, tc.reason, pe.Reason(), tc.req.Type)
	}
	require.Equal(t, 0, events(t, app))
}

// A domain event bumps the stream; a CRUD update must then present the new
// version, and a stale one is a conflict naming both versions.
func TestDomainEventBumpsVersion(t *testing.T) {
	t.Parallel()
	app := newNotes(t)
	n := write(t, app, alice, "note.create", `{"title":"x"}`)
	out, err := app.Executor.Command(ctx, alice, req("note.flag", fmt.Sprintf(`{"id":%q,"version":1,"reason":"spam"}`, n["id"])))
	require.NoError(t, err)
	require.Equal(t, 2, out)
	require.Equal(t, float64(2), row(t, query(t, app, alice, "note.detail", fmt.Sprintf(`{"id":%q}`, n["id"])))["version"],
		"the read row carries the stream version")

	_, err = app.Executor.Write(ctx, alice, req("note.update", fmt.Sprintf(`{"id":%q,"version":1,"changes":{"title":"y"}}`, n["id"])))
	c, pe := code(t, err)
	require.Equal(t, "version_conflict", c)
	require.Equal(t, "event_version_conflict", pe.Reason())
	require.Equal(t, 1, pe.Details()["expectedVersion"])
	require.Equal(t, 2, pe.Details()["currentVersion"])

	up := write(t, app, alice, "note.update", fmt.Sprintf(`{"id":%q,"version":2,"changes":{"title":"y"}}`, n["id"]))
	require.Equal(t, float64(3), up["version"])

	// FetchForWriting refuses a stale command before it writes anything.
	before := events(t, app)
	_, err = app.Executor.Command(ctx, alice, req("note.flag", fmt.Sprintf(`{"id":%q,"version":2,"reason":"late"}`, n["id"])))
	c, _ = code(t, err)
	require.Equal(t, "version_conflict", c)
	require.Equal(t, before, events(t, app))
}

// Concurrent updates with the same version: exactly one wins.
func TestConcurrentUpdatesOneWins(t *testing.T) {
	t.Parallel()
	const writers = 16
	app := kumikotest.NewApp(t, []*feature.Feature{notes}, kumikotest.MaxConns(writers+2))
	n := write(t, app, alice, "note.create", `{"title":"x"}`)
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		codes   = map[string]int{}
		start   = make(chan struct{})
		payload = fmt.Sprintf(`{"id":%q,"version":1,"changes":{"title":"mine"}}`, n["id"])
	)
	for range writers {
		wg.Go(func() {
			<-start
			_, err := app.Executor.Write(ctx, alice, req("note.update", payload))
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				codes["ok"]++
				return
			}
			var pe *pipeline.Error
			if errors.As(err, &pe) {
				codes[pe.Code()]++
			} else {
				codes[err.Error()]++
			}
		})
	}
	close(start)
	wg.Wait()
	require.Equal(t, map[string]int{"ok": 1, "version_conflict": writers - 1}, codes)
	require.Equal(t, 2, events(t, app))
}

func TestTryAppendEventKeepsTheTransaction(t *testing.T) {
	t.Parallel()
	app := newNotes(t)
	n := write(t, app, alice, "note.create", `{"title":"x"}`)
	out, err := app.Executor.Command(ctx, alice, req("note.try_flag", fmt.Sprintf(`{"id":%q,"version":1,"reason":"r"}`, n["id"])))
	require.NoError(t, err)
	require.Equal(t, []bool{true, false}, out)
	require.Equal(t, 2, events(t, app), "the first append committed after the second lost")
}

// Stored events of old versions are read at the current version on every
// path — aggregate loads in handlers, queries and as-of details — while the
// stored rows stay as written.
func TestUpcastOnLoadQueryAndDetail(t *testing.T) {
	t.Parallel()
	app := newNotes(t)
	id := uuid.Must(uuid.NewV7())
	// Events as an older release wrote them.
	app.Exec(t, `INSERT INTO kumiko_events (aggregate_id, aggregate_type, tenant_id, version, type, event_version, payload)
		VALUES ($1, 'note', $2, 1, 'note.created', 1, '{"name":"old title","code":null}'),
		       ($1, 'note', $2, 2, 'note.flagged', 1, '{"why":"spam"}')`, id, tenantA)
	app.Exec(t, `INSERT INTO read_note (id, tenant_id, version, title, created_at, updated_at) VALUES ($1, $2, 2, 'old title', now(), now())`, id, tenantA)

	hist := row(t, query(t, app, alice, "note.history", fmt.Sprintf(`{"id":%q}`, id)))
	evs := hist["events"].([]any)
	require.Len(t, evs, 2)
	flagged := evs[1].(map[string]any)
	require.Equal(t, float64(3), flagged["EventVersion"])
	require.Equal(t, map[string]any{"reason": "spam", "severity": "low"}, flagged["Payload"])
	require.Equal(t, "old title", hist["state"].(map[string]any)["title"], "the fold sees the renamed field")

	var createdAt string
	require.NoError(t, app.Pool.QueryRow(ctx, `SELECT to_char(max(created_at) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') FROM kumiko_events`).Scan(&createdAt))
	asOf := row(t, query(t, app, alice, "note.detail", fmt.Sprintf(`{"id":%q,"asOf":%q}`, id, createdAt)))
	require.Equal(t, "old title", asOf["title"])
	require.Equal(t, float64(2), asOf["version"])

	// A command appending to the old stream works on the upcast state.
	_, err := app.Executor.Command(ctx, alice, req("note.flag", fmt.Sprintf(`{"id":%q,"version":2,"reason":"again"}`, id)))
	require.NoError(t, err)

	require.Equal(t, `{"why": "spam"}`, queryString(t, app, "SELECT payload::text FROM kumiko_events WHERE aggregate_id = $1 AND version = 2", id))
	require.Equal(t, 1, app.Count(t, "SELECT event_version FROM kumiko_events WHERE aggregate_id = $1 AND version = 2", id))
	require.Equal(t, 3, app.Count(t, "SELECT event_version FROM kumiko_events WHERE aggregate_id = $1 AND version = 3", id), "new events are stamped with the current version")
}

// Entities snapshot themselves every SnapshotEvery events, and the state
// loaded through the snapshot equals the full fold.
func TestAutomaticEntitySnapshots(t *testing.T) {
	t.Parallel()
	small := feature.Define("counters", func(r *feature.Registrar) {
		r.Entity("counter", feature.Fields{"n": feature.Number().Required()}, feature.SnapshotEvery(5))
		r.Crud("counter", feature.Access{Write: feature.Roles("User"), Read: feature.AnyUser()})
	})
	app := kumikotest.NewApp(t, []*feature.Feature{small})
	c := write(t, app, alice, "counter.create", `{"n":0}`)
	for v := 1; v <= 12; v++ {
		write(t, app, alice, "counter.update", fmt.Sprintf(`{"id":%q,"version":%d,"changes":{"n":%d}}`, c["id"], v, v*10))
	}
	require.Equal(t, 2, app.Count(t, "SELECT count(*) FROM kumiko_snapshots WHERE aggregate_id = $1", c["id"]))
	require.Equal(t, 10, app.Count(t, "SELECT max(version) FROM kumiko_snapshots WHERE aggregate_id = $1", c["id"]))
	require.Equal(t, 90, app.Count(t, "SELECT (state->>'n')::int FROM kumiko_snapshots WHERE aggregate_id = $1 AND version = 10", c["id"]))
	detail := row(t, query(t, app, alice, "counter.detail", fmt.Sprintf(`{"id":%q}`, c["id"])))
	require.Equal(t, float64(120), detail["n"])
	require.Equal(t, float64(13), detail["version"])
}

func TestArchiveThroughCommands(t *testing.T) {
	t.Parallel()
	app := newNotes(t)
	n := write(t, app, alice, "note.create", `{"title":"x"}`)
	id := fmt.Sprintf(`{"id":%q}`, n["id"])

	_, err := app.Executor.Command(ctx, bob, req("note.archive", id))
	c, _ := code(t, err)
	require.Equal(t, "not_found", c, "another tenant cannot archive it")

	archived, err := app.Executor.Command(ctx, alice, req("note.archive", id))
	require.NoError(t, err)
	require.Equal(t, true, archived)
	_, err = app.Executor.Write(ctx, alice, req("note.update", fmt.Sprintf(`{"id":%q,"version":1,"changes":{"title":"y"}}`, n["id"])))
	c, _ = code(t, err)
	require.Equal(t, "stream_archived", c)
	_, err = app.Executor.Command(ctx, alice, req("note.flag", fmt.Sprintf(`{"id":%q,"version":1,"reason":"r"}`, n["id"])))
	c, _ = code(t, err)
	require.Equal(t, "stream_archived", c, "FetchForWriting tells archived from missing")

	restored, err := app.Executor.Command(ctx, alice, req("note.unarchive", id))
	require.NoError(t, err)
	require.Equal(t, false, restored)
	up := write(t, app, alice, "note.update", fmt.Sprintf(`{"id":%q,"version":1,"changes":{"title":"y"}}`, n["id"]))
	require.Equal(t, float64(2), up["version"])
}

func TestQueryProjectionIsTenantFiltered(t *testing.T) {
	t.Parallel()
	app := newNotes(t)
	write(t, app, alice, "note.create", `{"title":"a1"}`)
	write(t, app, alice, "note.create", `{"title":"a2"}`)
	write(t, app, bob, "note.create", `{"title":"b1"}`)
	for caller, want := range map[string]int64{"alice": 2, "bob": 1} {
		c := alice
		if caller == "bob" {
			c = bob
		}
		out, err := app.Executor.Query(ctx, c, req("note.titles", `{}`))
		require.NoError(t, err)
		require.Equal(t, want, out, caller)
	}
}

// A keyed write applies once per (tenant, user, key), whatever happened to
// the HTTP layer's record of it; concurrent duplicates included.
func TestIdempotencyKeyBackstop(t *testing.T) {
	t.Parallel()
	const dupes = 10
	app := kumikotest.NewApp(t, []*feature.Feature{notes}, kumikotest.MaxConns(dupes+2))
	keyed := func(c pipeline.Caller, key, hash string) pipeline.Caller {
		c.IdempotencyKey, c.RequestHash = key, hash
		return c
	}
	write(t, app, keyed(alice, "k-1", "h-1"), "note.create", `{"title":"once"}`)

	_, err := app.Executor.Write(ctx, keyed(alice, "k-1", "h-1"), req("note.create", `{"title":"once"}`))
	c, pe := code(t, err)
	require.Equal(t, "idempotency_conflict", c)
	require.Equal(t, "already_applied", pe.Reason())
	_, err = app.Executor.Write(ctx, keyed(alice, "k-1", "h-2"), req("note.create", `{"title":"other"}`))
	_, pe = code(t, err)
	require.Equal(t, "key_reused", pe.Reason())
	_, err = app.Executor.Batch(ctx, keyed(alice, "k-1", "h-1"), []pipeline.Request{req("note.create", `{"title":"once"}`)})
	_, pe = code(t, err)
	require.Equal(t, "already_applied", pe.Reason(), "batches are keyed too")
	require.Equal(t, 1, events(t, app))

	// The same key of another user or tenant is another request.
	write(t, app, keyed(bob, "k-1", "h-1"), "note.create", `{"title":"bob's"}`)
	carol := kumikotest.User(tenantA, "carol", "User")
	write(t, app, keyed(carol, "k-1", "h-1"), "note.create", `{"title":"carol's"}`)
	require.Equal(t, 3, events(t, app))

	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		wins  int
		start = make(chan struct{})
	)
	for range dupes {
		wg.Go(func() {
			<-start
			_, err := app.Executor.Write(ctx, keyed(alice, "k-2", "h"), req("note.create", `{"title":"race"}`))
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				wins++
				return
			}
			var pe *pipeline.Error
			if !errors.As(err, &pe) || pe.Reason() != "already_applied" {
				t.Errorf("duplicate: %v", err)
			}
		})
	}
	close(start)
	wg.Wait()
	require.Equal(t, 1, wins)
	require.Equal(t, 4, events(t, app))
}

func TestSnapshotEntity(t *testing.T) {
	t.Parallel()
	app := newNotes(t)
	n := write(t, app, alice, "note.create", `{"title":"x"}`)
	write(t, app, alice, "note.update", fmt.Sprintf(`{"id":%q,"version":1,"changes":{"title":"y"}}`, n["id"]))
	id := uuid.MustParse(n["id"].(string))

	v, err := app.Executor.SnapshotEntity(ctx, tenantA, "note", id)
	require.NoError(t, err)
	require.Equal(t, 2, v)
	require.Equal(t, "y", queryString(t, app, "SELECT state->>'title' FROM kumiko_snapshots WHERE aggregate_id = $1 AND version = 2", id))

	_, err = app.Executor.SnapshotEntity(ctx, tenantB, "note", id)
	c, _ := code(t, err)
	require.Equal(t, "not_found", c, "another tenant's entity")
	_, err = app.Executor.SnapshotEntity(ctx, tenantA, "nope", id)
	c, _ = code(t, err)
	require.Equal(t, "not_found", c)
}

// swallowing has a command that ignores the errors of its statements, as a
// careless handler might.
var swallowing = feature.Define("swallowing", func(r *feature.Registrar) {
	feature.HandleCommand(r, "swallow.run", feature.Roles("User"), func(ctx feature.CommandContext, _ struct{}) (any, error) {
		_, _ = ctx.DB().Exec(ctx.Context(), "SELECT 1")
		var one int
		_ = ctx.DB().QueryRow(ctx.Context(), "SELECT 1").Scan(&one)
		return map[string]int{"one": one}, nil
	})
	feature.HandleCommand(r, "swallow.maybe", feature.Roles("User"), func(_ feature.CommandContext, in struct {
		Fail bool `json:"fail"`
	}) (any, error) {
		if in.Fail {
			return nil, errors.New("failed before any statement")
		}
		return map[string]int{}, nil
	})
})

// The idempotency key travels with the transaction's first statement; a
// key recorded already is the answer even when the handler ignores the
// error its statement got, and a keyed batch refused for its key names no
// failing request.
func TestIdempotencyKeyRefusedWhateverTheHandlerDoes(t *testing.T) {
	t.Parallel()
	app := kumikotest.NewApp(t, []*feature.Feature{swallowing, notes})
	keyed := alice
	keyed.IdempotencyKey, keyed.RequestHash = "k-swallow", "h"
	out, err := app.Executor.Command(ctx, keyed, req("swallow.run", `{}`))
	require.NoError(t, err)
	require.Equal(t, map[string]int{"one": 1}, out)

	_, err = app.Executor.Command(ctx, keyed, req("swallow.run", `{}`))
	_, pe := code(t, err)
	require.Equal(t, "already_applied", pe.Reason())

	// A handler failing before its first statement: the key still decides.
	keyed.IdempotencyKey = "k-maybe"
	_, err = app.Executor.Command(ctx, keyed, req("swallow.maybe", `{}`))
	require.NoError(t, err)
	_, err = app.Executor.Command(ctx, keyed, req("swallow.maybe", `{"fail":true}`))
	_, pe = code(t, err)
	require.Equal(t, "already_applied", pe.Reason())

	keyed.IdempotencyKey = "k-batch"
	_, err = app.Executor.Batch(ctx, keyed, []pipeline.Request{req("note.create", `{"title":"a"}`), req("note.create", `{"title":"b"}`)})
	require.NoError(t, err)
	_, err = app.Executor.Batch(ctx, keyed, []pipeline.Request{req("note.create", `{"title":"a"}`), req("note.create", `{"title":"b"}`)})
	_, pe = code(t, err)
	require.Equal(t, "already_applied", pe.Reason())
	require.NotContains(t, pe.Details(), "failedIndex")
	require.Equal(t, 2, events(t, app))
}

package pipeline_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/kumikotest"
	"github.com/kumiko-go/kumiko/samples/tasks"
)

func TestCrudLifecycle(t *testing.T) {
	t.Parallel()
	app := newTasks(t)

	created := write(t, app, alice, "task.create", `{"title":"Write docs","dueAt":"2026-12-01T10:00:00Z"}`)
	id := created["id"].(string)
	require.Equal(t, float64(1), created["version"])
	require.Equal(t, "Write docs", created["title"])
	require.Equal(t, false, created["done"], "defaults applied")
	require.Equal(t, "normal", created["priority"])
	require.Equal(t, "2026-12-01T10:00:00Z", created["dueAt"])
	require.Nil(t, created["deletedAt"])

	updated := write(t, app, alice, "task.update", fmt.Sprintf(`{"id":%q,"version":1,"changes":{"title":"Write more docs","priority":"high"}}`, id))
	require.Equal(t, float64(2), updated["version"])
	require.Equal(t, "Write more docs", updated["title"])
	require.Equal(t, "high", updated["priority"])
	require.Equal(t, "2026-12-01T10:00:00Z", updated["dueAt"], "unchanged fields stay")

	detail := query(t, app, alice, "task.detail", fmt.Sprintf(`{"id":%q}`, id))
	require.Equal(t, updated, detail)

	deleted := write(t, app, alice, "task.delete", fmt.Sprintf(`{"id":%q}`, id))
	require.Equal(t, float64(3), deleted["version"])
	require.NotNil(t, deleted["deletedAt"])
	require.Nil(t, query(t, app, alice, "task.detail", fmt.Sprintf(`{"id":%q}`, id)), "a deleted task reads as null")

	_, err := app.Executor.Write(ctx, alice, req("task.delete", fmt.Sprintf(`{"id":%q}`, id)))
	c, _ := code(t, err)
	require.Equal(t, "not_found", c, "deleting twice")

	restored := write(t, app, alice, "task.restore", fmt.Sprintf(`{"id":%q}`, id))
	require.Equal(t, float64(4), restored["version"])
	require.Nil(t, restored["deletedAt"])

	require.Equal(t, 4, app.Count(t, "SELECT count(*) FROM kumiko_events WHERE aggregate_id = $1", id))
	var types []string
	rows, err := app.Pool.Query(ctx, "SELECT type FROM kumiko_events WHERE aggregate_id = $1 ORDER BY version", id)
	require.NoError(t, err)
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		types = append(types, s)
	}
	require.Equal(t, []string{"task.created", "task.updated", "task.deleted", "task.restored"}, types)
	require.Equal(t, "corr-alice", queryString(t, app, "SELECT metadata->>'correlationId' FROM kumiko_events WHERE aggregate_id = $1 AND version = 2", id))
	require.Equal(t, "alice", queryString(t, app, "SELECT created_by FROM kumiko_events WHERE aggregate_id = $1 AND version = 2", id))
}

func queryString(t *testing.T, app *kumikotest.App, sql string, args ...any) string {
	t.Helper()
	var s string
	require.NoError(t, app.Pool.QueryRow(ctx, sql, args...).Scan(&s))
	return s
}

// Delete and restore check a version the client sends like update does: a
// stale one is a version_conflict that writes nothing; the right one, or
// none, goes through.
func TestDeleteRestoreExpectedVersion(t *testing.T) {
	t.Parallel()
	app := newTasks(t)
	id := write(t, app, alice, "task.create", `{"title":"versioned"}`)["id"].(string)
	write(t, app, alice, "task.update", fmt.Sprintf(`{"id":%q,"version":1,"changes":{"done":true}}`, id))
	idPayload := func(version int) string { return fmt.Sprintf(`{"id":%q,"version":%d}`, id, version) }
	stale := func(typ string, expected, current int) {
		t.Helper()
		before := events(t, app)
		_, err := app.Executor.Write(ctx, alice, req(typ, idPayload(expected)))
		c, pe := code(t, err)
		require.Equal(t, "version_conflict", c, typ)
		require.Equal(t, "event_version_conflict", pe.Reason())
		require.Equal(t, map[string]any{"expectedVersion": expected, "currentVersion": current}, pe.Details())
		require.Equal(t, before, events(t, app), "%s: nothing written", typ)
	}

	stale("task.delete", 1, 2)
	stale("task.delete", 7, 2)
	require.Equal(t, 1, app.Count(t, "SELECT count(*) FROM read_task WHERE id = $1 AND deleted_at IS NULL AND version = 2", id), "the row is untouched")
	deleted := write(t, app, alice, "task.delete", idPayload(2))
	require.Equal(t, float64(3), deleted["version"])
	require.NotNil(t, deleted["deletedAt"])

	stale("task.restore", 2, 3)
	require.Equal(t, 1, app.Count(t, "SELECT count(*) FROM read_task WHERE id = $1 AND deleted_at IS NOT NULL AND version = 3", id), "still deleted")
	restored := write(t, app, alice, "task.restore", idPayload(3))
	require.Equal(t, float64(4), restored["version"])
	require.Nil(t, restored["deletedAt"])

	// Without a version, the current one is taken.
	require.Equal(t, float64(5), write(t, app, alice, "task.delete", fmt.Sprintf(`{"id":%q}`, id))["version"])
	require.Equal(t, float64(6), write(t, app, alice, "task.restore", fmt.Sprintf(`{"id":%q}`, id))["version"])
	require.Equal(t, 6, app.Count(t, "SELECT count(*) FROM kumiko_events WHERE aggregate_id = $1", id))

	// Another tenant's id stays not_found, whatever the version.
	_, err := app.Executor.Write(ctx, bob, req("task.delete", idPayload(6)))
	c, _ := code(t, err)
	require.Equal(t, "not_found", c)
}

// Every delete answers the stream version after it — the delete event's —
// like every other write; a hard delete has no row left, so it answers the
// id and that version.
func TestDeleteAnswersVersionAfter(t *testing.T) {
	t.Parallel()
	app := kumikotest.NewApp(t, []*feature.Feature{tasks.Feature, rdVault})
	head := func(id string) int {
		return app.Count(t, "SELECT max(version) FROM kumiko_events WHERE aggregate_id = $1", id)
	}

	hard := write(t, app, alice, "account.create", `{"name":"hard"}`)["id"].(string)
	write(t, app, alice, "account.update", fmt.Sprintf(`{"id":%q,"version":1,"changes":{"name":"harder"}}`, hard))
	out := write(t, app, alice, "account.delete", fmt.Sprintf(`{"id":%q}`, hard))
	require.Equal(t, map[string]any{"id": hard, "version": float64(3)}, out)
	require.Equal(t, 3, head(hard))
	require.Equal(t, 0, app.Count(t, "SELECT count(*) FROM read_account WHERE id = $1", hard))

	// A hard delete checks a given version too.
	other := write(t, app, alice, "account.create", `{"name":"other"}`)["id"].(string)
	_, err := app.Executor.Write(ctx, alice, req("account.delete", fmt.Sprintf(`{"id":%q,"version":2}`, other)))
	c, _ := code(t, err)
	require.Equal(t, "version_conflict", c)
	require.Equal(t, 1, app.Count(t, "SELECT count(*) FROM read_account WHERE id = $1", other))
	require.Equal(t, map[string]any{"id": other, "version": float64(2)}, write(t, app, alice, "account.delete", fmt.Sprintf(`{"id":%q,"version":1}`, other)))

	soft := write(t, app, alice, "task.create", `{"title":"soft"}`)["id"].(string)
	out = write(t, app, alice, "task.delete", fmt.Sprintf(`{"id":%q}`, soft))
	require.Equal(t, float64(2), out["version"])
	require.Equal(t, 2, head(soft))
}

// jsonDocs is an entity with a json field, for TestJSONFieldsKeepTheirValue.
var jsonDocs = feature.Define("jsondocs", func(r *feature.Registrar) {
	r.Entity("doc", feature.Fields{"meta": feature.JSON()})
	r.Crud("doc", feature.Access{Write: feature.AnyUser(), Read: feature.AnyUser()})
})

// A json field stores exactly the JSON value written: a string stays a
// string (before, its text was cast as JSON: "NaN" failed with 500 and "1"
// was stored as the number 1), in creates, updates, filters and reads alike.
func TestJSONFieldsKeepTheirValue(t *testing.T) {
	t.Parallel()
	app := kumikotest.NewApp(t, []*feature.Feature{jsonDocs})
	for _, v := range []string{`"NaN"`, `"1"`, `"{\"a\":1}"`, `""`, `"x\"y"`, `"true"`, `1.5`, `true`, `{"a":[1,"x",null]}`, `["NaN"]`} {
		created := write(t, app, alice, "doc.create", `{"meta":`+v+`}`)
		id := created["id"].(string)
		var want any
		require.NoError(t, json.Unmarshal([]byte(v), &want))
		require.Equal(t, want, created["meta"], v)
		require.Equal(t, want, row(t, query(t, app, alice, "doc.detail", fmt.Sprintf(`{"id":%q}`, id)))["meta"], "detail of %s", v)

		list := row(t, query(t, app, alice, "doc.list", `{"filter":{"meta":`+v+`}}`))
		rows, _ := list["rows"].([]any)
		require.Len(t, rows, 1, "filter by %s", v)
		require.Equal(t, id, rows[0].(map[string]any)["id"])

		updated := write(t, app, alice, "doc.update", fmt.Sprintf(`{"id":%q,"version":1,"changes":{"meta":%s}}`, id, `["u",`+v+`]`))
		require.Equal(t, []any{"u", want}, updated["meta"], v)
		require.Equal(t, []any{"u", want}, row(t, query(t, app, alice, "doc.detail", fmt.Sprintf(`{"id":%q}`, id)))["meta"], "detail after update of %s", v)
	}
}

// readings is an entity of numbers and JSON values, whose encodings differ
// most between a value as the codec normalises it and as a stored payload
// decodes.
var readings = feature.Define("readings", func(r *feature.Registrar) {
	r.Entity("reading", feature.Fields{
		"value": feature.Number(),
		"meta":  feature.JSON(),
		"note":  feature.Text(),
	})
	r.Crud("reading", feature.Access{Write: feature.AnyUser(), Read: feature.AnyUser()})
})

// A create's and an update's answers are built from the payload decoded
// once; byte for byte they are what the row, read back, answers.
func TestWriteAnswerIsTheStoredRow(t *testing.T) {
	t.Parallel()
	app := kumikotest.NewApp(t, []*feature.Feature{readings})
	encode := func(v any) string {
		raw, err := json.Marshal(v)
		require.NoError(t, err)
		return string(raw)
	}
	created, err := app.Executor.Write(ctx, alice, req("reading.create",
		`{"value":1e21,"meta":{"b":[1.5,"<x>",null],"a":0.1,"n":12345678901234567890},"note":"a <b> & \u00e9"}`))
	require.NoError(t, err)
	id := row(t, created)["id"].(string)
	detail, err := app.Executor.Query(ctx, alice, req("reading.detail", fmt.Sprintf(`{"id":%q}`, id)))
	require.NoError(t, err)
	require.Equal(t, encode(detail), encode(created))

	updated, err := app.Executor.Write(ctx, alice, req("reading.update",
		fmt.Sprintf(`{"id":%q,"version":1,"changes":{"value":-0.000001,"meta":[{"z":1,"y":2}]}}`, id)))
	require.NoError(t, err)
	detail, err = app.Executor.Query(ctx, alice, req("reading.detail", fmt.Sprintf(`{"id":%q}`, id)))
	require.NoError(t, err)
	require.Equal(t, encode(detail), encode(updated))
}

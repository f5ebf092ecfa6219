package registry_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/registry"
)

func TestValidateEntityInputCreate(t *testing.T) {
	t.Parallel()
	reg := buildApp(t)
	assignee := uuid.New()
	in := map[string]any{
		"title":    "Write docs",
		"dueAt":    time.Date(2026, 4, 15, 10, 0, 0, 123456789, time.FixedZone("CEST", 2*3600)),
		"assignee": assignee.String(),
		"estimate": json.Number("2.5"),
		"labels":   map[string]any{"a": []any{1, "b"}},
	}
	out, err := reg.ValidateEntityInput("task", registry.VerbCreate, in)
	require.NoError(t, err)
	require.Equal(t, map[string]any{
		"title":    "Write docs",
		"done":     false,    // default
		"priority": "normal", // default
		"dueAt":    "2026-04-15T08:00:00.123456Z",
		"assignee": assignee.String(),
		"estimate": 2.5,
		"labels":   map[string]any{"a": []any{float64(1), "b"}},
	}, out)
	require.IsType(t, time.Time{}, in["dueAt"], "the input map is not modified")
	require.NotContains(t, in, "done")

	// Null takes the default too; an explicit value wins over it.
	out, err = reg.ValidateEntityInput("task", registry.VerbCreate, map[string]any{"title": "x", "done": nil, "priority": "high"})
	require.NoError(t, err)
	require.Equal(t, false, out["done"])
	require.Equal(t, "high", out["priority"])
}

func TestValidateEntityInputProblems(t *testing.T) {
	t.Parallel()
	reg := buildApp(t)
	long := make([]rune, 201)
	for i := range long {
		long[i] = 'ä' // counted in characters, not bytes
	}
	_, err := reg.ValidateEntityInput("task", registry.VerbCreate, map[string]any{
		"title":    string(long),
		"done":     "yes",
		"priority": "urgent",
		"dueAt":    "tomorrow",
		"assignee": "42",
		"estimate": "3",
		"owner":    "ann",
	})
	require.Equal(t, []registry.FieldError{
		{Path: "assignee", Code: "type", Message: "must be a UUID"},
		{Path: "done", Code: "type", Message: "must be a boolean"},
		{Path: "dueAt", Code: "type", Message: "must be an RFC 3339 timestamp"},
		{Path: "estimate", Code: "type", Message: "must be a number"},
		{Path: "owner", Code: "unknown_field", Message: "is not a field of task"},
		{Path: "priority", Code: "oneof", Message: "must be one of: low, normal, high"},
		{Path: "title", Code: "max", Message: "must be at most 200 characters"},
	}, fieldErrors(t, err))

	_, err = reg.ValidateEntityInput("task", registry.VerbCreate, map[string]any{})
	require.Equal(t, []registry.FieldError{{Path: "title", Code: "required", Message: "is required"}}, fieldErrors(t, err))
	_, err = reg.ValidateEntityInput("task", registry.VerbCreate, map[string]any{"title": ""})
	require.Equal(t, []registry.FieldError{{Path: "title", Code: "required", Message: "is required"}}, fieldErrors(t, err))
	_, err = reg.ValidateEntityInput("task", registry.VerbCreate, map[string]any{"title": nil})
	require.Equal(t, []registry.FieldError{{Path: "title", Code: "required", Message: "is required"}}, fieldErrors(t, err))
	_, err = reg.ValidateEntityInput("task", registry.VerbCreate, map[string]any{"title": "x", "estimate": json.Number("1e999")})
	require.Equal(t, []registry.FieldError{{Path: "estimate", Code: "type", Message: "must be a number"}}, fieldErrors(t, err))
}

func TestValidateEntityInputUpdate(t *testing.T) {
	t.Parallel()
	reg := buildApp(t)
	out, err := reg.ValidateEntityInput("task", registry.VerbUpdate, map[string]any{"done": true, "dueAt": nil})
	require.NoError(t, err)
	require.Equal(t, map[string]any{"done": true, "dueAt": nil}, out, "no defaults on update; null clears an optional field")

	_, err = reg.ValidateEntityInput("task", registry.VerbUpdate, map[string]any{"title": nil, "priority": 3})
	require.Equal(t, []registry.FieldError{
		{Path: "priority", Code: "type", Message: "must be a string"},
		{Path: "title", Code: "required", Message: "is required and cannot be cleared"},
	}, fieldErrors(t, err))
}

func TestValidateEntityInputMisuse(t *testing.T) {
	t.Parallel()
	reg := buildApp(t)
	_, err := reg.ValidateEntityInput("ghost", registry.VerbCreate, nil)
	require.ErrorIs(t, err, registry.ErrUnknownEntity)
	_, err = reg.ValidateEntityInput("task", registry.VerbDelete, nil)
	require.ErrorContains(t, err, "want create or update")
}

func TestDecodeCrudCreate(t *testing.T) {
	t.Parallel()
	reg := buildApp(t)
	id := uuid.New()
	v, err := reg.DecodePayload("task.create", json.RawMessage(`{"id":"`+id.String()+`","title":"Docs","estimate":3}`))
	require.NoError(t, err)
	require.Equal(t, registry.CreateInput{ID: id, Fields: map[string]any{
		"title": "Docs", "estimate": 3.0, "done": false, "priority": "normal",
	}}, v)

	v, err = reg.DecodePayload("task.create", json.RawMessage(`{"title":"Docs"}`))
	require.NoError(t, err)
	require.Equal(t, uuid.Nil, v.(registry.CreateInput).ID, "no id: the pipeline mints one")

	_, err = reg.DecodePayload("task.create", json.RawMessage(`{"id":"nope","title":7,"x":1}`))
	require.Equal(t, []registry.FieldError{
		{Path: "id", Code: "type", Message: "must be a non-nil UUID"},
		{Path: "title", Code: "type", Message: "must be a string"},
		{Path: "x", Code: "unknown_field", Message: "is not a field of task"},
	}, fieldErrors(t, err))
	_, err = reg.DecodePayload("task.create", json.RawMessage(`{"id":"00000000-0000-0000-0000-000000000000","title":"x"}`))
	require.Equal(t, []registry.FieldError{{Path: "id", Code: "type", Message: "must be a non-nil UUID"}}, fieldErrors(t, err))
}

func TestDecodeCrudUpdate(t *testing.T) {
	t.Parallel()
	reg := buildApp(t)
	id := uuid.New()
	v, err := reg.DecodePayload("task.update", json.RawMessage(`{"id":"`+id.String()+`","version":4,"changes":{"done":true}}`))
	require.NoError(t, err)
	require.Equal(t, registry.UpdateInput{ID: id, Version: 4, Changes: map[string]any{"done": true}}, v)

	_, err = reg.DecodePayload("task.update", json.RawMessage(`{"changes":{"title":"","ghost":1},"extra":true}`))
	require.Equal(t, []registry.FieldError{
		{Path: "extra", Code: "unknown_field", Message: "is not a known field"},
		{Path: "id", Code: "required", Message: "is required"},
		{Path: "version", Code: "required", Message: "is required"},
		{Path: "changes.ghost", Code: "unknown_field", Message: "is not a field of task"},
		{Path: "changes.title", Code: "required", Message: "is required"},
	}, fieldErrors(t, err))

	_, err = reg.DecodePayload("task.update", json.RawMessage(`{"id":"`+id.String()+`","version":0,"changes":{}}`))
	require.Equal(t, []registry.FieldError{
		{Path: "version", Code: "min", Message: "must be at least 1"},
		{Path: "changes", Code: "required", Message: "must change at least one field"},
	}, fieldErrors(t, err))

	_, err = reg.DecodePayload("task.update", json.RawMessage(`{"id":"`+id.String()+`","version":1.5,"changes":[]}`))
	require.Equal(t, []registry.FieldError{
		{Path: "version", Code: "type", Message: "must be an integer"},
		{Path: "changes", Code: "type", Message: "must be an object"},
	}, fieldErrors(t, err))
}

// maxVersionMessage explains the largest version a client may send.
const maxVersionMessage = "must be at most 2147483646 (the next version must fit the version column)"

// Delete and restore take an optional expected version, bounded like an
// update's by the width of the version column.
func TestDecodeCrudIDVersion(t *testing.T) {
	t.Parallel()
	reg := buildApp(t)
	id := uuid.New()
	for _, name := range []string{"task.delete", "task.restore"} {
		v, err := reg.DecodePayload(name, json.RawMessage(`{"id":"`+id.String()+`","version":3}`))
		require.NoError(t, err, name)
		require.Equal(t, registry.IDInput{ID: id, Version: 3}, v)
		v, err = reg.DecodePayload(name, json.RawMessage(`{"id":"`+id.String()+`","version":null}`))
		require.NoError(t, err, name)
		require.Equal(t, registry.IDInput{ID: id}, v, "null is no version")
		v, err = reg.DecodePayload(name, json.RawMessage(`{"id":"`+id.String()+`","version":2147483646}`))
		require.NoError(t, err, name)
		require.Equal(t, registry.IDInput{ID: id, Version: registry.MaxVersion}, v)

		for payload, want := range map[string]registry.FieldError{
			`{"id":"` + id.String() + `","version":0}`:          {Path: "version", Code: "min", Message: "must be at least 1"},
			`{"id":"` + id.String() + `","version":-4}`:         {Path: "version", Code: "min", Message: "must be at least 1"},
			`{"id":"` + id.String() + `","version":2147483647}`: {Path: "version", Code: "max", Message: maxVersionMessage},
			`{"id":"` + id.String() + `","version":1.5}`:        {Path: "version", Code: "type", Message: "must be an integer"},
			`{"id":"` + id.String() + `","version":"2"}`:        {Path: "version", Code: "type", Message: "must be an integer"},
		} {
			_, err = reg.DecodePayload(name, json.RawMessage(payload))
			require.Equal(t, []registry.FieldError{want}, fieldErrors(t, err), "%s %s", name, payload)
		}
	}
	_, err := reg.DecodePayload("task.update", json.RawMessage(`{"id":"`+id.String()+`","version":2147483648,"changes":{"done":true}}`))
	require.Equal(t, []registry.FieldError{{Path: "version", Code: "max", Message: maxVersionMessage}}, fieldErrors(t, err))

	props := schemaOf(t, reg, "task.delete")["properties"].(map[string]any)
	require.Equal(t, map[string]any{"type": "integer", "minimum": float64(1), "maximum": float64(registry.MaxVersion)}, props["version"])
}

func TestDecodeCrudIDAndDetail(t *testing.T) {
	t.Parallel()
	reg := buildApp(t)
	id := uuid.New()
	for _, name := range []string{"task.delete", "task.restore"} {
		v, err := reg.DecodePayload(name, json.RawMessage(`{"id":"`+id.String()+`"}`))
		require.NoError(t, err)
		require.Equal(t, registry.IDInput{ID: id}, v)
		_, err = reg.DecodePayload(name, json.RawMessage(`{"id":"`+id.String()+`","reason":"x"}`))
		require.Equal(t, []registry.FieldError{{Path: "reason", Code: "unknown_field", Message: "is not a known field"}}, fieldErrors(t, err))
	}
	v, err := reg.DecodePayload("task.detail", json.RawMessage(`{"id":"`+id.String()+`","asOf":"2026-04-15T10:00:00Z"}`))
	require.NoError(t, err)
	require.Equal(t, registry.DetailInput{ID: id, AsOf: time.Date(2026, 4, 15, 10, 0, 0, 0, time.UTC)}, v)

	_, err = reg.DecodePayload("task.detail", json.RawMessage(`{"asOf":"yesterday"}`))
	require.Equal(t, []registry.FieldError{
		{Path: "id", Code: "required", Message: "is required"},
		{Path: "asOf", Code: "type", Message: "must be an RFC 3339 timestamp"},
	}, fieldErrors(t, err))
}

func TestDecodeCrudList(t *testing.T) {
	t.Parallel()
	reg := buildApp(t)
	v, err := reg.DecodePayload("task.list", nil)
	require.NoError(t, err)
	require.Equal(t, registry.ListInput{Limit: registry.DefaultListLimit}, v)

	assignee := uuid.New()
	v, err = reg.DecodePayload("task.list", json.RawMessage(`{
		"limit": 200, "cursor": "abc", "includeDeleted": true, "asOf": "2026-04-15T10:00:00Z",
		"filter": {"done": false, "assignee": "`+assignee.String()+`", "dueAt": null, "title": "x"},
		"sort": [{"field": "title", "desc": true}, {"field": "createdAt"}]
	}`))
	require.NoError(t, err)
	require.Equal(t, registry.ListInput{
		Limit:          200,
		Cursor:         "abc",
		IncludeDeleted: true,
		AsOf:           time.Date(2026, 4, 15, 10, 0, 0, 0, time.UTC),
		Filter:         map[string]any{"done": false, "assignee": assignee.String(), "dueAt": nil, "title": "x"},
		Sort:           []registry.SortKey{{Field: "title", Desc: true}, {Field: "createdAt"}},
	}, v)

	_, err = reg.DecodePayload("task.list", json.RawMessage(`{
		"limit": 500, "filter": {"ghost": 1, "done": "no"},
		"sort": [{"field": "priority"}, {"field": "nope"}, {"desc": 1}, "x"], "page": 2
	}`))
	require.Equal(t, []registry.FieldError{
		{Path: "filter.done", Code: "type", Message: "must be a boolean"},
		{Path: "filter.ghost", Code: "unknown_field", Message: "is not a field of task"},
		{Path: "limit", Code: "max", Message: "must be at most 200"},
		{Path: "page", Code: "unknown_field", Message: "is not a known field"},
		{Path: "sort[0].field", Code: "not_sortable", Message: "is not a sortable field"},
		{Path: "sort[1].field", Code: "unknown_field", Message: "is not a field of task"},
		{Path: "sort[2].desc", Code: "type", Message: "must be a boolean"},
		{Path: "sort[2].field", Code: "required", Message: "is required"},
		{Path: "sort[3]", Code: "type", Message: "must be an object"},
	}, fieldErrors(t, err))

	_, err = reg.DecodePayload("user.list", json.RawMessage(`{"includeDeleted":true,"limit":0}`))
	require.Equal(t, []registry.FieldError{
		{Path: "includeDeleted", Code: "unknown_field", Message: "is only known for soft-delete entities"},
		{Path: "limit", Code: "min", Message: "must be at least 1"},
	}, fieldErrors(t, err))
}

func TestDecodeCrudEvents(t *testing.T) {
	t.Parallel()
	reg := buildApp(t)
	v, err := reg.DecodePayload("task.created", json.RawMessage(`{"title":"x"}`))
	require.NoError(t, err)
	require.Equal(t, map[string]any{"title": "x", "done": false, "priority": "normal"}, v)

	v, err = reg.DecodePayload("task.updated", json.RawMessage(`{"done":true}`))
	require.NoError(t, err)
	require.Equal(t, map[string]any{"done": true}, v)

	v, err = reg.DecodePayload("task.deleted", json.RawMessage(`{}`))
	require.NoError(t, err)
	require.Equal(t, map[string]any{}, v)

	_, err = reg.DecodePayload("task.created", json.RawMessage(`{"done":true}`))
	require.Equal(t, []registry.FieldError{{Path: "title", Code: "required", Message: "is required"}}, fieldErrors(t, err))
	_, err = reg.DecodePayload("task.restored", json.RawMessage(`{"why":"x"}`))
	require.Equal(t, []registry.FieldError{{Path: "why", Code: "unknown_field", Message: "is not a known field"}}, fieldErrors(t, err))
}

func TestEntityFieldDefaultsAreCopies(t *testing.T) {
	t.Parallel()
	reg, err := registry.Build(feature.Define("f", func(r *feature.Registrar) {
		r.Entity("doc", feature.Fields{
			"meta":  feature.JSON().Default(map[string]any{"tags": []string{"a"}}),
			"at":    feature.Timestamp().Default(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)),
			"owner": feature.UUID().Default(uuid.MustParse("0190b3c6-8c6e-7cc0-9a6c-5b2b1c7d8e9f")),
		})
	}))
	require.NoError(t, err)
	out, err := reg.ValidateEntityInput("doc", registry.VerbCreate, map[string]any{})
	require.NoError(t, err)
	require.Equal(t, map[string]any{
		"meta":  map[string]any{"tags": []any{"a"}},
		"at":    "2026-01-02T03:04:05Z",
		"owner": "0190b3c6-8c6e-7cc0-9a6c-5b2b1c7d8e9f",
	}, out, "defaults are normalised like input")
	out["meta"].(map[string]any)["tags"].([]any)[0] = "changed"

	again, err := reg.ValidateEntityInput("doc", registry.VerbCreate, map[string]any{})
	require.NoError(t, err)
	require.Equal(t, map[string]any{"tags": []any{"a"}}, again["meta"])
	e, _ := reg.Entity("doc")
	spec, _ := e.Field("meta")
	spec.Default.(map[string]any)["x"] = 1
	spec, _ = e.Field("meta")
	require.Equal(t, map[string]any{"tags": []any{"a"}}, spec.Default)
}

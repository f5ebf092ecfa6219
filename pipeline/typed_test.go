package pipeline_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/kumikotest"
)

// kitState holds every field type of an entity, each nullable (a pointer),
// and the fields every entity has.
type kitState struct {
	ID        uuid.UUID       `json:"id"`
	Version   int             `json:"version"`
	CreatedAt time.Time       `json:"createdAt"`
	Name      *string         `json:"name"`
	Size      *float64        `json:"size"`
	Count     *int64          `json:"count"`
	Ok        *bool           `json:"ok"`
	Color     *string         `json:"color"`
	At        *time.Time      `json:"at"`
	Ref       *uuid.UUID      `json:"ref"`
	Parent    *uuid.UUID      `json:"parent"`
	Extra     json.RawMessage `json:"extra"`
	Tags      []string        `json:"tags"`
}

// kitRow is a row of the kits table read by column, with Go names (no
// tags) matched case-insensitively.
type kitRow struct {
	ID     uuid.UUID
	Name   *string
	Size   *float64
	Count  *int32
	Ok     *bool
	Color  *string
	At     *time.Time
	Ref    *uuid.UUID
	Parent *string
	Extra  map[string]any
}

type kitID struct {
	ID uuid.UUID `json:"id"`
}

// kits declares an entity of every field type and handlers that read it
// typed: its state in a command, its rows in a query.
var kits = feature.Define("kits", func(r *feature.Registrar) {
	r.Entity("kit", feature.Fields{
		"name": feature.Text(), "size": feature.Number(), "count": feature.Number(), "ok": feature.Bool(),
		"color": feature.Enum("red", "blue"), "at": feature.Timestamp(), "ref": feature.UUID(),
		"parent": feature.Reference("kit"), "extra": feature.JSON(), "tags": feature.JSON(),
	})
	r.Crud("kit", feature.Access{Write: feature.AnyUser(), Read: feature.AnyUser()})
	feature.HandleCommand(r, "kit.state", feature.AnyUser(), func(ctx feature.CommandContext, in kitID) (any, error) {
		a, err := ctx.LoadAggregate(in.ID, "kit", feature.LoadOptions{})
		if err != nil {
			return nil, err
		}
		return feature.StateAs[kitState](a)
	})
	feature.HandleCommand(r, "kit.wrong_state", feature.AnyUser(), func(ctx feature.CommandContext, in kitID) (any, error) {
		a, err := ctx.LoadAggregate(in.ID, "kit", feature.LoadOptions{})
		if err != nil {
			return nil, err
		}
		type wrong struct {
			Name int `json:"name"`
		}
		return feature.StateAs[wrong](a)
	})
	feature.HandleQuery(r, "kit.rows", feature.AnyUser(), func(ctx feature.CommandContext, _ struct{}) (any, error) {
		return feature.RowsAs[kitRow](ctx.QueryProjection("kit"), feature.ProjectionFilter{OrderBy: "name NULLS LAST"})
	})
	feature.HandleQuery(r, "kit.row", feature.AnyUser(), func(ctx feature.CommandContext, in kitID) (any, error) {
		return feature.RowAs[kitRow](ctx.QueryProjection("kit"), feature.ProjectionFilter{Where: "id = $1", Args: []any{in.ID}})
	})
	feature.HandleQuery(r, "kit.null_into_value", feature.AnyUser(), func(ctx feature.CommandContext, _ struct{}) (any, error) {
		type strict struct {
			Name string
		}
		return feature.RowsAs[strict](ctx.QueryProjection("kit"), feature.ProjectionFilter{})
	})
	feature.HandleQuery(r, "kit.unknown_column", feature.AnyUser(), func(ctx feature.CommandContext, _ struct{}) (any, error) {
		type unknown struct {
			Colour string `json:"colour"`
		}
		return feature.RowsAs[unknown](ctx.QueryProjection("kit"), feature.ProjectionFilter{})
	})
})

// An entity's state and its rows read into structs: every field type, set
// and NULL, converted to the Go type declared; a mismatched type, a NULL
// into a non-pointer and a name the row does not have are errors naming
// the field.
func TestTypedStateAndRows(t *testing.T) {
	t.Parallel()
	app := kumikotest.NewApp(t, []*feature.Feature{kits})
	at := time.Date(2026, 4, 15, 10, 0, 0, 123000, time.UTC)
	ref := uuid.MustParse("0190a000-0000-7000-8000-0000000000aa")
	empty := write(t, app, alice, "kit.create", `{}`)
	full := write(t, app, alice, "kit.create", mustJSON(t, map[string]any{
		"name": "first", "size": 2.5, "count": 7, "ok": true, "color": "blue", "at": at, "ref": ref,
		"parent": empty["id"], "extra": map[string]any{"k": []any{1, "x"}}, "tags": []string{"a", "b"},
	}))
	fullID, emptyID := uuid.MustParse(full["id"].(string)), uuid.MustParse(empty["id"].(string))

	out, err := app.Executor.Command(ctx, alice, req("kit.state", mustJSON(t, kitID{fullID})))
	require.NoError(t, err)
	s := out.(kitState)
	require.Equal(t, fullID, s.ID)
	require.Equal(t, 1, s.Version)
	require.False(t, s.CreatedAt.IsZero())
	require.Equal(t, "first", *s.Name)
	require.InDelta(t, 2.5, *s.Size, 0)
	require.Equal(t, int64(7), *s.Count)
	require.True(t, *s.Ok)
	require.Equal(t, "blue", *s.Color)
	require.True(t, at.Equal(*s.At), "%s", s.At)
	require.Equal(t, ref, *s.Ref)
	require.Equal(t, emptyID, *s.Parent)
	require.JSONEq(t, `{"k":[1,"x"]}`, string(s.Extra))
	require.Equal(t, []string{"a", "b"}, s.Tags)

	out, err = app.Executor.Command(ctx, alice, req("kit.state", mustJSON(t, kitID{emptyID})))
	require.NoError(t, err)
	s = out.(kitState)
	require.Equal(t, emptyID, s.ID)
	require.Nil(t, s.Name)
	require.Nil(t, s.Size)
	require.Nil(t, s.Count)
	require.Nil(t, s.Ok)
	require.Nil(t, s.Color)
	require.Nil(t, s.At)
	require.Nil(t, s.Ref)
	require.Nil(t, s.Parent)
	require.Nil(t, s.Extra)
	require.Nil(t, s.Tags)

	out, err = app.Executor.Query(ctx, alice, req("kit.rows", `{}`))
	require.NoError(t, err)
	rows := out.([]kitRow)
	require.Len(t, rows, 2)
	r := rows[0]
	require.Equal(t, fullID, r.ID)
	require.Equal(t, "first", *r.Name)
	require.InDelta(t, 2.5, *r.Size, 0)
	require.Equal(t, int32(7), *r.Count)
	require.True(t, *r.Ok)
	require.Equal(t, "blue", *r.Color)
	require.True(t, at.Equal(*r.At), "%s", r.At)
	require.Equal(t, ref, *r.Ref)
	require.Equal(t, emptyID.String(), *r.Parent)
	require.Equal(t, map[string]any{"k": []any{1.0, "x"}}, r.Extra)
	require.Equal(t, kitRow{ID: emptyID}, rows[1], "every NULL column is a nil pointer or map")

	out, err = app.Executor.Query(ctx, alice, req("kit.row", mustJSON(t, kitID{emptyID})))
	require.NoError(t, err)
	require.Equal(t, &kitRow{ID: emptyID}, out)
	out, err = app.Executor.Query(ctx, alice, req("kit.row", mustJSON(t, kitID{uuid.New()})))
	require.NoError(t, err)
	require.Nil(t, out.(*kitRow))
}

// A value a struct field cannot hold is an error naming the struct, the
// field and the value's name, not a panic.
func TestTypedReadErrorsNameTheField(t *testing.T) {
	t.Parallel()
	app := kumikotest.NewApp(t, []*feature.Feature{kits})
	kit := write(t, app, alice, "kit.create", `{"name":"n"}`)
	write(t, app, alice, "kit.create", `{}`)
	id := uuid.MustParse(kit["id"].(string))

	for _, c := range []struct {
		handler, payload string
		query            bool
		wants            []string
	}{
		{"kit.wrong_state", mustJSON(t, kitID{id}), false, []string{"field Name", `state's "name"`, `the string "n"`, "field of type int"}},
		{"kit.null_into_value", `{}`, true, []string{"field Name", `row's "Name"`, "is NULL", "pointer"}},
		{"kit.unknown_column", `{}`, true, []string{"field Colour", `the row has no "colour"`}},
	} {
		var err error
		if c.query {
			_, err = app.Executor.Query(ctx, alice, req(c.handler, c.payload))
		} else {
			_, err = app.Executor.Command(ctx, alice, req(c.handler, c.payload))
		}
		require.Error(t, err, c.handler)
		// The handler's error is the cause of the internal error answered.
		var said []string
		for e := err; e != nil; e = errors.Unwrap(e) {
			said = append(said, e.Error())
		}
		for _, w := range c.wants {
			require.Contains(t, strings.Join(said, " | "), w, c.handler)
		}
	}
}

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

// goodState fits the note entity: every field type, nullable ones as
// pointers, matched by tag or by Go name.
type goodState struct {
	ID        uuid.UUID `json:"id"`
	Version   int
	CreatedAt string `json:"createdAt"`
	DeletedAt *time.Time
	Title     string          `json:"title"`
	Size      *float64        `json:"size"`
	Ok        bool            `json:"ok"`
	Color     string          `json:"color"`
	At        *time.Time      `json:"at"`
	Ref       *string         `json:"ref"`
	Parent    uuid.UUID       `json:"parent"`
	Extra     json.RawMessage `json:"extra"`
	Tags      []string        `json:"tags"`
	Ignored   int             `json:"-"`
}

// badState has a field of a type that cannot hold its value, and one that
// names nothing.
type badState struct {
	Title  int       `json:"title"`
	At     bool      `json:"at"`
	Ref    time.Time `json:"ref"`
	Tags   string    `json:"tags"`
	Colour string
}

// monthRow fits the months table; badRow does not.
type monthRow struct {
	Month     string
	Created   int64 `json:"created"`
	UpdatedAt *time.Time
	Payload   map[string]any `json:"payload"`
}

type badRow struct {
	Month    bool
	TenantID uuid.UUID
	Created  string `json:"created"`
}

func typedFeature(row any, stateOpt feature.EntityOption) *feature.Feature {
	return f("a", func(r *feature.Registrar) {
		r.Entity("note", feature.Fields{
			"title": feature.Text(), "size": feature.Number(), "ok": feature.Bool(), "color": feature.Enum("red"),
			"at": feature.Timestamp(), "ref": feature.UUID(), "parent": feature.Reference("note"), "extra": feature.JSON(),
			"tags": feature.JSON(),
		}, feature.SoftDelete(), stateOpt)
		r.Projection("months", feature.InlineProjection{
			Source: "note",
			Table: feature.TableDef{Name: "months", Columns: []feature.Column{
				{Name: "tenant_id", Type: "uuid", NotNull: true},
				{Name: "month", Type: "text", NotNull: true},
				{Name: "created", Type: "bigint", NotNull: true},
				{Name: "updated_at", Type: "timestamptz"},
				{Name: "payload", Type: "jsonb"},
			}, PrimaryKey: []string{"tenant_id", "month"}, Row: row},
			Apply: map[string]feature.ProjectionApplyFunc{"note.created": func(feature.ProjectionContext, feature.Event) error { return nil }},
		})
	})
}

// A state struct declared with StateStruct and a row struct declared with
// a table are checked at boot: each field must name a field or column and
// hold its values; the errors name the feature, the item and the field.
func TestTypedStructsAreCheckedAtBoot(t *testing.T) {
	t.Parallel()
	_, err := registry.Build(typedFeature(monthRow{}, feature.StateStruct[goodState]()))
	require.NoError(t, err)
	_, err = registry.Build(typedFeature(&monthRow{}, feature.StateStruct[*goodState]()))
	require.Error(t, err, "a pointer to a state struct is no struct")

	_, err = registry.Build(typedFeature(badRow{}, feature.StateStruct[badState]()))
	requireBootErrors(t, err,
		want{"a", `entity "note"`, registry.RuleEntity, `state struct registry_test.badState field Title: type int cannot hold "title" (text)`},
		want{"a", `entity "note"`, registry.RuleEntity, `field At: type bool cannot hold "at" (timestamp)`},
		want{"a", `entity "note"`, registry.RuleEntity, `field Ref: type time.Time cannot hold "ref" (uuid)`},
		want{"a", `entity "note"`, registry.RuleEntity, `field Tags: type string cannot hold "tags" (JSON)`},
		want{"a", `entity "note"`, registry.RuleEntity, `field Colour: the entity has no field "Colour"`},
		want{"a", `projection "months"`, registry.RuleProjection, `row struct registry_test.badRow field Month: type bool cannot hold "month" (text)`},
		want{"a", `projection "months"`, registry.RuleProjection, `field TenantID: table months has no column "TenantID"`},
		want{"a", `projection "months"`, registry.RuleProjection, `field Created: type string cannot hold "created" (integer)`},
	)
	require.Len(t, registry.AllBootErrors(err), 8, "one error per problem: %v", err)
}

type noteCount struct {
	Notes int    `json:"notes"`
	Note  string `json:"note,omitempty"`
}

// A handler declared with feature.Command or feature.Query has its result
// type in the registry and its schema as the result schema; an untyped
// handler has none.
func TestTypedResultsAreKnown(t *testing.T) {
	t.Parallel()
	reg, err := registry.Build(f("a", func(r *feature.Registrar) {
		feature.Command(r, "note.count", feature.AnyUser(), func(feature.CommandContext, struct{}) (noteCount, error) {
			return noteCount{Notes: 1}, nil
		})
		feature.Query(r, "note.list", feature.AnyUser(), func(feature.CommandContext, struct{}) ([]noteCount, error) {
			return nil, nil
		})
		feature.HandleCommand(r, "note.any", feature.AnyUser(), func(feature.CommandContext, struct{}) (any, error) {
			return nil, nil
		})
	}))
	require.NoError(t, err)
	h, ok := reg.Handler("note.count")
	require.True(t, ok)
	require.Equal(t, registry.KindCommand, h.Kind)
	require.Equal(t, "registry_test.noteCount", h.Result.String())
	var schema struct {
		Type       string                     `json:"type"`
		Properties map[string]json.RawMessage `json:"properties"`
		Items      json.RawMessage            `json:"items"`
	}
	require.NoError(t, json.Unmarshal(reg.ResultSchema("note.count"), &schema))
	require.Equal(t, "object", schema.Type)
	require.Contains(t, schema.Properties, "notes")
	require.Contains(t, schema.Properties, "note")

	q, _ := reg.Handler("note.list")
	require.Equal(t, registry.KindQuery, q.Kind)
	require.NoError(t, json.Unmarshal(reg.ResultSchema("note.list"), &schema))
	require.Equal(t, "array", schema.Type)
	require.NotEmpty(t, schema.Items)

	out, err := h.Invoke(nil, struct{}{})
	require.NoError(t, err)
	require.Equal(t, noteCount{Notes: 1}, out)

	u, _ := reg.Handler("note.any")
	require.Nil(t, u.Result)
	require.Nil(t, reg.ResultSchema("note.any"))
}

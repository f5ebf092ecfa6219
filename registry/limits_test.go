package registry_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/registry"
)

// Every time a payload brings — entity fields, filters, asOf, times in Go
// payload types — must lie in years 1 to 9999 once in UTC: the database
// stores nothing before year 1 and RFC 3339 writes nothing after 9999.
func TestTimesOutsideTheStorableRange(t *testing.T) {
	t.Parallel()
	tasks, cases := timeCases(t)
	outside := []string{"0000-01-01T00:00:00Z", "0001-01-01T00:59:59+01:00", "9999-12-31T23:00:00-02:00"}
	inside := []string{"0001-01-01T00:00:00Z", "0001-01-01T00:00:00-01:00", "9999-12-31T23:59:59.999999999Z", "9999-12-31T20:59:59+03:00"}
	for _, c := range cases {
		require.Contains(t, c.payload, "%s")
		for _, v := range outside {
			_, err := c.reg.DecodePayload(c.name, json.RawMessage(strings.Replace(c.payload, "%s", `"`+v+`"`, 1)))
			var ve *registry.ValidationError
			require.ErrorAs(t, err, &ve, "%s %s", c.name, v)
			require.Equal(t, []registry.FieldError{{Path: c.path, Code: "range", Message: "must lie between 0001-01-01T00:00:00Z and 9999-12-31T23:59:59.999999Z"}}, ve.Fields, "%s %s", c.name, v)
		}
		for _, v := range inside {
			_, err := c.reg.DecodePayload(c.name, json.RawMessage(strings.Replace(c.payload, "%s", `"`+v+`"`, 1)))
			require.NoError(t, err, "%s %s", c.name, v)
		}
	}

	in, err := tasks.DecodePayload("task.list", json.RawMessage(`{"asOf":"0001-01-01T00:00:00Z"}`))
	require.NoError(t, err)
	require.False(t, in.(registry.ListInput).AsOf.IsZero(), "the first instant of year 1 is not read as now")

	got, err := registry.ParseTime("9999-12-31T20:59:59.1234567+03:00")
	require.NoError(t, err)
	require.Equal(t, time.Date(9999, 12, 31, 17, 59, 59, 123456000, time.UTC), got)
	_, err = registry.ParseTime("10000-01-01T00:00:00Z")
	require.Error(t, err)
}

func TestListSortLimits(t *testing.T) {
	t.Parallel()
	tasks, err := registry.Build(tasksFeature(), usersFeature())
	require.NoError(t, err)
	keys := func(fields ...string) string {
		var parts []string
		for _, f := range fields {
			parts = append(parts, `{"field":"`+f+`"}`)
		}
		return `{"sort":[` + strings.Join(parts, ",") + `]}`
	}
	many := make([]string, 300)
	for i := range many {
		many[i] = "title"
	}
	for payload, want := range map[string]registry.FieldError{
		keys(many...):                          {Path: "sort", Code: "max", Message: "must have at most 8 keys"},
		keys(many[:registry.MaxSortKeys+1]...): {Path: "sort", Code: "max", Message: "must have at most 8 keys"},
		keys("title", "id", "title"):           {Path: "sort[2].field", Code: "duplicate", Message: "is already a sort key"},
		`{"sort":[{"field":"createdAt"},{"field":"createdAt","desc":true}]}`:                         {Path: "sort[1].field", Code: "duplicate", Message: "is already a sort key"},
		`{"id":"0190b3c6-8c6e-7cc0-9a6c-5b2b1c7d8e9f","version":2147483647,"changes":{"done":true}}`: {Path: "version", Code: "max", Message: maxVersionMessage},
	} {
		name := "task.list"
		if strings.Contains(payload, "version") {
			name = "task.update"
		}
		_, err := tasks.DecodePayload(name, json.RawMessage(payload))
		var ve *registry.ValidationError
		require.ErrorAs(t, err, &ve, payload)
		require.Equal(t, []registry.FieldError{want}, ve.Fields, payload)
	}
	in, err := tasks.DecodePayload("task.list", json.RawMessage(keys("title", "createdAt", "updatedAt", "id")))
	require.NoError(t, err)
	require.Len(t, in.(registry.ListInput).Sort, 4)

	var schema struct {
		Properties struct {
			Sort struct {
				MaxItems int `json:"maxItems"`
			} `json:"sort"`
		} `json:"properties"`
	}
	require.NoError(t, json.Unmarshal(tasks.Schema("task.list"), &schema))
	require.Equal(t, registry.MaxSortKeys, schema.Properties.Sort.MaxItems, "the schema states the limit")
}

// An offset of 24 hours or more is no RFC 3339 offset, though time.Parse
// takes it; a Go payload's time.Time carrying one could not be encoded, so
// the event append or the handler's answer failed with 500. It is refused
// wherever a time is read.
func TestTimeOffsetsOfADayOrMore(t *testing.T) {
	t.Parallel()
	_, cases := timeCases(t)
	for _, c := range cases {
		for _, v := range []string{"2026-01-01T00:00:00+24:00", "2026-01-01T00:00:00-24:00", "2026-01-01T00:00:00+23:60", "2026-01-01T00:00:00-24:59"} {
			_, err := c.reg.DecodePayload(c.name, json.RawMessage(strings.Replace(c.payload, "%s", `"`+v+`"`, 1)))
			var ve *registry.ValidationError
			require.ErrorAs(t, err, &ve, "%s %s", c.name, v)
			require.Len(t, ve.Fields, 1, "%s %s", c.name, v)
			require.Equal(t, c.path, ve.Fields[0].Path)
			require.Equal(t, "type", ve.Fields[0].Code)
		}
		for _, v := range []string{"2026-01-01T00:00:00+23:59", "2026-01-01T00:00:00-23:59"} {
			_, err := c.reg.DecodePayload(c.name, json.RawMessage(strings.Replace(c.payload, "%s", `"`+v+`"`, 1)))
			require.NoError(t, err, "%s %s", c.name, v)
		}
	}
	_, err := registry.ParseTime("2026-01-01T00:00:00+24:00")
	require.Error(t, err)
}

// timeCase is a payload holding one time at %s, and the path a problem with
// it names.
type timeCase struct {
	reg           *registry.Registry
	name, payload string
	path          string
}

// timeCases are the places a payload brings a time: entity fields, filters,
// asOf and a Go payload type. It returns the tasks registry too.
func timeCases(t *testing.T) (*registry.Registry, []timeCase) {
	t.Helper()
	tasks, err := registry.Build(tasksFeature(), usersFeature())
	require.NoError(t, err)
	orders := orderRegistry(t)
	const id = `"0190b3c6-8c6e-7cc0-9a6c-5b2b1c7d8e9f"`
	return tasks, []timeCase{
		{tasks, "task.create", `{"title":"x","dueAt":%s}`, "dueAt"},
		{tasks, "task.update", `{"id":` + id + `,"version":1,"changes":{"dueAt":%s}}`, "changes.dueAt"},
		{tasks, "task.list", `{"filter":{"dueAt":%s}}`, "filter.dueAt"},
		{tasks, "task.list", `{"asOf":%s}`, "asOf"},
		{tasks, "task.detail", `{"id":` + id + `,"asOf":%s}`, "asOf"},
		{orders, "order.placed", strings.Replace(validOrder, `"placedAt": "2026-04-15T10:00:00Z"`, `"placedAt": %s`, 1), "placedAt"},
	}
}

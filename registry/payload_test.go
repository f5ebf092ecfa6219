package registry_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/registry"
)

type Address struct {
	Street string `json:"street" validate:"required"`
	Zip    string `json:"zip" validate:"len=5"`
}

type Line struct {
	Name  string  `json:"name" validate:"required,max=10"`
	Qty   int     `json:"qty" validate:"gte=1"`
	Price float64 `json:"price"`
}

type Audit struct {
	Actor string `json:"actor" validate:"required"`
}

type OrderPlaced struct {
	Audit                       // promoted: its fields sit at the top level
	OrderID   uuid.UUID         `json:"orderId" validate:"required"`
	Customer  string            `json:"customer" validate:"required,email"`
	Status    string            `json:"status" validate:"oneof=new paid"`
	Ship      Address           `json:"ship"`
	Bill      *Address          `json:"bill,omitempty"`
	Items     []Line            `json:"items" validate:"required,min=1,dive"`
	Tags      map[string]string `json:"tags" validate:"dive,max=3"`
	PlacedAt  time.Time         `json:"placedAt"`
	Count     int8              `json:"count"`
	Big       int64             `json:"big,string"`
	Free      any               `json:"free"`
	Raw       json.RawMessage   `json:"raw"`
	Note      *string           `json:"note"`
	Ignored   string            `json:"-"`
	unexposed string
}

func orderRegistry(t testing.TB) *registry.Registry {
	t.Helper()
	reg, err := registry.Build(feature.Define("orders", func(r *feature.Registrar) {
		r.DefineEvent("order.placed", OrderPlaced{})
		r.DefineEvent("order.placed_ptr", &OrderPlaced{})
		feature.HandleCommand(r, "order.place", feature.AnyUser(), func(feature.CommandContext, OrderPlaced) (any, error) { return nil, nil })
	}))
	require.NoError(t, err)
	return reg
}

const validOrder = `{
	"actor": "system",
	"orderId": "0190b3c6-8c6e-7cc0-9a6c-5b2b1c7d8e9f",
	"customer": "ann@example.com",
	"status": "new",
	"ship": {"street": "Main 1", "zip": "12345"},
	"items": [{"name": "pen", "qty": 2, "price": 1.5}],
	"tags": {"a": "x"},
	"placedAt": "2026-04-15T10:00:00Z",
	"count": 3,
	"big": "9007199254740993",
	"free": {"anything": [1, 2]},
	"raw": {"kept": true},
	"note": null
}`

func fieldErrors(t *testing.T, err error) []registry.FieldError {
	t.Helper()
	var ve *registry.ValidationError
	require.True(t, errors.As(err, &ve), "want a *ValidationError, got %v", err)
	require.Equal(t, "validation_error", ve.Code())
	return ve.Fields
}

func TestDecodeValidPayload(t *testing.T) {
	t.Parallel()
	reg := orderRegistry(t)
	v, err := reg.DecodePayload("order.placed", json.RawMessage(validOrder))
	require.NoError(t, err)
	o, ok := v.(OrderPlaced)
	require.True(t, ok, "a value of the declared type, got %T", v)
	require.Equal(t, "system", o.Actor)
	require.Empty(t, o.unexposed)
	require.Equal(t, uuid.MustParse("0190b3c6-8c6e-7cc0-9a6c-5b2b1c7d8e9f"), o.OrderID)
	require.Equal(t, []Line{{Name: "pen", Qty: 2, Price: 1.5}}, o.Items)
	require.Equal(t, int64(9007199254740993), o.Big)
	require.JSONEq(t, `{"kept":true}`, string(o.Raw))
	require.Equal(t, time.Date(2026, 4, 15, 10, 0, 0, 0, time.UTC), o.PlacedAt.UTC())

	p, err := reg.DecodePayload("order.placed_ptr", json.RawMessage(validOrder))
	require.NoError(t, err)
	require.IsType(t, &OrderPlaced{}, p, "a pointer payload type decodes to a pointer")

	in, err := reg.DecodePayload("order.place", json.RawMessage(validOrder))
	require.NoError(t, err)
	require.IsType(t, OrderPlaced{}, in)
}

func TestDecodeReportsPathsOfNestedProblems(t *testing.T) {
	t.Parallel()
	reg := orderRegistry(t)
	_, err := reg.DecodePayload("order.placed", json.RawMessage(`{
		"orderId": "0190b3c6-8c6e-7cc0-9a6c-5b2b1c7d8e9f",
		"customer": "not-an-email",
		"status": "shipped",
		"ship": {"street": "", "zip": "1"},
		"items": [
			{"name": "ok", "qty": 1},
			{"name": "far too long a name", "qty": 1},
			{"name": "", "qty": 0}
		],
		"tags": {"a": "toolong"}
	}`))
	require.Equal(t, []registry.FieldError{
		{Path: "actor", Code: "required", Message: "is required"},
		{Path: "customer", Code: "email", Message: "must be an email address"},
		{Path: "status", Code: "oneof", Message: "must be one of: new, paid"},
		{Path: "ship.street", Code: "required", Message: "is required"},
		{Path: "ship.zip", Code: "len", Message: "must have exactly 5 characters"},
		{Path: "items[1].name", Code: "max", Message: "must be at most 10 characters"},
		{Path: "items[2].name", Code: "required", Message: "is required"},
		{Path: "items[2].qty", Code: "gte", Message: "must be at least 1"},
		{Path: "tags.a", Code: "max", Message: "must be at most 3 characters"},
	}, fieldErrors(t, err))
}

func TestDecodeReportsUnknownFieldsAndWrongTypesWithPaths(t *testing.T) {
	t.Parallel()
	reg := orderRegistry(t)
	_, err := reg.DecodePayload("order.placed", json.RawMessage(`{
		"orderId": "nope",
		"Customer": "ann@example.com",
		"status": 5,
		"ship": {"street": "x", "zip": "12345", "city": "Y"},
		"bill": "home",
		"items": [{"name": "a", "qty": 1.5}, {"name": "b", "qty": 1, "colour": "red"}, 7],
		"tags": {"a": 1, "odd key": "x"},
		"placedAt": "yesterday",
		"count": 300,
		"big": 12,
		"Ignored": "x",
		"unexposed": "x",
		"extra": {"deep": 1}
	}`))
	require.Equal(t, []registry.FieldError{
		{Path: "Customer", Code: "unknown_field", Message: "is not a known field"},
		{Path: "Ignored", Code: "unknown_field", Message: "is not a known field"},
		{Path: "big", Code: "type", Message: "must be a string holding the value"},
		{Path: "bill", Code: "type", Message: "must be an object"},
		{Path: "count", Code: "type", Message: "is out of range"},
		{Path: "extra", Code: "unknown_field", Message: "is not a known field"},
		{Path: "items[0].qty", Code: "type", Message: "must be an integer"},
		{Path: "items[1].colour", Code: "unknown_field", Message: "is not a known field"},
		{Path: "items[2]", Code: "type", Message: "must be an object"},
		{Path: "orderId", Code: "type", Message: "must be a UUID"},
		{Path: "placedAt", Code: "type", Message: "must be an RFC 3339 timestamp"},
		{Path: "ship.city", Code: "unknown_field", Message: "is not a known field"},
		{Path: "status", Code: "type", Message: "must be a string"},
		{Path: "tags.a", Code: "type", Message: "must be a string"},
		{Path: "unexposed", Code: "unknown_field", Message: "is not a known field"},
		// The rest is still validated; tag failures of dropped values
		// (status, orderId, items[0].qty, items[2]) are not repeated.
		{Path: "actor", Code: "required", Message: "is required"},
		{Path: "customer", Code: "required", Message: "is required"},
	}, fieldErrors(t, err))
}

func TestDecodeMalformedInput(t *testing.T) {
	t.Parallel()
	reg := orderRegistry(t)
	for raw, want := range map[string]registry.FieldError{
		`{"actor":`:    {Code: "invalid_json", Message: "is not valid JSON: unexpected end of input"},
		`{"a" 1}`:      {Code: "invalid_json", Message: "is not valid JSON: syntax error at offset 6"},
		`{} {}`:        {Code: "invalid_json", Message: "has data after the JSON value"},
		`[1,2]`:        {Code: "type", Message: "must be a JSON object"},
		`"text"`:       {Code: "type", Message: "must be a JSON object"},
		`{"items":{}}`: {Path: "items", Code: "type", Message: "must be an array"},
	} {
		_, err := reg.DecodePayload("order.placed", json.RawMessage(raw))
		fields := fieldErrors(t, err)
		require.Equal(t, want, fields[0], raw)
	}
}

func TestDecodeEmptyInputIsAnEmptyObject(t *testing.T) {
	t.Parallel()
	type Empty struct{}
	type Optional struct {
		N int `json:"n"`
	}
	reg, err := registry.Build(feature.Define("f", func(r *feature.Registrar) {
		r.DefineEvent("f.empty", Empty{})
		r.DefineEvent("f.optional", Optional{})
	}))
	require.NoError(t, err)
	for _, raw := range []string{"", "null", " {} "} {
		v, err := reg.DecodePayload("f.optional", json.RawMessage(raw))
		require.NoError(t, err, raw)
		require.Equal(t, Optional{}, v)
	}
	_, err = reg.DecodePayload("f.empty", json.RawMessage(`{"x":1}`))
	require.Equal(t, []registry.FieldError{{Path: "x", Code: "unknown_field", Message: "is not a known field"}}, fieldErrors(t, err))
}

func TestDecodeUnknownType(t *testing.T) {
	t.Parallel()
	_, err := orderRegistry(t).DecodePayload("order.nope", json.RawMessage(`{}`))
	require.ErrorIs(t, err, registry.ErrUnknownType)
	var ve *registry.ValidationError
	require.False(t, errors.As(err, &ve))
}

func TestDecodeNullsAndRequired(t *testing.T) {
	t.Parallel()
	reg := orderRegistry(t)
	var order map[string]any
	require.NoError(t, json.Unmarshal([]byte(validOrder), &order))
	order["items"] = nil
	order["ship"] = nil
	raw, _ := json.Marshal(order)
	_, err := reg.DecodePayload("order.placed", raw)
	require.Equal(t, []registry.FieldError{
		{Path: "ship.street", Code: "required", Message: "is required"},
		{Path: "ship.zip", Code: "len", Message: "must have exactly 5 characters"},
		{Path: "items", Code: "required", Message: "is required"},
	}, fieldErrors(t, err))
}

func TestValidationErrorText(t *testing.T) {
	t.Parallel()
	err := &registry.ValidationError{Fields: []registry.FieldError{
		{Path: "items[2].name", Code: "required", Message: "is required"},
		{Code: "type", Message: "must be a JSON object"},
	}}
	require.Equal(t, "validation failed: items[2].name is required (required); must be a JSON object (type)", err.Error())
}

func TestDecodeDoesNotModifyInput(t *testing.T) {
	t.Parallel()
	reg := orderRegistry(t)
	raw := json.RawMessage(validOrder)
	before := string(raw)
	_, err := reg.DecodePayload("order.placed", raw)
	require.NoError(t, err)
	require.Equal(t, before, string(raw))
}

func FuzzDecodePayload(f *testing.F) {
	orders := orderRegistry(f)
	tasks, err := registry.Build(tasksFeature(), usersFeature())
	require.NoError(f, err)
	f.Add(0, []byte(validOrder))
	f.Add(0, []byte(`{"items":[{"name":1},{"qty":"x"}],"tags":{"a b":2},"big":"1e3"}`))
	f.Add(1, []byte(`{"title":"x","done":true,"dueAt":"2026-04-15T10:00:00+02:00","labels":[1,{"a":null}]}`))
	f.Add(2, []byte(`{"id":"0190b3c6-8c6e-7cc0-9a6c-5b2b1c7d8e9f","version":3,"changes":{"title":null}}`))
	f.Add(3, []byte(`{"limit":5,"filter":{"id":"x"},"sort":[{"field":"title"}]}`))
	f.Fuzz(func(t *testing.T, which int, raw []byte) {
		reg, name := orders, "order.placed"
		switch which & 3 {
		case 1:
			reg, name = tasks, "task.created"
		case 2:
			reg, name = tasks, "task.update"
		case 3:
			reg, name = tasks, "task.list"
		}
		keep := string(raw)
		v, err := reg.DecodePayload(name, raw)
		require.Equal(t, keep, string(raw), "the input is never modified")
		if err != nil {
			var ve *registry.ValidationError
			require.True(t, errors.As(err, &ve), "payload problems are validation errors: %v", err)
			require.NotEmpty(t, ve.Fields)
			return
		}
		if which&3 > 1 {
			return
		}
		// What decoding returns is what gets stored: it decodes again to the same.
		enc, err := json.Marshal(v)
		require.NoError(t, err)
		again, err := reg.DecodePayload(name, enc)
		require.NoError(t, err, "re-decoding %s", enc)
		enc2, err := json.Marshal(again)
		require.NoError(t, err)
		require.JSONEq(t, string(enc), string(enc2))
	})
}

// PostgreSQL cannot store U+0000: such payloads are refused as invalid, while
// an escaped backslash followed by "u0000" is ordinary text.
func TestDecodeRefusesNUL(t *testing.T) {
	t.Parallel()
	reg := buildNULProbe(t)
	_, err := reg.DecodePayload("probe.said", json.RawMessage(`{"text":"a\u0000b"}`))
	var ve *registry.ValidationError
	require.ErrorAs(t, err, &ve)
	require.Equal(t, "invalid_character", ve.Fields[0].Code)
	_, err = reg.DecodePayload("probe.said", json.RawMessage(`{"text":"a\\u0000b"}`))
	require.NoError(t, err)
	_, err = reg.DecodePayload("probe.said", json.RawMessage(`{"text":"a\\\u0000b"}`))
	require.ErrorAs(t, err, &ve, "an escaped backslash, then a real NUL escape")
}

func buildNULProbe(t *testing.T) *registry.Registry {
	t.Helper()
	type said struct {
		Text string `json:"text"`
	}
	reg, err := registry.Build(feature.Define("probe", func(r *feature.Registrar) {
		r.DefineEvent("probe.said", said{})
	}))
	require.NoError(t, err)
	return reg
}

// manyKeys is a JSON object of n members "<prefix><i>": value.
func manyKeys(prefix string, n int, value string) string {
	var b strings.Builder
	b.WriteByte('{')
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%q:%s", prefix+strconv.Itoa(i), value)
	}
	b.WriteByte('}')
	return b.String()
}

// A payload of 70,000 bad members lists MaxFieldErrors problems and counts
// the rest, whichever decoder finds them.
func TestDecodeCapsTheProblemList(t *testing.T) {
	t.Parallel()
	const n = 70_000
	orders, tasks := orderRegistry(t), buildApp(t)
	cases := map[string]struct {
		reg     *registry.Registry
		name    string
		payload string
		total   int
	}{
		"struct, unknown fields": {orders, "order.placed", manyKeys("x", n, "1"), n + 7}, // + the 7 problems of {}
		"struct, failing tags": {orders, "order.placed",
			`{"actor":"a","orderId":"0190b3c6-8c6e-7cc0-9a6c-5b2b1c7d8e9f","customer":"a@b.cd","status":"new","ship":{"street":"s","zip":"12345"},"items":[{"name":"n","qty":1}],"tags":` +
				manyKeys("t", n, `"toolong"`) + `}`, n},
		"entity create":  {tasks, "task.create", manyKeys("x", n, "1"), n + 1}, // + the missing title
		"entity update":  {tasks, "task.update", `{"id":"0190b3c6-8c6e-7cc0-9a6c-5b2b1c7d8e9f","version":1,"changes":` + manyKeys("x", n, "1") + `}`, n},
		"list filter":    {tasks, "task.list", `{"filter":` + manyKeys("x", n, "1") + `}`, n},
		"list top level": {tasks, "task.list", manyKeys("x", n, "1"), n},
	}
	for name, c := range cases {
		_, err := c.reg.DecodePayload(c.name, json.RawMessage(c.payload))
		var ve *registry.ValidationError
		require.ErrorAs(t, err, &ve, name)
		require.Len(t, ve.Fields, registry.MaxFieldErrors, name)
		require.Equal(t, c.total, len(ve.Fields)+ve.Omitted, name)
		require.Contains(t, ve.Error(), fmt.Sprintf("and %d more", ve.Omitted), name)
	}
}

package structmap_test

import (
	"encoding/json"
	"math"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/internal/structmap"
)

func set[T any](t *testing.T, v any) (T, error) {
	t.Helper()
	var out T
	err := structmap.Set(reflect.ValueOf(&out).Elem(), v)
	return out, err
}

// Each Go type takes the values the framework hands over for the field
// types that fit it, and refuses the others with the value named.
func TestSetConverts(t *testing.T) {
	at := time.Date(2026, 4, 15, 10, 0, 0, 123000, time.UTC)
	id := uuid.MustParse("0190a000-0000-7000-8000-00000000000a")

	s, err := set[string](t, "x")
	require.NoError(t, err)
	require.Equal(t, "x", s)
	_, err = set[string](t, 1.5)
	require.EqualError(t, err, "is the number 1.5 (float64), which a field of type string cannot hold")

	b, err := set[bool](t, true)
	require.NoError(t, err)
	require.True(t, b)
	_, err = set[bool](t, "true")
	require.ErrorContains(t, err, `the string "true"`)

	for _, v := range []any{int64(7), int32(7), int16(7), 7, 7.0, json.Number("7"), json.Number("7.0"), uint8(7)} {
		n, err := set[int](t, v)
		require.NoError(t, err, "%T", v)
		require.Equal(t, 7, n)
	}
	_, err = set[int](t, 7.5)
	require.ErrorContains(t, err, "7.5")
	_, err = set[int8](t, int64(300))
	require.EqualError(t, err, "is 300, out of the range of int8")
	_, err = set[uint](t, int64(-1))
	require.EqualError(t, err, "is -1, out of the range of uint")
	_, err = set[int64](t, math.Inf(1))
	require.Error(t, err)

	for _, v := range []any{2.5, float32(2.5), json.Number("2.5")} {
		f, err := set[float64](t, v)
		require.NoError(t, err, "%T", v)
		require.InDelta(t, 2.5, f, 0)
	}
	f, err := set[float64](t, int64(3))
	require.NoError(t, err)
	require.InDelta(t, 3.0, f, 0)
	_, err = set[float32](t, 1e300)
	require.ErrorContains(t, err, "out of the range of float32")

	for _, v := range []any{at, at.Format(time.RFC3339Nano)} {
		got, err := set[time.Time](t, v)
		require.NoError(t, err)
		require.True(t, at.Equal(got))
	}
	_, err = set[time.Time](t, "yesterday")
	require.EqualError(t, err, `is the string "yesterday", not an RFC 3339 time`)

	for _, v := range []any{id.String(), [16]byte(id), id} {
		got, err := set[uuid.UUID](t, v)
		require.NoError(t, err, "%T", v)
		require.Equal(t, id, got)
	}
	_, err = set[uuid.UUID](t, "not-a-uuid")
	require.EqualError(t, err, `is the string "not-a-uuid", not a UUID`)

	raw, err := set[json.RawMessage](t, map[string]any{"a": 1.0})
	require.NoError(t, err)
	require.JSONEq(t, `{"a":1}`, string(raw))
	type inner struct {
		A []int `json:"a"`
	}
	st, err := set[inner](t, map[string]any{"a": []any{1.0, 2.0}})
	require.NoError(t, err)
	require.Equal(t, inner{A: []int{1, 2}}, st)
	_, err = set[inner](t, map[string]any{"a": "x"})
	require.ErrorContains(t, err, "a JSON object does not decode into structmap_test.inner")
	a, err := set[any](t, []any{"x"})
	require.NoError(t, err)
	require.Equal(t, []any{"x"}, a)
}

// NULL sets a pointer, interface, map, slice or raw JSON to nil and is an
// error for any other field; a value behind a pointer converts as without.
func TestSetNull(t *testing.T) {
	p, err := set[*int64](t, nil)
	require.NoError(t, err)
	require.Nil(t, p)
	p, err = set[*int64](t, 4.0)
	require.NoError(t, err)
	require.Equal(t, int64(4), *p)
	for _, fn := range []func() error{
		func() error { _, err := set[any](t, nil); return err },
		func() error { _, err := set[map[string]any](t, nil); return err },
		func() error { _, err := set[[]string](t, nil); return err },
		func() error { _, err := set[json.RawMessage](t, nil); return err },
	} {
		require.NoError(t, fn())
	}
	for _, fn := range []func() error{
		func() error { _, err := set[string](t, nil); return err },
		func() error { _, err := set[time.Time](t, nil); return err },
		func() error { _, err := set[uuid.UUID](t, nil); return err },
		func() error { _, err := set[float64](t, nil); return err },
	} {
		require.EqualError(t, fn(), "is NULL: declare the field as a pointer to hold it")
	}
}

// Fields are matched by json tag exactly, else by Go name in any case;
// "-" and unexported fields are skipped; a missing name is an error.
func TestPlanFill(t *testing.T) {
	type row struct {
		Title   string `json:"title"`
		DueAt   *time.Time
		Skipped string `json:"-"`
		hidden  string //nolint:unused // shows an unexported field is left alone
	}
	p, err := structmap.For(reflect.TypeFor[row]())
	require.NoError(t, err)
	var r row
	require.NoError(t, p.Fill(&r, map[string]any{"title": "t", "dueAt": nil, "other": 1}, "row"))
	require.Equal(t, row{Title: "t"}, r)
	err = p.Fill(&r, map[string]any{"Title": "t", "dueAt": nil}, "row")
	require.EqualError(t, err, `structmap_test.row field Title: the row has no "title"`)
	err = p.Fill(&r, map[string]any{"title": 1, "dueAt": nil}, "state")
	require.EqualError(t, err, `structmap_test.row field Title: the state's "title" is the number 1 (int), which a field of type string cannot hold`)
	_, err = structmap.For(reflect.TypeFor[int]())
	require.EqualError(t, err, "int is not a struct type")
	require.Error(t, p.Fill(r, nil, "row"), "not a pointer")
}

// Holds answers what Set converts, per kind; ColumnKind names the kinds of
// the column types a projection declares.
func TestHoldsAndColumnKind(t *testing.T) {
	for _, c := range []struct {
		typ   reflect.Type
		holds []structmap.Kind
	}{
		{reflect.TypeFor[string](), []structmap.Kind{structmap.Text, structmap.Time, structmap.UUID}},
		{reflect.TypeFor[*string](), []structmap.Kind{structmap.Text, structmap.Time, structmap.UUID}},
		{reflect.TypeFor[int32](), []structmap.Kind{structmap.Number, structmap.Integer}},
		{reflect.TypeFor[*float64](), []structmap.Kind{structmap.Number, structmap.Integer}},
		{reflect.TypeFor[bool](), []structmap.Kind{structmap.Bool}},
		{reflect.TypeFor[time.Time](), []structmap.Kind{structmap.Time}},
		{reflect.TypeFor[uuid.UUID](), []structmap.Kind{structmap.UUID}},
		{reflect.TypeFor[map[string]any](), []structmap.Kind{structmap.JSON}},
		{reflect.TypeFor[[]int](), []structmap.Kind{structmap.JSON}},
		{reflect.TypeFor[json.RawMessage](), []structmap.Kind{structmap.Text, structmap.Number, structmap.Integer, structmap.Bool, structmap.Time, structmap.UUID, structmap.JSON}},
		{reflect.TypeFor[any](), []structmap.Kind{structmap.Text, structmap.Number, structmap.Integer, structmap.Bool, structmap.Time, structmap.UUID, structmap.JSON}},
		{reflect.TypeFor[chan int](), nil},
	} {
		for k := structmap.Text; k <= structmap.JSON; k++ {
			require.Equal(t, slices.Contains(c.holds, k), structmap.Holds(c.typ, k), "%s holds kind %d", c.typ, k)
		}
	}
	for sqlType, want := range map[string]structmap.Kind{
		"text": structmap.Text, "varchar(20)": structmap.Text, "BIGINT": structmap.Integer, "integer": structmap.Integer,
		"numeric(10, 2)": structmap.Number, "double precision": structmap.Number, "boolean": structmap.Bool,
		"timestamptz": structmap.Time, "date": structmap.Time, "uuid": structmap.UUID, "jsonb": structmap.JSON,
	} {
		got, ok := structmap.ColumnKind(sqlType)
		require.True(t, ok, sqlType)
		require.Equal(t, want, got, sqlType)
	}
	_, ok := structmap.ColumnKind("tsvector")
	require.False(t, ok, "a type it does not know is not checked")
}

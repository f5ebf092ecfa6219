package registry_test

import (
	"errors"
	"math"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/registry"
)

// Widths is a command input with an integer of every width, a float32 and
// an int64 sent as a string, alone and inside a slice and a map.
type Widths struct {
	I8    int8             `json:"i8"`
	I16   int16            `json:"i16"`
	I32   int32            `json:"i32"`
	I64   int64            `json:"i64"`
	I     int              `json:"i"`
	U8    uint8            `json:"u8"`
	U32   uint32           `json:"u32"`
	U64   uint64           `json:"u64"`
	F32   float32          `json:"f32"`
	S64   int64            `json:"s64,string"`
	List  []int32          `json:"list"`
	ByKey map[string]int16 `json:"byKey"`
}

// integerTemplates are payloads with one number in them (%n), by handler.
var integerTemplates = []struct{ name, payload string }{
	{"task.update", `{"id":"0190b3c6-8c6e-7cc0-9a6c-5b2b1c7d8e9f","version":%n,"changes":{"done":true}}`},
	{"task.delete", `{"id":"0190b3c6-8c6e-7cc0-9a6c-5b2b1c7d8e9f","version":%n}`},
	{"task.restore", `{"id":"0190b3c6-8c6e-7cc0-9a6c-5b2b1c7d8e9f","version":%n}`},
	{"task.list", `{"limit":%n}`},
	{"task.create", `{"title":"x","estimate":%n}`},
	{"task.update", `{"id":"0190b3c6-8c6e-7cc0-9a6c-5b2b1c7d8e9f","version":1,"changes":{"estimate":%n}}`},
	{"task.list", `{"filter":{"estimate":%n}}`},
	{"task.complete", `{"id":"0190b3c6-8c6e-7cc0-9a6c-5b2b1c7d8e9f","version":%n}`},
	{"widths.set", `{"i8":%n}`}, {"widths.set", `{"i16":%n}`}, {"widths.set", `{"i32":%n}`}, {"widths.set", `{"i64":%n}`},
	{"widths.set", `{"i":%n}`}, {"widths.set", `{"u8":%n}`}, {"widths.set", `{"u32":%n}`}, {"widths.set", `{"u64":%n}`},
	{"widths.set", `{"f32":%n}`}, {"widths.set", `{"s64":"%n"}`}, {"widths.set", `{"list":[1,%n]}`}, {"widths.set", `{"byKey":{"a":%n}}`},
}

// boundaryNumbers are the seeds of FuzzDecodeIntegers: the edges of every
// integer width, the largest integer a float64 holds exactly, numbers no
// float64 holds, and integers written as fractions or exponents.
var boundaryNumbers = []string{
	"0", "-0", "1", "-1", "1.0", "1e0", "1E2", "0.5",
	"127", "128", "-128", "-129", "255", "256", "32767", "32768", "-32769",
	"2147483646", "2147483647", "2147483648", "-2147483648", "-2147483649", "4294967295", "4294967296",
	"9007199254740992", "9007199254740993", "-9007199254740992", "-9007199254740993",
	"9223372036854775807", "9223372036854775808", "-9223372036854775808", "-9223372036854775809",
	"18446744073709551615", "18446744073709551616", "1" + strings.Repeat("0", 400),
	"1e400", "-1e400", "1e-400", "3.4028236e38", "1.7976931348623157e308", "1e308",
}

// The CRUD and command decoders, given any number where an integer or a
// number is expected, never panic and either refuse it as a validation
// error or return a value the database column and the Go type hold exactly:
// a version from 1 to MaxVersion, a limit from 1 to MaxListLimit, a finite
// number, an integer field equal to the number sent (nothing wraps).
func FuzzDecodeIntegers(f *testing.F) {
	tasks, err := registry.Build(tasksFeature(), usersFeature(), feature.Define("widths", func(r *feature.Registrar) {
		feature.HandleCommand(r, "widths.set", feature.AnyUser(), func(feature.CommandContext, Widths) (any, error) { return nil, nil })
	}))
	require.NoError(f, err)
	for i := range integerTemplates {
		for _, n := range boundaryNumbers {
			f.Add(uint8(i), n)
		}
	}
	f.Fuzz(func(t *testing.T, which uint8, num string) {
		tpl := integerTemplates[int(which)%len(integerTemplates)]
		raw := strings.Replace(tpl.payload, "%n", num, 1)
		v, err := tasks.DecodePayload(tpl.name, []byte(raw))
		if err != nil {
			var ve *registry.ValidationError
			require.True(t, errors.As(err, &ve), "%s %s: a payload problem is a validation error: %v", tpl.name, raw, err)
			require.NotEmpty(t, ve.Fields)
			return
		}
		switch in := v.(type) {
		case registry.UpdateInput:
			requireInRange(t, in.Version, 1, registry.MaxVersion, raw)
			requireFinite(t, in.Changes["estimate"], raw)
		case registry.IDInput:
			requireInRange(t, in.Version, 1, registry.MaxVersion, raw)
		case registry.ListInput:
			requireInRange(t, in.Limit, 1, registry.MaxListLimit, raw)
			requireFinite(t, in.Filter["estimate"], raw)
		case registry.CreateInput:
			requireFinite(t, in.Fields["estimate"], raw)
		case CompleteTask:
			requireExact(t, int64(in.Version), num, 64, raw)
		case Widths:
			requireWidths(t, in, tpl.payload, num, raw)
		default:
			t.Fatalf("%s decoded to %T", tpl.name, v)
		}
	})
}

func requireInRange(t *testing.T, n, lo, hi int, raw string) {
	t.Helper()
	require.GreaterOrEqual(t, n, lo, raw)
	require.LessOrEqual(t, n, hi, raw)
}

func requireFinite(t *testing.T, v any, raw string) {
	t.Helper()
	if v == nil {
		return
	}
	f, ok := v.(float64)
	require.True(t, ok, "%s: a number field decodes to a float64, not %T", raw, v)
	require.False(t, math.IsInf(f, 0) || math.IsNaN(f), raw)
}

// requireExact checks that integer got is the number num as written.
func requireExact(t *testing.T, got int64, num string, bits int, raw string) {
	t.Helper()
	want, err := strconv.ParseInt(strings.TrimSpace(num), 10, bits)
	require.NoError(t, err, "%s: only an integer of the type's width decodes", raw)
	require.Equal(t, want, got, raw)
}

// requireWidths checks the one field of tpl that num was put in: it holds
// exactly num, or for a float32 a finite number.
func requireWidths(t *testing.T, in Widths, tpl, num, raw string) {
	t.Helper()
	name := tpl[2 : strings.IndexByte(tpl[2:], '"')+2]
	v := reflect.ValueOf(in)
	for i := range v.NumField() {
		if strings.Split(v.Type().Field(i).Tag.Get("json"), ",")[0] == name {
			v = v.Field(i)
			break
		}
	}
	switch v.Kind() {
	case reflect.Slice:
		require.Equal(t, 2, v.Len(), raw)
		v = v.Index(1)
	case reflect.Map:
		v = v.MapIndex(reflect.ValueOf("a"))
	}
	bits := v.Type().Bits()
	switch v.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		requireExact(t, v.Int(), num, bits, raw)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		want, err := strconv.ParseUint(strings.TrimSpace(num), 10, bits)
		require.NoError(t, err, "%s: only an integer of the type's width decodes", raw)
		require.Equal(t, want, v.Uint(), raw)
	case reflect.Float32:
		require.False(t, math.IsInf(v.Float(), 0) || math.IsNaN(v.Float()), raw)
	default:
		t.Fatalf("%s: no field %q", raw, name)
	}
}

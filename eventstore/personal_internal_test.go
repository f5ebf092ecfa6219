package eventstore

import (
	"bytes"
	"context"
	"crypto/cipher"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// memberText is a scanned member as text: its decoded name and its value.
type memberText struct{ name, value string }

func membersOf(data []byte, obj jsonObject) []memberText {
	out := []memberText{}
	for _, m := range obj.members {
		out = append(out, memberText{string(m.name(data)), string(data[m.valueStart:m.valueEnd])})
	}
	return out
}

// scanObject finds the top-level members of an object, whatever its
// values hold, and accepts what json.Valid accepts of objects and null.
func TestScanObject(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []memberText // nil: refused
		null bool
	}{
		{in: `{}`, want: []memberText{}},
		{in: " \t\r\n{ \n } \n", want: []memberText{}},
		{in: `null`, want: []memberText{}, null: true},
		{in: ` null `, want: []memberText{}, null: true},
		{in: `{"a":1}`, want: []memberText{{"a", "1"}}},
		{in: `{ "a" : "x" , "b" :true,"c":false,"d":null }`, want: []memberText{{"a", `"x"`}, {"b", "true"}, {"c", "false"}, {"d", "null"}}},
		// Escaped quotes and backslashes in names and values.
		{in: `{"a\"b":"c\"d\\","e\\":"\\"}`, want: []memberText{{`a"b`, `"c\"d\\"`}, {`e\`, `"\\"`}}},
		// Unicode escapes, and text that is not ASCII.
		{in: `{"n\u0061me":"\u00e9\uD83D\uDE00","é":"ü"}`, want: []memberText{{"name", `"\u00e9\uD83D\uDE00"`}, {"é", `"ü"`}}},
		// Nested values holding the names, braces and quotes.
		{in: `{"x":{"name":{"name":"}"}},"y":["name","]",{"a":[]}],"name":"n"}`,
			want: []memberText{{"x", `{"name":{"name":"}"}}`}, {"y", `["name","]",{"a":[]}]`}, {"name", `"n"`}}},
		// Numbers.
		{in: `{"a":0,"b":-0,"c":12.5e+3,"d":-1E-2,"e":1.0e9,"f":123}`,
			want: []memberText{{"a", "0"}, {"b", "-0"}, {"c", "12.5e+3"}, {"d", "-1E-2"}, {"e", "1.0e9"}, {"f", "123"}}},
		// Duplicate names: each is a member.
		{in: `{"a":1,"a":2}`, want: []memberText{{"a", "1"}, {"a", "2"}}},
		{in: `{"":""}`, want: []memberText{{"", `""`}}},

		{in: ``}, {in: ` `}, {in: `{`}, {in: `}`}, {in: `[]`}, {in: `[{"a":1}]`}, {in: `"s"`}, {in: `1`}, {in: `true`},
		{in: `nul`}, {in: `nulll`}, {in: `null x`}, {in: `{"a":1} x`}, {in: `{"a":1}}`}, {in: `{"a":1,}`}, {in: `{,}`},
		{in: `{"a"}`}, {in: `{"a":}`}, {in: `{"a" 1}`}, {in: `{a:1}`}, {in: `{'a':1}`}, {in: `{"a":1 "b":2}`},
		{in: `{"a":01}`}, {in: `{"a":1.}`}, {in: `{"a":.5}`}, {in: `{"a":-}`}, {in: `{"a":1e}`}, {in: `{"a":1e+}`},
		{in: `{"a":+1}`}, {in: `{"a":0x1}`}, {in: `{"a":NaN}`}, {in: `{"a":tru}`}, {in: `{"a":truex}`},
		{in: `{"a":"\x"}`}, {in: `{"a":"\u12"}`}, {in: `{"a":"\u12g4"}`}, {in: "{\"a\":\"\x01\"}"}, {in: "{\"a\":\"\n\"}"},
		{in: `{"a":"x}`}, {in: `{"a":[1,]}`}, {in: `{"a":[1 2]}`}, {in: `{"a":{"b"}}`}, {in: `{"a":{"b":1,}}`},
		{in: `{"a":[}`}, {in: `{"a":{]}`}, {in: "\x00{}"}, {in: "{}\x00"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			obj, ok := scanObject([]byte(tc.in), nil)
			var decoded map[string]json.RawMessage
			require.Equal(t, json.Unmarshal([]byte(tc.in), &decoded) == nil, ok, "agrees with encoding/json")
			if tc.want == nil {
				require.False(t, ok)
				return
			}
			require.True(t, ok)
			require.Equal(t, tc.null, obj.null)
			require.Equal(t, tc.want, membersOf([]byte(tc.in), obj))
			if !tc.null {
				require.Equal(t, byte('}'), tc.in[obj.end])
			}
		})
	}
}

// Names and string values without escapes, in valid UTF-8, are plain: the
// text between their quotes is what they decode to.
func TestScanObjectPlain(t *testing.T) {
	in := []byte("{\"a\":\"x\",\"b\\n\":\"y\\\"\",\"é\":\"\xff\",\"c\":1}")
	obj, ok := scanObject(in, nil)
	require.True(t, ok)
	var plain [][2]bool
	for _, m := range obj.members {
		plain = append(plain, [2]bool{m.plainName, m.plainValue})
	}
	require.Equal(t, [][2]bool{{true, true}, {false, false}, {true, false}, {true, false}}, plain)
}

// The nesting limit is encoding/json's.
func TestScanObjectDepth(t *testing.T) {
	for _, depth := range []int{maxJSONDepth - 1, maxJSONDepth, maxJSONDepth + 1} {
		in := []byte(`{"a":` + strings.Repeat("[", depth-1) + strings.Repeat("]", depth-1) + `}`)
		_, ok := scanObject(in, nil)
		require.Equal(t, json.Valid(in), ok, "depth %d", depth)
		require.Equal(t, depth <= maxJSONDepth, ok, "depth %d", depth)
	}
}

// The reference implementations: sealing and opening as written with
// encoding/json before the scanner, the whole payload decoded into a map
// and encoded again.

func sealFieldsJSON(payload []byte, personal map[string]string, cipherOf func(subject string) cipher.AEAD, place string) ([]byte, map[string]string, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(payload, &obj); err != nil {
		return nil, nil, fmt.Errorf("personal fields: the payload is not a JSON object: %w", err)
	}
	var sealed map[string]string
	for field, subject := range personal {
		v, ok := obj[field]
		if !ok || string(v) == "null" {
			continue
		}
		aead := cipherOf(subject)
		if aead == nil {
			return nil, nil, fmt.Errorf("personal field %s: no data key for subject %q", field, subject)
		}
		text, err := seal(nil, aead, v, []byte(place+"|"+field+"|"+subject))
		if err != nil {
			return nil, nil, err
		}
		obj[field], _ = json.Marshal(sealedPrefix + base64.RawStdEncoding.EncodeToString(text))
		if sealed == nil {
			sealed = map[string]string{}
		}
		sealed[field] = subject
	}
	if sealed == nil {
		return payload, nil, nil
	}
	out, err := json.Marshal(obj)
	return out, sealed, err
}

func openFieldsJSON(payload []byte, personal map[string]string, ciphers map[string]cipher.AEAD, place string) ([]byte, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(payload, &obj); err != nil {
		return nil, err
	}
	for field, subject := range personal {
		obj[field] = openValueJSON(obj[field], ciphers[subject], []byte(place+"|"+field+"|"+subject))
	}
	return json.Marshal(obj)
}

func openValueJSON(v json.RawMessage, aead cipher.AEAD, aad []byte) json.RawMessage {
	var str string
	if aead == nil || json.Unmarshal(v, &str) != nil || !strings.HasPrefix(str, sealedPrefix) {
		return json.RawMessage("null")
	}
	text, err := base64.RawStdEncoding.DecodeString(str[len(sealedPrefix):])
	if err != nil {
		return json.RawMessage("null")
	}
	plain, err := open(nil, aead, text, aad)
	if err != nil {
		return json.RawMessage("null")
	}
	return plain
}

// personalFixture is a store whose keys need no provider call, two
// subjects' ciphers and their keys as a read finds them.
type personalFixture struct {
	s       *Store
	ciphers map[string]cipher.AEAD
	keys    []rowKey
}

func newPersonalFixture(t testing.TB) personalFixture {
	f := personalFixture{s: &Store{cfg: Config{}.WithDefaults()}, ciphers: map[string]cipher.AEAD{}}
	kek := bytes.Repeat([]byte{7}, 32)
	var err error
	f.s.cfg.Keys, err = NewLocalKeys(kek)
	require.NoError(t, err)
	for i, subject := range []string{"s1", "s\"2"} {
		aead, err := newGCM(bytes.Repeat([]byte{byte(i + 1)}, 32))
		require.NoError(t, err)
		f.ciphers[subject] = aead
		f.keys = append(f.keys, rowKey{subject: []byte(subject), aead: aead, looked: true})
	}
	return f
}

func (f personalFixture) cipherOf(subject string) cipher.AEAD { return f.ciphers[subject] }

// open opens a sealed payload as a read does, from its personal column.
func (f personalFixture) open(t testing.TB, payload []byte, column *string, place string) []byte {
	var fields []rowField
	if column != nil {
		var err error
		fields, err = rowFieldsOf([]byte(*column), nil)
		require.NoError(t, err)
	}
	out, err := f.s.openFields(context.Background(), payload, fields, slices.Clone(f.keys), place)
	require.NoError(t, err)
	return out
}

// decodeJSON decodes any JSON value, numbers as written.
func decodeJSON(t testing.TB, b []byte) any {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	require.NoError(t, d.Decode(&v), "%s", b)
	return v
}

func requireSameJSON(t testing.TB, want, got []byte) {
	t.Helper()
	if !reflect.DeepEqual(decodeJSON(t, want), decodeJSON(t, got)) {
		t.Fatalf("not the same JSON:\nwant %s\n got %s", want, got)
	}
}

// Sealing replaces the values of the personal fields in place: the rest
// of the payload keeps its order, white space and nested values (which
// may hold the same names); a missing or null field is left, and opening
// restores the payload.
func TestSealFieldsInPlace(t *testing.T) {
	f := newPersonalFixture(t)
	payload := []byte(`{ "plan": "gold", "name" : {"first":"Ada","email":"x"}, "phone":null,
	"list":["name","email"], "seats":12 }`)
	personal := map[string]string{"name": "s1", "email": "s\"2", "phone": "s1"}
	out, column, err := sealFields(payload, personal, f.cipherOf, "p")
	require.NoError(t, err)
	require.NotNil(t, column)
	require.JSONEq(t, `{"name":"s1"}`, *column)
	obj, ok := scanObject(out, nil)
	require.True(t, ok)
	got := membersOf(out, obj)
	require.Len(t, got, 5)
	require.True(t, strings.HasPrefix(got[1].value, `"`+sealedPrefix), got[1].value)
	require.Equal(t, `{ "plan": "gold", "name" : `+got[1].value+`, "phone":null,
	"list":["name","email"], "seats":12 }`, string(out))
	require.Equal(t, string(payload), string(f.open(t, out, column, "p")))

	// Nothing to seal: the payload as it is.
	out, column, err = sealFields([]byte(` {"phone":null, "x":{"name":1}} `), personal, f.cipherOf, "p")
	require.NoError(t, err)
	require.Nil(t, column)
	require.Equal(t, ` {"phone":null, "x":{"name":1}} `, string(out))
	out, column, err = sealFields([]byte(`null`), personal, f.cipherOf, "p")
	require.NoError(t, err)
	require.Nil(t, column)
	require.Equal(t, `null`, string(out))
}

// A personal field's name that a payload holds twice is sealed as
// encoding/json and jsonb read it: the last member wins, and the earlier
// ones are dropped rather than stored open. An escaped name is the name
// it decodes to.
func TestSealFieldsDuplicateAndEscapedNames(t *testing.T) {
	f := newPersonalFixture(t)
	personal := map[string]string{"name": "s1", `a"b`: "s\"2"}
	payload := []byte(`{"name":"first","x":1,"n\u0061me":"second","a\"b":[1],"y":{"name":0},"name":"last","z":2}`)
	out, column, err := sealFields(payload, personal, f.cipherOf, "p")
	require.NoError(t, err)
	require.JSONEq(t, `{"name":"s1","a\"b":"s\"2"}`, *column)
	obj, ok := scanObject(out, nil)
	require.True(t, ok)
	got := membersOf(out, obj)
	names := []string{}
	for _, m := range got {
		names = append(names, m.name)
	}
	require.Equal(t, []string{"x", `a"b`, "y", "name", "z"}, names)
	require.NotContains(t, string(out), "first")
	require.NotContains(t, string(out), "second")
	require.NotContains(t, string(out), "last")
	require.Equal(t, `{"x":1,"a\"b":[1],"y":{"name":0},"name":"last","z":2}`, string(f.open(t, out, column, "p")))

	// Opening drops earlier members of a sealed name too, and adds a
	// sealed field the payload lacks as null.
	opened, err := f.s.openFields(context.Background(), []byte(`{"name":1,"name":2, "b":3 }`),
		[]rowField{{[]byte("name"), []byte("s1")}, {[]byte("gone"), []byte("s1")}}, f.keys, "p")
	require.NoError(t, err)
	require.Equal(t, `{"name":null, "b":3 ,"gone":null}`, string(opened))
	opened, err = f.s.openFields(context.Background(), []byte(`{}`), []rowField{{[]byte("a<b"), []byte("s1")}}, f.keys, "p")
	require.NoError(t, err)
	require.Equal(t, `{"a\u003cb":null}`, string(opened))
}

// A value opens only with its subject's key and where it was sealed; else,
// as for a forgotten subject, it reads as null.
func TestOpenFieldsNull(t *testing.T) {
	f := newPersonalFixture(t)
	out, column, err := sealFields([]byte(`{"name":"Ada","email":"ada@example.org"}`), map[string]string{"name": "s1", "email": "s\"2"}, f.cipherOf, "p")
	require.NoError(t, err)
	require.Equal(t, `{"name":null,"email":null}`, string(f.open(t, out, column, "elsewhere")))
	fields, err := rowFieldsOf([]byte(*column), nil)
	require.NoError(t, err)
	opened, err := f.s.openFields(context.Background(), out, fields, f.keys[:1], "p") // s"2 forgotten
	require.NoError(t, err)
	require.Equal(t, `{"name":"Ada","email":null}`, string(opened))
	// Values that are not sealed.
	opened, err = f.s.openFields(context.Background(), []byte(`{"name":"Ada","email":{"a":1}}`), fields, f.keys, "p")
	require.NoError(t, err)
	require.Equal(t, `{"name":null,"email":null}`, string(opened))
}

// Input that is not a JSON object fails as it did with encoding/json, with
// the same errors.
func TestPersonalFieldsInvalid(t *testing.T) {
	f := newPersonalFixture(t)
	personal := map[string]string{"name": "s1"}
	for _, in := range []string{`[1]`, `"s"`, `{"name":1,}`, `{"name":"\x"}`, ``, `{"a":1} {}`} {
		_, _, err := sealFields([]byte(in), personal, f.cipherOf, "p")
		_, _, want := sealFieldsJSON([]byte(in), personal, f.cipherOf, "p")
		require.Error(t, err, in)
		require.EqualError(t, err, want.Error(), in)
		_, err = f.s.openFields(context.Background(), []byte(in), []rowField{{[]byte("name"), []byte("s1")}}, f.keys, "p")
		_, want = openFieldsJSON([]byte(in), personal, f.ciphers, "p")
		require.EqualError(t, err, want.Error(), in)
	}
	_, _, err := sealFields([]byte(`{"name":1}`), map[string]string{"name": "nobody"}, f.cipherOf, "p")
	require.EqualError(t, err, `personal field name: no data key for subject "nobody"`)
}

// A row's personal and keys columns decode as encoding/json decoded them,
// through the scanner when they hold no escapes.
func TestRowColumns(t *testing.T) {
	for _, in := range []string{`{"email": "s1", "name": "s1"}`, `{"a\"b": "s\u0031"}`, `{}`, `null`} {
		fields, err := rowFieldsOf([]byte(in), nil)
		require.NoError(t, err)
		var want map[string]string
		require.NoError(t, json.Unmarshal([]byte(in), &want))
		got := map[string]string{}
		for _, f := range fields {
			got[string(f.field)] = string(f.subject)
		}
		if want == nil {
			want = map[string]string{}
		}
		require.Equal(t, want, got, in)
	}
	for _, in := range []string{`{"a":1}`, `[]`, `{"a":"b"`} {
		_, err := rowFieldsOf([]byte(in), nil)
		var want map[string]string
		require.EqualError(t, err, json.Unmarshal([]byte(in), &want).Error(), in)
	}

	w := hex.EncodeToString([]byte("wrapped"))
	for _, in := range []string{`{"s1": ["local:1", "` + w + `"], "s2": ["k\u0032", "` + w + `"]}`, `{"s\"1":["k","` + w + `"]}`, `{}`} {
		keys, err := rowKeysOf([]byte(in), nil)
		require.NoError(t, err)
		var want map[string][2]string
		require.NoError(t, json.Unmarshal([]byte(in), &want))
		got := map[string][2]string{}
		for _, k := range keys {
			require.Equal(t, "wrapped", string(k.wrapped))
			got[string(k.subject)] = [2]string{string(k.kek), w}
		}
		require.Equal(t, want, got, in)
	}
	keys, err := rowKeysOf(nil, nil)
	require.NoError(t, err)
	require.Empty(t, keys)
	// A key as a read answers it takes the scanner's path.
	_, _, ok := stringPair([]byte(`["local:0123456789abcdef", "` + hex.EncodeToString(bytes.Repeat([]byte{0xab}, 60)) + `"]`))
	require.True(t, ok)
	for _, in := range []string{`{"s1":["k","!"]}`, `{"s1":["k",1]}`, `[]`} {
		_, err := rowKeysOf([]byte(in), nil)
		require.Error(t, err, in)
	}
}

// FuzzPersonalFields holds the scanner to encoding/json: it accepts what
// encoding/json decodes as an object, and sealing and opening in place
// give the same JSON (decoded) and the same errors as decoding the payload
// into a map and encoding it again did.
func FuzzPersonalFields(f *testing.F) {
	for _, seed := range []string{
		`{"name":"Ada Lovelace","email":"ada@example.org","phone":"+44 20 7946 0000","plan":"gold","seats":12}`,
		`{"name":null,"email":{"name":"x"},"x":["email"]}`,
		`{"name":1,"name":2,"n\u0061me":3}`,
		`{"a\"b":"\"","é":"\u00e9","":[]}`,
		` { "email" : -1.5e3 , "name":true } `,
		`null`, `[]`, `{"name":}`, `{"name":"x"`, "{\"name\":\"\xff\"}", `{"name":01}`,
	} {
		f.Add([]byte(seed))
	}
	fx := newPersonalFixture(f)
	personal := map[string]string{"name": "s1", "email": "s\"2", `a"b`: "s1", "é": "s\"2", "": "s1"}
	column := map[string]string{}
	for field, subject := range personal {
		column[field] = subject
	}
	colJSON, _ := json.Marshal(column)
	f.Fuzz(func(t *testing.T, payload []byte) {
		var decoded map[string]json.RawMessage
		decodeErr := json.Unmarshal(payload, &decoded)
		obj, ok := scanObject(payload, nil)
		if ok != (decodeErr == nil) {
			t.Fatalf("scanObject ok %v, encoding/json: %v", ok, decodeErr)
		}

		out, sealed, err := sealFields(payload, personal, fx.cipherOf, "p")
		refOut, refSealed, refErr := sealFieldsJSON(payload, personal, fx.cipherOf, "p")
		if (err == nil) != (refErr == nil) || err != nil && err.Error() != refErr.Error() {
			t.Fatalf("sealFields: %v, reference: %v", err, refErr)
		}
		if err == nil {
			var got map[string]string
			if sealed != nil {
				require.NoError(t, json.Unmarshal([]byte(*sealed), &got))
			}
			require.Equal(t, refSealed, got)
			if sealed == nil {
				require.Equal(t, payload, out)
			} else {
				require.True(t, json.Valid(out), "%s", out)
				// Opened, both give the payload (decoded).
				opened := fx.open(t, out, sealed, "p")
				refOpened, err := openFieldsJSON(refOut, refSealed, fx.ciphers, "p")
				require.NoError(t, err)
				requireSameJSON(t, refOpened, opened)
				requireSameJSON(t, payload, opened)
				// Sealed, the other fields are the same.
				var a, b map[string]json.RawMessage
				require.NoError(t, json.Unmarshal(out, &a))
				require.NoError(t, json.Unmarshal(refOut, &b))
				require.ElementsMatch(t, slices.Collect(maps.Keys(b)), slices.Collect(maps.Keys(a)))
				for k, v := range b {
					if _, s := refSealed[k]; !s {
						requireSameJSON(t, v, a[k])
					}
				}
			}
		}

		// Opening what was never sealed: every field null, present or not.
		if ok && obj.null {
			return // encoding/json panicked on null (a nil map)
		}
		fields, err := rowFieldsOf(colJSON, nil)
		require.NoError(t, err)
		opened, err := fx.s.openFields(context.Background(), payload, fields, slices.Clone(fx.keys), "p")
		refOpened, refErr := openFieldsJSON(payload, personal, fx.ciphers, "p")
		if (err == nil) != (refErr == nil) || err != nil && err.Error() != refErr.Error() {
			t.Fatalf("openFields: %v, reference: %v", err, refErr)
		}
		if err == nil {
			requireSameJSON(t, refOpened, opened)
		}
	})
}

// BenchmarkPersonalFields seals and opens the three personal fields of
// the bench's payload (internal/bench, group personal): in place, and as
// encoding/json did.
func BenchmarkPersonalFields(b *testing.B) {
	fx := newPersonalFixture(b)
	payload := []byte(`{"name":"Ada Lovelace","email":"ada@example.org","phone":"+44 20 7946 0000","plan":"gold","seats":12}`)
	personal := map[string]string{"name": "s1", "email": "s1", "phone": "s1"}
	place := eventPlace([16]byte{1}, [16]byte{2}, 1, "CustomerRegistered")
	wrapped := bytes.Repeat([]byte{9}, 60)
	fx.s.keys.put("local:0123456789abcdef", wrapped, fx.ciphers["s1"])
	keys := []byte(`{"s1": ["local:0123456789abcdef", "` + hex.EncodeToString(wrapped) + `"]}`)
	ctx := context.Background()
	for _, impl := range []struct {
		name string
		run  func() ([]byte, error)
	}{{"in place", func() ([]byte, error) {
		out, column, err := sealFields(payload, personal, fx.cipherOf, place)
		if err != nil {
			return nil, err
		}
		return fx.s.openSealed(ctx, out, []byte(*column), keys, place)
	}}, {"encoding/json", func() ([]byte, error) {
		out, sealed, err := sealFieldsJSON(payload, personal, fx.cipherOf, place)
		if err != nil {
			return nil, err
		}
		column, _ := json.Marshal(sealed)
		var fields map[string]string
		var ks map[string][2]string
		if err := errors.Join(json.Unmarshal(column, &fields), json.Unmarshal(keys, &ks)); err != nil {
			return nil, err
		}
		w, _ := hex.DecodeString(ks["s1"][1])
		aead, err := fx.s.keys.aead(ctx, nil, ks["s1"][0], w)
		if err != nil {
			return nil, err
		}
		return openFieldsJSON(out, fields, map[string]cipher.AEAD{"s1": aead}, place)
	}}} {
		b.Run(impl.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if opened, err := impl.run(); err != nil || !bytes.Contains(opened, []byte("Ada")) {
					b.Fatal(err, string(opened))
				}
			}
		})
	}
}

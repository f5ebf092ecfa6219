package http

import (
	"encoding/json"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// The splitters answer what encoding/json answers for every valid body
// in UTF-8 whose objects hold each key once (what readBody lets through): the same
// members and values, the same elements, and "no object" or "no array"
// for the same inputs.
func FuzzSplittersMatchEncodingJSON(f *testing.F) {
	for _, s := range []string{
		`{}`, ` { } `, `[]`, `null`, `"x"`, `12`, `true`, `{"type":"a.b","payload":{"x":[1,{"y":"}"}]}}`,
		`{"t\u0079pe":"x","payload" : null , "extra":[ ]}`, `{"a":"\"\\","b":-1.5e3,"c":false}`, `[{"a":1}, {"b":[2]} ,3,"]"]`,
		`{"commands":[{"type":"x","payload":{}},{"type":"y"}]}`, "{\n\t\"a\"\r:\n1\n}", `{"a":{}}`, `[[]]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if !utf8.Valid(body) || !json.Valid(body) || scanValid(append([]byte(`{"v":`), append(body, '}')...), 64) != nil {
			return
		}
		var obj map[string]json.RawMessage
		objErr := json.Unmarshal(body, &obj)
		members, ok := membersOf(body)
		require.Equal(t, objErr == nil && obj != nil, ok, "%s", body)
		if ok {
			require.Len(t, members, len(obj), "%s", body)
			for _, m := range members {
				require.Equal(t, string(obj[string(m.key)]), string(m.value), "%s: member %q", body, m.key)
			}
		}
		var arr []json.RawMessage
		arrErr := json.Unmarshal(body, &arr)
		elems, ok := elementsOf(body)
		require.Equal(t, arrErr == nil && arr != nil, ok, "%s", body)
		require.Len(t, elems, len(arr), "%s", body)
		for i := range arr {
			require.Equal(t, string(arr[i]), string(elems[i]), "%s: element %d", body, i)
		}
		if s, ok := stringOf(body); ok {
			var want string
			require.NoError(t, json.Unmarshal(body, &want))
			require.Equal(t, want, s)
		}
	})
}

// Splitting a write's envelope decodes nothing: the payload is a slice of
// the body (the registry's codec decodes it, once), and the only
// allocations are the member list and the handler name.
func TestEnvelopeIsSplitNotDecoded(t *testing.T) {
	body := []byte(`{"type":"task.create","payload":{"title":"buy milk","done":false,"tags":["a","b"]}}`)
	req, fields := parseRequest(body, "")
	require.Empty(t, fields)
	require.Equal(t, "task.create", req.Type)
	require.JSONEq(t, `{"title":"buy milk","done":false,"tags":["a","b"]}`, string(req.Payload))
	require.Equal(t, &body[len(`{"type":"task.create","payload":`)], &req.Payload[0], "the payload is the body's bytes, not a copy")
	allocs := testing.AllocsPerRun(100, func() { parseRequest(body, "") })
	require.LessOrEqual(t, allocs, 2.0, "the envelope split allocates the member list and the handler name only")
}

// The splitters stop, answering false, on bytes that are not valid JSON
// rather than reading past them.
func TestSplittersRefuseTruncatedInput(t *testing.T) {
	for _, s := range []string{`{`, `{"a"`, `{"a":`, `{"a":1`, `{"a":"x`, `{"a":[1,`, `{"a":{"b":"\"}}`, `[`, `[1`, `["x`, `[1 2]`, `{"a":1 "b":2}`, ``} {
		_, ok := membersOf([]byte(s))
		require.False(t, ok, "members of %q", s)
		_, ok = elementsOf([]byte(s))
		require.False(t, ok, "elements of %q", s)
	}
}

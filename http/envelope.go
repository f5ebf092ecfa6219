package http

import (
	"bytes"
	"encoding/json"
)

// The envelopes of /api/write, /api/query, /api/command and /api/batch are
// split from the body readBody checked already (valid JSON, no key twice in
// one object, nesting bounded): the splitters below walk its bytes once and
// hand out slices of it, without validating or copying it again. The
// payload is decoded once, by the registry's codec.

// member is one key of a JSON object and its value, a slice of the body.
type member struct {
	key, value []byte
}

// membersOf splits raw, a JSON object, into its members in order, keys
// unescaped; false when raw is no object. raw must be valid JSON (the
// walk stops, answering false, where it is not).
func membersOf(raw []byte) ([]member, bool) {
	i := skipSpace(raw, 0)
	if i >= len(raw) || raw[i] != '{' {
		return nil, false
	}
	out := make([]member, 0, 2)
	if i = skipSpace(raw, i+1); i < len(raw) && raw[i] == '}' {
		return out, true
	}
	for i < len(raw) && raw[i] == '"' {
		end := skipString(raw, i)
		if end < 0 {
			return nil, false
		}
		key, ok := unquoted(raw[i:end])
		if i = skipSpace(raw, end); !ok || i >= len(raw) || raw[i] != ':' {
			return nil, false
		}
		start := skipSpace(raw, i+1)
		end = skipValue(raw, start)
		if end < 0 {
			return nil, false
		}
		out = append(out, member{key: key, value: raw[start:end]})
		var done bool
		if i, done, ok = afterValue(raw, end, '}'); !ok || done {
			return out, ok
		}
	}
	return nil, false
}

// elementsOf splits raw, a JSON array, into its elements; false when raw
// is no array. raw must be valid JSON, as for membersOf.
func elementsOf(raw []byte) ([][]byte, bool) {
	i := skipSpace(raw, 0)
	if i >= len(raw) || raw[i] != '[' {
		return nil, false
	}
	var out [][]byte
	if i = skipSpace(raw, i+1); i < len(raw) && raw[i] == ']' {
		return out, true
	}
	for i < len(raw) {
		end := skipValue(raw, i)
		if end < 0 {
			return nil, false
		}
		out = append(out, raw[i:end])
		var done, ok bool
		if i, done, ok = afterValue(raw, end, ']'); !ok || done {
			return out, ok
		}
	}
	return nil, false
}

// afterValue moves past the value of an object or array that ends at
// end: to the next value after a comma, or onto the closing byte (done);
// false on anything else.
func afterValue(raw []byte, end int, closing byte) (i int, done, ok bool) {
	switch i = skipSpace(raw, end); {
	case i >= len(raw):
		return i, false, false
	case raw[i] == closing:
		return i, true, true
	case raw[i] == ',':
		return skipSpace(raw, i+1), false, true
	}
	return i, false, false
}

// stringOf returns the JSON string value v unquoted; false when v is no
// string.
func stringOf(v []byte) (string, bool) {
	if len(v) < 2 || v[0] != '"' {
		return "", false
	}
	s, ok := unquoted(v)
	return string(s), ok
}

// unquoted unquotes a JSON string (with its quotes): a slice of q when it
// holds no escape, else decoded as encoding/json decodes it.
func unquoted(q []byte) ([]byte, bool) {
	if len(q) < 2 || q[len(q)-1] != '"' {
		return nil, false
	}
	if bytes.IndexByte(q, '\\') < 0 {
		return q[1 : len(q)-1], true
	}
	var s string
	if err := json.Unmarshal(q, &s); err != nil {
		return nil, false
	}
	return []byte(s), true
}

// skipSpace returns the index of the first byte at or after i that is not
// JSON whitespace.
func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n') {
		i++
	}
	return i
}

// skipString returns the index just past the string starting at b[i] (a
// quote); -1 when it does not end.
func skipString(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return -1
}

// skipValue returns the index just past the value starting at b[i]; -1
// when there is none.
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for ; i < len(b); i++ {
			switch b[i] {
			case '"':
				end := skipString(b, i)
				if end < 0 {
					return -1
				}
				i = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
		}
		return -1
	}
	start := i
	for i < len(b) && b[i] != ',' && b[i] != '}' && b[i] != ']' && b[i] != ' ' && b[i] != '\t' && b[i] != '\r' && b[i] != '\n' {
		i++
	}
	if i == start {
		return -1
	}
	return i
}

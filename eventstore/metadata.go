package eventstore

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"
)

// decodeMetadata decodes a metadata column into m. The store writes only
// strings, and an object of strings for the headers, and PostgreSQL returns
// jsonb in one layout, so a short scanner reads nearly every row without
// reflection; whatever it does not expect (an escape, a null, another key or
// value type) is left to encoding/json, which then decides.
func decodeMetadata(b []byte, m *Metadata) error {
	if scanMetadata(b, m) {
		return nil
	}
	*m = Metadata{}
	return json.Unmarshal(b, m)
}

// scanMetadata reports whether it decoded b, an object of the Metadata keys
// with plain string values, into m.
func scanMetadata(b []byte, m *Metadata) bool {
	s := metaScanner{b: b}
	if !s.byte('{') {
		return false
	}
	if s.byte('}') {
		return s.end()
	}
	for {
		key, ok := s.str()
		if !ok || !s.byte(':') {
			return false
		}
		var field *string
		switch key {
		case "userId":
			field = &m.UserID
		case "requestId":
			field = &m.RequestID
		case "correlationId":
			field = &m.CorrelationID
		case "causationId":
			field = &m.CausationID
		case "idempotencyKey":
			field = &m.IdempotencyKey
		case "headers":
			if !s.headers(m) {
				return false
			}
		default:
			return false
		}
		if field != nil {
			if *field, ok = s.str(); !ok {
				return false
			}
		}
		if s.byte('}') {
			return s.end()
		}
		if !s.byte(',') {
			return false
		}
	}
}

// metaScanner walks a JSON text, skipping the whitespace between tokens.
type metaScanner struct {
	b []byte
	i int
}

func (s *metaScanner) skipSpace() {
	for s.i < len(s.b) && (s.b[s.i] == ' ' || s.b[s.i] == '\t' || s.b[s.i] == '\n' || s.b[s.i] == '\r') {
		s.i++
	}
}

// byte consumes c, the next token, if it is there.
func (s *metaScanner) byte(c byte) bool {
	s.skipSpace()
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

func (s *metaScanner) end() bool {
	s.skipSpace()
	return s.i == len(s.b)
}

// str consumes a string without escapes or control characters.
func (s *metaScanner) str() (string, bool) {
	if !s.byte('"') {
		return "", false
	}
	n := bytes.IndexByte(s.b[s.i:], '"')
	if n < 0 {
		return "", false
	}
	raw := s.b[s.i : s.i+n]
	for _, c := range raw {
		if c == '\\' || c < 0x20 {
			return "", false
		}
	}
	if !utf8.Valid(raw) {
		return "", false
	}
	s.i += n + 1
	return string(raw), true
}

// headers consumes an object of strings into m.Headers.
func (s *metaScanner) headers(m *Metadata) bool {
	if !s.byte('{') {
		return false
	}
	if m.Headers == nil { // a repeated key adds to the map, as encoding/json does
		m.Headers = map[string]string{}
	}
	h := m.Headers
	if s.byte('}') {
		return true
	}
	for {
		k, ok := s.str()
		if !ok || !s.byte(':') {
			return false
		}
		if h[k], ok = s.str(); !ok {
			return false
		}
		if s.byte('}') {
			return true
		}
		if !s.byte(',') {
			return false
		}
	}
}

package eventstore

import (
	"encoding/json"
	"unicode/utf8"
)

// A small JSON scanner for sealing and opening personal fields in place:
// it finds the members of a top-level object as offsets into its text, so
// that a field's value can be replaced without decoding the payload and
// encoding it again. It accepts exactly what json.Valid accepts (the
// fuzz test FuzzPersonalFields holds it to that), with encoding/json's
// nesting limit.

// jsonMember is one member of a JSON object, as offsets into its text: the
// name, quotes included, and the value.
type jsonMember struct {
	nameStart, nameEnd, valueStart, valueEnd int
	// plainName: the name has no escape and is valid UTF-8, so the text
	// between its quotes is the name; plainValue: the value is a string of
	// which the same holds.
	plainName, plainValue bool
	// op is what sealing or opening does with the member, and field the
	// index of the sealed field it is (openFields).
	op    memberOp
	field int
}

// memberOp is what is done to a member of a payload; the zero value keeps
// it as it is.
type memberOp uint8

const (
	// replaceMember: its value is sealed or opened.
	replaceMember memberOp = iota + 1
	// dropMember: a personal field's name appearing again later in the
	// object; encoding/json (and jsonb) keep the last one only.
	dropMember
)

// name is m's name in data, decoded.
func (m *jsonMember) name(data []byte) []byte {
	if m.plainName {
		return data[m.nameStart+1 : m.nameEnd-1]
	}
	var s string
	_ = json.Unmarshal(data[m.nameStart:m.nameEnd], &s) // valid: scanned
	return []byte(s)
}

// maxJSONDepth is encoding/json's nesting limit.
const maxJSONDepth = 10000

// jsonObject is a scanned top-level JSON value: an object's members and
// the offset of its closing brace, or null.
type jsonObject struct {
	members []jsonMember
	end     int
	null    bool
}

// scanObject scans data, one JSON value with optional white space around
// it, and appends the members of it to ms when it is an object. ok is
// false when data is not valid JSON or is neither an object nor null.
func scanObject(data []byte, ms []jsonMember) (obj jsonObject, ok bool) {
	s := jsonScan{data: data}
	s.space()
	switch s.peek() {
	case 'n':
		if !s.literal("null") {
			return obj, false
		}
		obj.null = true
	case '{':
		s.i++
		s.depth = 1
		s.space()
		if s.peek() == '}' {
			obj.end = s.i
			s.i++
			break
		}
		for {
			if s.peek() != '"' {
				return obj, false
			}
			m := jsonMember{nameStart: s.i}
			plain, ok := s.str()
			if !ok {
				return obj, false
			}
			m.nameEnd, m.plainName = s.i, plain
			s.space()
			if s.peek() != ':' {
				return obj, false
			}
			s.i++
			s.space()
			m.valueStart = s.i
			if s.peek() == '"' {
				plain, ok = s.str()
				m.plainValue = plain
			} else {
				ok = s.value()
			}
			if !ok {
				return obj, false
			}
			m.valueEnd = s.i
			ms = append(ms, m)
			s.space()
			if c := s.peek(); c == ',' {
				s.i++
				s.space()
				continue
			} else if c != '}' {
				return obj, false
			}
			obj.end = s.i
			s.i++
			break
		}
	default:
		return obj, false
	}
	s.space()
	obj.members = ms
	return obj, s.i == len(data)
}

// jsonScan is the position of a scan in data, and its depth of nesting.
type jsonScan struct {
	data     []byte
	i, depth int
}

// peek is the byte at the position; 0 at the end.
func (s *jsonScan) peek() byte {
	if s.i < len(s.data) {
		return s.data[s.i]
	}
	return 0
}

// space skips white space.
func (s *jsonScan) space() {
	for s.i < len(s.data) {
		switch s.data[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// value skips one value.
func (s *jsonScan) value() bool {
	switch c := s.peek(); {
	case c == '"':
		_, ok := s.str()
		return ok
	case c == '{':
		return s.nested('}')
	case c == '[':
		return s.nested(']')
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	case c == '-' || c >= '0' && c <= '9':
		return s.number()
	}
	return false
}

// literal skips lit.
func (s *jsonScan) literal(lit string) bool {
	if len(s.data)-s.i < len(lit) || string(s.data[s.i:s.i+len(lit)]) != lit {
		return false
	}
	s.i += len(lit)
	return true
}

// str skips a string; plain: it has no escape and is valid UTF-8.
func (s *jsonScan) str() (plain, ok bool) {
	start := s.i + 1
	plain, ascii := true, true
	for s.i++; s.i < len(s.data); {
		switch c := s.data[s.i]; {
		case c == '"':
			s.i++
			if plain && !ascii {
				plain = utf8.Valid(s.data[start : s.i-1])
			}
			return plain, true
		case c == '\\':
			plain = false
			s.i++
			switch s.peek() {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.i++
			case 'u':
				if len(s.data)-s.i < 5 {
					return false, false
				}
				for _, h := range s.data[s.i+1 : s.i+5] {
					if !isHex(h) {
						return false, false
					}
				}
				s.i += 5
			default:
				return false, false
			}
		case c < 0x20:
			return false, false
		default:
			if c >= utf8.RuneSelf {
				ascii = false
			}
			s.i++
		}
	}
	return false, false
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// digits skips one digit or more.
func (s *jsonScan) digits() bool {
	start := s.i
	for s.i < len(s.data) && s.data[s.i] >= '0' && s.data[s.i] <= '9' {
		s.i++
	}
	return s.i > start
}

// number skips a number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *jsonScan) number() bool {
	if s.peek() == '-' {
		s.i++
	}
	switch c := s.peek(); {
	case c == '0':
		s.i++
	case c >= '1' && c <= '9':
		s.digits()
	default:
		return false
	}
	if s.peek() == '.' {
		s.i++
		if !s.digits() {
			return false
		}
	}
	if c := s.peek(); c == 'e' || c == 'E' {
		s.i++
		if c := s.peek(); c == '+' || c == '-' {
			s.i++
		}
		if !s.digits() {
			return false
		}
	}
	return true
}

// nested skips an object (end '}') or an array (end ']').
func (s *jsonScan) nested(end byte) bool {
	if s.depth++; s.depth > maxJSONDepth {
		return false
	}
	s.i++
	s.space()
	if s.peek() == end {
		s.i++
		s.depth--
		return true
	}
	for {
		if end == '}' { // a member's name first
			if s.peek() != '"' {
				return false
			}
			if _, ok := s.str(); !ok || !s.punct(':') {
				return false
			}
		}
		if !s.value() {
			return false
		}
		s.space()
		switch s.peek() {
		case ',':
			s.i++
			s.space()
		case end:
			s.i++
			s.depth--
			return true
		default:
			return false
		}
	}
}

// stringPair returns the two strings of v, a JSON array of two strings
// without escapes (as keysOfRow answers a key); ok false for anything
// else.
func stringPair(v []byte) (a, b []byte, ok bool) {
	s := jsonScan{data: v}
	if !s.punct('[') {
		return nil, nil, false
	}
	if a, ok = s.plainString(); !ok || !s.punct(',') {
		return nil, nil, false
	}
	if b, ok = s.plainString(); !ok || !s.punct(']') {
		return nil, nil, false
	}
	return a, b, s.i == len(v)
}

// punct skips c and the white space around it.
func (s *jsonScan) punct(c byte) bool {
	s.space()
	if s.peek() != c {
		return false
	}
	s.i++
	s.space()
	return true
}

// plainString scans a string without escapes and returns its text.
func (s *jsonScan) plainString() ([]byte, bool) {
	start := s.i
	if s.peek() != '"' {
		return nil, false
	}
	if plain, ok := s.str(); !plain || !ok {
		return nil, false
	}
	return s.data[start+1 : s.i-1], true
}

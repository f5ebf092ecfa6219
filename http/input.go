package http

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"github.com/kumiko-go/kumiko/kumikotype"
	"github.com/kumiko-go/kumiko/pipeline"
	"github.com/kumiko-go/kumiko/registry"
)

// maxTypeLen is the longest handler name an envelope may carry.
const maxTypeLen = 200

// readBody returns the middleware that reads and checks a JSON request body
// before anything else looks at it: content type, size, UTF-8, syntax,
// nesting (the payload may nest MaxDepth levels below the envelope's
// envelopeDepth levels) and trailing data. The body is left on the context.
func (s *Server) readBody(envelopeDepth int) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			body, err := readJSON(c.Request(), s.cfg.BodyLimit, s.cfg.MaxDepth+envelopeDepth)
			if err != nil {
				return err
			}
			c.Set(keyBody, body)
			return next(c)
		}
	}
}

func bodyOf(c echo.Context) []byte {
	b, _ := c.Get(keyBody).([]byte)
	return b
}

func readJSON(r *http.Request, limit int64, maxDepth int) ([]byte, error) {
	if err := checkContentType(r.Header.Get(echo.HeaderContentType)); err != nil {
		return nil, err
	}
	tooLarge := newAPIError(codePayloadTooLarge, "", fmt.Sprintf("the request body exceeds %d bytes", limit))
	if r.ContentLength > limit {
		return nil, tooLarge
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err != nil {
		return nil, invalidInput(kumikotype.ReasonUnreadableBody, "the request body could not be read").WithCause(err)
	}
	if int64(len(body)) > limit {
		return nil, tooLarge
	}
	if !utf8.Valid(body) {
		return nil, invalidInput(kumikotype.ReasonInvalidUTF8, "the request body is not valid UTF-8")
	}
	if err := scanJSON(body, maxDepth); err != nil {
		return nil, err
	}
	return body, nil
}

// checkContentType accepts application/json with at most a UTF-8 charset.
func checkContentType(ct string) error {
	bad := invalidInput(kumikotype.ReasonContentType, "the Content-Type must be application/json")
	if ct == "" {
		return bad
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil || mt != "application/json" {
		return bad
	}
	for k, v := range params {
		if k != "charset" || !strings.EqualFold(v, "utf-8") {
			return bad
		}
	}
	return nil
}

// scanJSON refuses malformed JSON, a top-level value that is not an object,
// nesting deeper than maxDepth, strings holding U+0000 (PostgreSQL cannot
// store them), an object key given twice at any depth, and anything after
// the value. A valid body (json.Valid, which allocates nothing) is checked
// by one pass over its bytes (scanValid); an invalid one by walking its
// tokens (scanTokens), which names what is wrong.
func scanJSON(body []byte, maxDepth int) error {
	if json.Valid(body) {
		return scanValid(body, maxDepth)
	}
	return scanTokens(body, maxDepth)
}

// scanFrame is an object or array open at some point of scanValid.
type scanFrame struct {
	object bool
	// index is the current element of an array.
	index int
	// first is where the object's keys start in keyScan.keys.
	first int
	// set holds the keys of an object of more than keysListed keys.
	set map[string]struct{}
	// wantKey: the next token of the object is a key (scanTokens only).
	wantKey bool
}

// keysListed is how many keys of one object are compared one by one
// before they are put in a map: small objects, nearly all of them, cost no
// allocation, and an object of many keys costs one lookup per key.
const keysListed = 16

// keyScan finds the first object key given twice in one object. Keys are
// compared as decoded ("a" and "\u0061" are one key, as they are to
// encoding/json, which keeps the last), and the duplicate is named by its
// JSON path.
type keyScan struct {
	frames []scanFrame
	// keys are the keys of the open objects, outermost first, unescaped;
	// the last key of an object is the one its current value belongs to.
	keys [][]byte
}

// keyScans keeps the buffers of scanValid for reuse: a body is then
// scanned without allocating, unless an object holds many keys.
var keyScans = sync.Pool{New: func() any {
	return &keyScan{frames: make([]scanFrame, 0, 16), keys: make([][]byte, 0, 32)}
}}

// release empties k, forgetting the body it points into, and returns it to
// keyScans.
func (k *keyScan) release() {
	clear(k.frames[:cap(k.frames)])
	clear(k.keys[:cap(k.keys)])
	k.frames, k.keys = k.frames[:0], k.keys[:0]
	keyScans.Put(k)
}

func (k *keyScan) open(object bool) {
	k.frames = append(k.frames, scanFrame{object: object, first: len(k.keys)})
}

func (k *keyScan) close() {
	top := k.frames[len(k.frames)-1]
	k.keys = k.keys[:top.first]
	k.frames = k.frames[:len(k.frames)-1]
}

// next moves past a comma: to the next element of an array.
func (k *keyScan) next() {
	if top := &k.frames[len(k.frames)-1]; !top.object {
		top.index++
	}
}

// key records a key (raw, as between its quotes) in the innermost object;
// it returns the error naming its path when the object has it already.
func (k *keyScan) key(raw []byte) error {
	if bytes.IndexByte(raw, '\\') < 0 {
		return k.add(raw)
	}
	var s string
	if err := json.Unmarshal(append(append([]byte{'"'}, raw...), '"'), &s); err != nil {
		return invalidInput(kumikotype.ReasonInvalidJSON, "the request body is not valid JSON").WithCause(err)
	}
	return k.add([]byte(s))
}

// add is key for a decoded key.
func (k *keyScan) add(key []byte) error {
	top := &k.frames[len(k.frames)-1]
	seen := k.keys[top.first:]
	dup := false
	switch {
	case top.set != nil:
		_, dup = top.set[string(key)]
	default:
		for _, s := range seen {
			if bytes.Equal(s, key) {
				dup = true
				break
			}
		}
	}
	if dup {
		// The duplicate is the key of the current value: its path ends there.
		if len(seen) > 0 {
			k.keys[len(k.keys)-1] = key
		} else {
			k.keys = append(k.keys, key)
		}
		path := k.path()
		return invalidInput(kumikotype.ReasonDuplicateKey, "the request body holds the key "+strconv.Quote(string(key))+" twice in one object", registry.FieldError{
			Path: path, Code: string(kumikotype.FieldCodeDuplicateKey), Message: "is given twice; every key of an object must be unique",
		})
	}
	if top.set == nil && len(seen) >= keysListed {
		top.set = make(map[string]struct{}, 2*keysListed)
		for _, s := range seen {
			top.set[string(s)] = struct{}{}
		}
	}
	if top.set != nil {
		top.set[string(key)] = struct{}{}
		// Only the current key is needed from here on, for paths.
		if len(seen) > 0 {
			k.keys[len(k.keys)-1] = key
			return nil
		}
	}
	k.keys = append(k.keys, key)
	return nil
}

// path is the JSON path of the current value: object keys joined by dots
// (a["x y"] for a key that is no identifier), array indexes in brackets.
func (k *keyScan) path() string {
	var b strings.Builder
	for i, f := range k.frames {
		if !f.object {
			if i > 0 { // the top level is an object
				b.WriteString("[" + strconv.Itoa(f.index) + "]")
			}
			continue
		}
		end := len(k.keys)
		if i+1 < len(k.frames) {
			end = k.frames[i+1].first
		}
		if end == f.first {
			continue
		}
		key := string(k.keys[end-1])
		switch {
		case !isIdentifier(key):
			b.WriteString("[" + strconv.Quote(key) + "]")
		case b.Len() > 0:
			b.WriteString("." + key)
		default:
			b.WriteString(key)
		}
	}
	return b.String()
}

// isIdentifier reports whether a key can follow a dot in a path: a letter,
// _ or $, then letters, digits, _ or $ (ASCII).
func isIdentifier(s string) bool {
	for i := range len(s) {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c == '_', c == '$':
		case c >= '0' && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return s != ""
}

// scanValid is scanJSON of a body json.Valid accepts: it counts nesting
// outside strings, looks for the escape \u0000 inside them and checks that
// no object holds a key twice.
func scanValid(body []byte, maxDepth int) error {
	if first := bytes.TrimLeft(body, " \t\r\n"); first[0] != '{' {
		return invalidInput(kumikotype.ReasonInvalidJSON, "the request body must be a JSON object")
	}
	k := keyScans.Get().(*keyScan)
	defer k.release()
	wantKey := false // the next string is an object key
	for i := 0; i < len(body); i++ {
		switch body[i] {
		case '"':
			start := i + 1
			for i++; body[i] != '"'; i++ {
				if body[i] == '\\' {
					if body[i+1] == 'u' && string(body[i+2:i+6]) == "0000" {
						return invalidInput(kumikotype.ReasonInvalidCharacter, "strings must not contain the character U+0000")
					}
					i++ // the escaped character (of \uXXXX, the u: hex digits are never special)
				}
			}
			if wantKey {
				if err := k.key(body[start:i]); err != nil {
					return err
				}
				wantKey = false
			}
		case '{', '[':
			if len(k.frames) >= maxDepth {
				return invalidInput(kumikotype.ReasonTooDeep, fmt.Sprintf("the JSON nests deeper than allowed (%d levels below the envelope)", maxDepth))
			}
			k.open(body[i] == '{')
			wantKey = body[i] == '{'
		case '}', ']':
			k.close()
			wantKey = false
		case ',':
			k.next()
			wantKey = k.frames[len(k.frames)-1].object
		}
	}
	return nil
}

// scanTokens walks body's tokens without building values: it refuses
// malformed JSON, a top-level value that is not an object, nesting deeper
// than maxDepth, strings holding U+0000 (PostgreSQL cannot store them) and
// anything after the value.
func scanTokens(body []byte, maxDepth int) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var k keyScan
	for first := true; ; first = false {
		tok, err := dec.Token()
		if err != nil {
			if errors.Is(err, io.EOF) && first {
				return invalidInput(kumikotype.ReasonInvalidJSON, "the request body is empty")
			}
			return invalidInput(kumikotype.ReasonInvalidJSON, "the request body is not valid JSON").WithCause(err)
		}
		if first && tok != json.Delim('{') {
			return invalidInput(kumikotype.ReasonInvalidJSON, "the request body must be a JSON object")
		}
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{', '[':
				if len(k.frames) >= maxDepth {
					return invalidInput(kumikotype.ReasonTooDeep, fmt.Sprintf("the JSON nests deeper than allowed (%d levels below the envelope)", maxDepth))
				}
				k.open(t == '{')
				k.frames[len(k.frames)-1].wantKey = t == '{'
				continue
			default:
				k.close()
			}
		case string:
			if strings.IndexByte(t, 0) >= 0 {
				return invalidInput(kumikotype.ReasonInvalidCharacter, "strings must not contain the character U+0000")
			}
			if top := &k.frames[len(k.frames)-1]; top.wantKey {
				top.wantKey = false
				if err := k.add([]byte(t)); err != nil {
					return err
				}
				continue
			}
		}
		if len(k.frames) == 0 {
			break
		}
		// A value ended: an object's next token is a key, an array's next
		// element follows.
		if top := &k.frames[len(k.frames)-1]; top.object {
			top.wantKey = true
		} else {
			top.index++
		}
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return invalidInput(kumikotype.ReasonTrailingData, "the request body holds data after the JSON object")
	}
	return nil
}

// parseRequest splits a {"type","payload"} envelope; path prefixes the
// field paths of its problems (for batch elements). raw is (part of) a
// body readBody checked: valid JSON, no key twice.
func parseRequest(raw []byte, path string) (pipeline.Request, []registry.FieldError) {
	members, ok := membersOf(raw)
	if !ok {
		return pipeline.Request{}, []registry.FieldError{{Path: path, Code: string(kumikotype.FieldCodeType), Message: "must be an object"}}
	}
	fields := unknownKeys(members, path, "type", "payload")
	at := func(k string) string {
		if path == "" {
			return k
		}
		return path + "." + k
	}
	var req pipeline.Request
	t, ok := valueOf(members, "type")
	switch typ, isString := stringOf(t); {
	case !ok || string(t) == "null":
		fields = append(fields, registry.FieldError{Path: at("type"), Code: string(kumikotype.FieldCodeRequired), Message: "is required"})
	case !isString:
		fields = append(fields, registry.FieldError{Path: at("type"), Code: string(kumikotype.FieldCodeType), Message: "must be a string"})
	case typ == "":
		fields = append(fields, registry.FieldError{Path: at("type"), Code: string(kumikotype.FieldCodeRequired), Message: "must not be empty"})
	case len(typ) > maxTypeLen:
		fields = append(fields, registry.FieldError{Path: at("type"), Code: string(kumikotype.FieldCodeMax), Message: fmt.Sprintf("must be at most %d characters", maxTypeLen)})
	default:
		req.Type = typ
	}
	req.Payload, _ = valueOf(members, "payload")
	return req, fields
}

// valueOf is the value of the member key; false when there is none.
func valueOf(members []member, key string) ([]byte, bool) {
	for _, m := range members {
		if string(m.key) == key {
			return m.value, true
		}
	}
	return nil, false
}

// unknownKeys reports every member not named known, sorted by key.
func unknownKeys(members []member, path string, known ...string) []registry.FieldError {
	var keys []string
	for _, m := range members {
		if !slices.Contains(known, string(m.key)) {
			keys = append(keys, string(m.key))
		}
	}
	slices.Sort(keys)
	out := make([]registry.FieldError, 0, len(keys))
	for _, k := range keys {
		p := k
		if path != "" {
			p = path + "." + k
		}
		out = append(out, registry.FieldError{Path: p, Code: string(kumikotype.FieldCodeUnknownField), Message: "is not a known field"})
	}
	return out
}

// requestOf decodes the body of a write, query or command.
func requestOf(c echo.Context) (pipeline.Request, error) {
	req, fields := parseRequest(bodyOf(c), "")
	if len(fields) > 0 {
		return req, invalidInput(kumikotype.ReasonInvalidEnvelope, `the body must be {"type": "<handler>", "payload": {…}}`, fields...)
	}
	return req, nil
}

// requestsOf decodes the body of a batch: {"commands":[envelope, …]}.
func requestsOf(c echo.Context) ([]pipeline.Request, error) {
	bad := func(fields ...registry.FieldError) error {
		return invalidInput(kumikotype.ReasonInvalidEnvelope, `the body must be {"commands": [{"type": "<handler>", "payload": {…}}, …]}`, fields...)
	}
	members, ok := membersOf(bodyOf(c))
	if !ok {
		return nil, bad(registry.FieldError{Code: string(kumikotype.FieldCodeType), Message: "must be an object"})
	}
	fields := unknownKeys(members, "", "commands")
	var elems [][]byte
	switch raw, ok := valueOf(members, "commands"); {
	case !ok || string(raw) == "null":
		fields = append(fields, registry.FieldError{Path: "commands", Code: string(kumikotype.FieldCodeRequired), Message: "is required"})
	default:
		if elems, ok = elementsOf(raw); !ok {
			fields = append(fields, registry.FieldError{Path: "commands", Code: string(kumikotype.FieldCodeType), Message: "must be an array"})
		}
	}
	reqs := make([]pipeline.Request, len(elems))
	for i, el := range elems {
		var fs []registry.FieldError
		reqs[i], fs = parseRequest(el, fmt.Sprintf("commands[%d]", i))
		fields = append(fields, fs...)
	}
	if len(fields) > 0 {
		return nil, bad(fields...)
	}
	return reqs, nil
}

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
	"strings"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

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
		return nil, invalidInput("unreadable_body", "the request body could not be read").withCause(err)
	}
	if int64(len(body)) > limit {
		return nil, tooLarge
	}
	if !utf8.Valid(body) {
		return nil, invalidInput("invalid_utf8", "the request body is not valid UTF-8")
	}
	if err := scanJSON(body, maxDepth); err != nil {
		return nil, err
	}
	return body, nil
}

// checkContentType accepts application/json with at most a UTF-8 charset.
func checkContentType(ct string) error {
	bad := invalidInput("content_type", "the Content-Type must be application/json")
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
// store them) and anything after the value. A valid body (json.Valid, which
// allocates nothing) is checked by one pass over its bytes (scanValid); an
// invalid one by walking its tokens (scanTokens), which names what is
// wrong.
func scanJSON(body []byte, maxDepth int) error {
	if json.Valid(body) {
		return scanValid(body, maxDepth)
	}
	return scanTokens(body, maxDepth)
}

// scanValid is scanJSON of a body json.Valid accepts: it counts nesting
// outside strings and looks for the escape \u0000 inside them.
func scanValid(body []byte, maxDepth int) error {
	if first := bytes.TrimLeft(body, " \t\r\n"); first[0] != '{' {
		return invalidInput("invalid_json", "the request body must be a JSON object")
	}
	depth, inString := 0, false
	for i := 0; i < len(body); i++ {
		c := body[i]
		if inString {
			switch c {
			case '\\':
				if body[i+1] == 'u' && string(body[i+2:i+6]) == "0000" {
					return invalidInput("invalid_character", "strings must not contain the character U+0000")
				}
				i++ // the escaped character (of \uXXXX, the u: hex digits are never special)
			case '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case '{', '[':
			depth++
			if depth > maxDepth {
				return invalidInput("too_deep", fmt.Sprintf("the JSON nests deeper than allowed (%d levels below the envelope)", maxDepth))
			}
		case '}', ']':
			depth--
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
	depth := 0
	for first := true; ; first = false {
		tok, err := dec.Token()
		if err != nil {
			if errors.Is(err, io.EOF) && first {
				return invalidInput("invalid_json", "the request body is empty")
			}
			return invalidInput("invalid_json", "the request body is not valid JSON").withCause(err)
		}
		if first && tok != json.Delim('{') {
			return invalidInput("invalid_json", "the request body must be a JSON object")
		}
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{', '[':
				depth++
				if depth > maxDepth {
					return invalidInput("too_deep", fmt.Sprintf("the JSON nests deeper than allowed (%d levels below the envelope)", maxDepth))
				}
			default:
				depth--
			}
		case string:
			if strings.IndexByte(t, 0) >= 0 {
				return invalidInput("invalid_character", "strings must not contain the character U+0000")
			}
		}
		if depth == 0 {
			break
		}
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return invalidInput("trailing_data", "the request body holds data after the JSON object")
	}
	return nil
}

// parseRequest decodes a {"type","payload"} envelope; path prefixes the
// field paths of its problems (for batch elements).
func parseRequest(raw json.RawMessage, path string) (pipeline.Request, []registry.FieldError) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil || obj == nil {
		return pipeline.Request{}, []registry.FieldError{{Path: path, Code: "type", Message: "must be an object"}}
	}
	fields := unknownKeys(obj, path, "type", "payload")
	at := func(k string) string {
		if path == "" {
			return k
		}
		return path + "." + k
	}
	var typ string
	switch t, ok := obj["type"]; {
	case !ok || string(t) == "null":
		fields = append(fields, registry.FieldError{Path: at("type"), Code: "required", Message: "is required"})
	case json.Unmarshal(t, &typ) != nil:
		fields = append(fields, registry.FieldError{Path: at("type"), Code: "type", Message: "must be a string"})
	case typ == "":
		fields = append(fields, registry.FieldError{Path: at("type"), Code: "required", Message: "must not be empty"})
	case len(typ) > maxTypeLen:
		fields = append(fields, registry.FieldError{Path: at("type"), Code: "max", Message: fmt.Sprintf("must be at most %d characters", maxTypeLen)})
	}
	return pipeline.Request{Type: typ, Payload: obj["payload"]}, fields
}

func unknownKeys(obj map[string]json.RawMessage, path string, known ...string) []registry.FieldError {
	var out []registry.FieldError
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if !slices.Contains(known, k) {
			p := k
			if path != "" {
				p = path + "." + k
			}
			out = append(out, registry.FieldError{Path: p, Code: "unknown_field", Message: "is not a known field"})
		}
	}
	return out
}

// requestOf decodes the body of a write, query or command.
func requestOf(c echo.Context) (pipeline.Request, error) {
	req, fields := parseRequest(bodyOf(c), "")
	if len(fields) > 0 {
		return req, invalidInput(reasonInvalidEnvelope, `the body must be {"type": "<handler>", "payload": {…}}`, fields...)
	}
	return req, nil
}

// requestsOf decodes the body of a batch: {"commands":[envelope, …]}.
func requestsOf(c echo.Context) ([]pipeline.Request, error) {
	bad := func(fields ...registry.FieldError) error {
		return invalidInput(reasonInvalidEnvelope, `the body must be {"commands": [{"type": "<handler>", "payload": {…}}, …]}`, fields...)
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(bodyOf(c), &obj); err != nil {
		return nil, bad(registry.FieldError{Code: "type", Message: "must be an object"})
	}
	fields := unknownKeys(obj, "", "commands")
	var elems []json.RawMessage
	switch raw, ok := obj["commands"]; {
	case !ok || string(raw) == "null":
		fields = append(fields, registry.FieldError{Path: "commands", Code: "required", Message: "is required"})
	case json.Unmarshal(raw, &elems) != nil:
		fields = append(fields, registry.FieldError{Path: "commands", Code: "type", Message: "must be an array"})
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

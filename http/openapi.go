package http

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/kumiko-go/kumiko/kumikotype"
	"github.com/kumiko-go/kumiko/registry"
)

// OpenAPIVersion is the version of the OpenAPI specification the document
// of [OpenAPI] follows.
const OpenAPIVersion = "3.1.0"

const (
	schemasRef   = "#/components/schemas/"
	jsonSchema12 = "https://json-schema.org/draft/2020-12/schema"
)

// OpenAPI returns the OpenAPI 3.1 document (JSON) of the API a server over
// reg serves: every route; for each write, batch, query and command type its
// request envelope, payload schema (components named "<type>.payload") and
// result schema ("<type>.result": the entity state for CRUD handlers, any
// JSON value for commands and queries, whose handlers return what they
// like); bearer authentication; and the problem+json error contract with
// every code. title names the API in the document's info. The document is
// the same for the same registry, byte for byte.
func OpenAPI(reg *registry.Registry, title string) ([]byte, error) {
	b := &openAPI{schemas: map[string]any{}}
	kinds := map[registry.HandlerKind][]string{}
	for _, h := range reg.Handlers() {
		if err := b.handler(reg, h); err != nil {
			return nil, err
		}
		kinds[h.Kind] = append(kinds[h.Kind], h.Name)
	}
	b.schemas["Problem"] = problemSchema()
	b.schemas["SubjectExport"] = subjectExportSchema()
	if title == "" {
		title = "kumiko"
	}
	doc := map[string]any{
		"openapi":           OpenAPIVersion,
		"jsonSchemaDialect": jsonSchema12,
		"info":              map[string]any{"title": title, "version": "1"},
		"paths":             paths(kinds),
		"components": map[string]any{
			"schemas":         b.schemas,
			"responses":       errorResponses(),
			"securitySchemes": map[string]any{"bearer": map[string]any{"type": "http", "scheme": "bearer", "bearerFormat": "JWT"}},
		},
	}
	return json.Marshal(doc)
}

// openAPI collects the component schemas of a document.
type openAPI struct {
	schemas map[string]any
}

// handler adds the request, payload and result schemas of h.
func (b *openAPI) handler(reg *registry.Registry, h registry.Handler) error {
	payload, err := b.component(h.Name+".payload", reg.Schema(h.Name))
	if err != nil {
		return err
	}
	b.schemas[h.Name+".payload"] = payload
	result := map[string]any{"description": "the handler's result: any JSON value"}
	if raw := reg.ResultSchema(h.Name); raw != nil {
		if result, err = b.component(h.Name+".result", raw); err != nil {
			return err
		}
	}
	b.schemas[h.Name+".result"] = result
	desc := fmt.Sprintf("%s of feature %s; access: %s", h.Kind, h.Feature, h.Access)
	b.schemas[h.Name+".request"] = map[string]any{
		"type":        "object",
		"description": desc,
		"properties": map[string]any{
			"type":    map[string]any{"const": h.Name},
			"payload": ref(h.Name + ".payload"),
		},
		"required":             []string{"type"},
		"additionalProperties": false,
	}
	return nil
}

// component turns a registry schema into a component schema: its $defs
// become components of their own, named prefix.<def>, and its references
// point at them; $schema goes (the document's dialect says it).
func (b *openAPI) component(prefix string, raw json.RawMessage) (map[string]any, error) {
	var s map[string]any
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, fmt.Errorf("openapi: the schema of %s: %w", prefix, err)
	}
	delete(s, "$schema")
	defs, _ := s["$defs"].(map[string]any)
	delete(s, "$defs")
	rewrite := func(v any) any { return rewriteRefs(v, prefix) }
	for name, def := range defs {
		b.schemas[prefix+"."+name] = rewrite(def)
	}
	return rewrite(s).(map[string]any), nil
}

// rewriteRefs points the "#/$defs/X" references in v at prefix.X.
func rewriteRefs(v any, prefix string) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if r, ok := e.(string); ok && k == "$ref" {
				if name, ok := strings.CutPrefix(r, "#/$defs/"); ok {
					x[k] = schemasRef + prefix + "." + name
				}
				continue
			}
			x[k] = rewriteRefs(e, prefix)
		}
	case []any:
		for i, e := range x {
			x[i] = rewriteRefs(e, prefix)
		}
	}
	return v
}

func ref(name string) map[string]any { return map[string]any{"$ref": schemasRef + name} }

// oneOfSuffix is the union of the component schemas name+suffix for names:
// oneOf for requests (their type tells them apart), anyOf for results
// (several handlers answer the same shape); an empty list matches nothing.
func oneOfSuffix(names []string, suffix string) map[string]any {
	if len(names) == 0 {
		return map[string]any{"not": map[string]any{}}
	}
	out := make([]any, len(names))
	for i, n := range names {
		out[i] = ref(n + suffix)
	}
	if suffix == ".result" {
		return map[string]any{"anyOf": out}
	}
	return map[string]any{"oneOf": out}
}

// problemSchema is the application/problem+json body of every error.
func problemSchema() map[string]any {
	codes := kumikotype.Codes()
	str := map[string]any{"type": "string"}
	return map[string]any{
		"type":        "object",
		"description": "An error (RFC 9457 plus code and reason); see docs/http.md for the codes and reasons.",
		"properties": map[string]any{
			"type":      map[string]any{"type": "string", "format": "uri"},
			"title":     str,
			"status":    map[string]any{"type": "integer"},
			"code":      map[string]any{"type": "string", "enum": codes},
			"reason":    str,
			"detail":    str,
			"requestId": str,
			"fields": map[string]any{"type": "array", "items": map[string]any{
				"type":     "object",
				"required": []string{"path", "code", "message"},
				"properties": map[string]any{
					"path": str, "code": str, "message": str,
				},
			}},
			"fieldsTotal": map[string]any{"type": "integer"},
			"details":     map[string]any{"type": "object"},
		},
		"required": []string{"type", "title", "status", "code", "reason", "detail", "requestId"},
	}
}

// subjectExportSchema is the data of GET /api/subjects/{subject}/export:
// pipeline.SubjectExport.
func subjectExportSchema() map[string]any {
	str := map[string]any{"type": "string"}
	id := map[string]any{"type": "string", "format": "uuid"}
	object := func(desc string, required []string, props map[string]any) map[string]any {
		return map[string]any{"type": "object", "description": desc, "required": required,
			"additionalProperties": false, "properties": props}
	}
	fields := func(desc string) map[string]any {
		return map[string]any{"type": "object", "description": desc}
	}
	return object("Every personal value of a data subject in the caller's tenant (GDPR Art. 15 and 20).",
		[]string{"subject", "events", "rows"}, map[string]any{
			"subject": str,
			"events": map[string]any{"type": "array", "description": "In id order, each event with personal fields of the subject.",
				"items": object("An event and the subject's personal fields in it.",
					[]string{"eventId", "aggregateType", "aggregateId", "version", "type", "createdAt", "fields"}, map[string]any{
						"eventId":       map[string]any{"type": "integer"},
						"aggregateType": str,
						"aggregateId":   id,
						"version":       map[string]any{"type": "integer"},
						"type":          str,
						"createdAt":     map[string]any{"type": "string", "format": "date-time"},
						"fields":        fields("The subject's personal fields, open, by name as stored (before any upcast); null once the subject is forgotten."),
					})},
			"rows": map[string]any{"type": "array", "description": "The entity read rows with personal fields of the subject.",
				"items": object("An entity row's personal fields of the subject.", []string{"entity", "id", "fields"}, map[string]any{
					"entity": str,
					"id":     id,
					"fields": fields("The row's personal fields of the subject (not null), by field name."),
				})},
		})
}

// errorStatuses are the statuses of the error contract (docs/http.md).
var errorStatuses = []int{
	http.StatusBadRequest, http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound,
	http.StatusConflict, http.StatusRequestEntityTooLarge, http.StatusUnprocessableEntity,
	http.StatusTooManyRequests, http.StatusInternalServerError, http.StatusServiceUnavailable,
}

func errorResponses() map[string]any {
	out := map[string]any{}
	for _, st := range errorStatuses {
		out[strconv.Itoa(st)] = map[string]any{
			"description": http.StatusText(st),
			"content":     map[string]any{contentTypeProblem: map[string]any{"schema": ref("Problem")}},
		}
	}
	return out
}

// operation is an operation answering 200 with body (nil: no JSON body) and
// the given error statuses.
func operation(summary string, body map[string]any, ok map[string]any, errs ...int) map[string]any {
	responses := map[string]any{"200": ok}
	for _, st := range errs {
		responses[strconv.Itoa(st)] = map[string]any{"$ref": "#/components/responses/" + strconv.Itoa(st)}
	}
	op := map[string]any{
		"summary":   summary,
		"responses": responses,
		// Anonymous callers reach what feature.AnyUser-style rules allow.
		"security": []any{map[string]any{"bearer": []any{}}, map[string]any{}},
	}
	if body != nil {
		op["requestBody"] = map[string]any{"required": true, "content": map[string]any{contentTypeJSON: map[string]any{"schema": body}}}
	}
	return op
}

func jsonOK(desc string, schema map[string]any) map[string]any {
	return map[string]any{"description": desc, "content": map[string]any{contentTypeJSON: map[string]any{"schema": schema}}}
}

func dataOf(schema map[string]any) map[string]any {
	return map[string]any{"type": "object", "properties": map[string]any{"data": schema}, "required": []string{"data"}}
}

// paths describes every route of routeAll.
func paths(kinds map[registry.HandlerKind][]string) map[string]any {
	writes, commands, queries := kinds[registry.KindWrite], kinds[registry.KindCommand], kinds[registry.KindQuery]
	batchable := slices.Sorted(slices.Values(append(slices.Clone(writes), commands...)))
	all := errorStatuses
	anyObject := map[string]any{"type": "object"}
	get := func(summary string, ok map[string]any, errs ...int) map[string]any {
		return map[string]any{"get": operation(summary, nil, ok, errs...)}
	}
	// parkedAction is a request on a parked stream: 202 once recorded.
	parkedAction := func(summary string) map[string]any {
		op := operation(summary, nil, nil, http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound, http.StatusServiceUnavailable)
		responses := op["responses"].(map[string]any)
		delete(responses, "200")
		responses["202"] = jsonOK("the parked stream with the action asked for", dataOf(anyObject))
		return map[string]any{"parameters": []any{pathParameter("name", nil), pathParameter("stream", nil)}, "post": op}
	}
	// forget forgets a data subject of the caller's tenant: 204, whatever
	// the subject had; a token is always needed.
	forget := operation("Forget a data subject of the caller's tenant: its personal values read as null from now on. "+
		"204 whether or not it had data. For the admin role of the tenant; Idempotency-Key as for writes.", nil, nil,
		http.StatusBadRequest, http.StatusUnauthorized, http.StatusForbidden, http.StatusConflict,
		http.StatusUnprocessableEntity, http.StatusInternalServerError, http.StatusServiceUnavailable)
	forgetResponses := forget["responses"].(map[string]any)
	delete(forgetResponses, "200")
	forgetResponses["204"] = map[string]any{"description": "forgotten (or nothing to forget)"}
	forget["security"] = []any{map[string]any{"bearer": []any{}}}
	subject := pathParameter("subject", map[string]any{"minLength": 1})
	subject["description"] = "the subject id, 1 to 200 bytes (percent-encoded in the path)"
	// export answers the subject's personal values; a token is always needed.
	export := operation("Export every personal value of a data subject of the caller's tenant: the events with its "+
		"personal fields and the entity rows' personal fields of it. Empty lists for a subject without data. "+
		"For the admin role of the tenant.", nil, jsonOK("the subject's personal values", dataOf(ref("SubjectExport"))),
		http.StatusBadRequest, http.StatusUnauthorized, http.StatusForbidden, http.StatusInternalServerError, http.StatusServiceUnavailable)
	export["security"] = []any{map[string]any{"bearer": []any{}}}
	return map[string]any{
		"/api/write": map[string]any{"post": operation("Run a CRUD write; answers the state after it.",
			oneOfSuffix(writes, ".request"), jsonOK("the state after the write", dataOf(oneOfSuffix(writes, ".result"))), all...)},
		"/api/batch": map[string]any{"post": operation("Run up to 100 writes and commands in one transaction, all or nothing.",
			map[string]any{"type": "object", "required": []string{"commands"}, "additionalProperties": false, "properties": map[string]any{
				"commands": map[string]any{"type": "array", "minItems": 1, "maxItems": 100, "items": oneOfSuffix(batchable, ".request")},
			}},
			jsonOK("one result per command, in order", dataOf(map[string]any{"type": "array", "items": oneOfSuffix(batchable, ".result")})), all...)},
		"/api/query": map[string]any{"post": operation("Run a query.",
			oneOfSuffix(queries, ".request"), jsonOK("the query's answer", dataOf(oneOfSuffix(queries, ".result"))), all...)},
		"/api/command": map[string]any{"post": operation("Run a command; answers once it has committed.",
			oneOfSuffix(commands, ".request"), jsonOK("the command's result", dataOf(oneOfSuffix(commands, ".result"))), all...)},
		"/api/inspect/{aggregateType}/{id}": map[string]any{
			"parameters": []any{pathParameter("aggregateType", nil), pathParameter("id", map[string]any{"format": "uuid"})},
			"get": operation("A stream's timeline, for the admin role of its tenant.", nil,
				jsonOK("the timeline", dataOf(anyObject)), http.StatusBadRequest, http.StatusUnauthorized, http.StatusForbidden,
				http.StatusNotFound, http.StatusInternalServerError, http.StatusServiceUnavailable),
		},
		"/api/subjects/{subject}/forget": map[string]any{
			"parameters": []any{subject},
			"post":       forget,
		},
		"/api/subjects/{subject}/export": map[string]any{
			"parameters": []any{subject},
			"get":        export,
		},
		"/api/events": get("Server-Sent Events of the caller's tenant; Last-Event-ID or ?after= replays, ?types= filters.",
			map[string]any{"description": "the event stream", "content": map[string]any{"text/event-stream": map[string]any{"schema": map[string]any{"type": "string"}}}},
			http.StatusBadRequest, http.StatusUnauthorized, http.StatusServiceUnavailable),
		"/api/projections/{name}/events": map[string]any{
			"parameters": []any{pathParameter("name", nil)},
			"get": operation("Server-Sent Events of a projection's row changes in the caller's tenant: upsert, delete and reset frames; Last-Event-ID or ?after= resumes.", nil,
				map[string]any{"description": "the row changes", "content": map[string]any{"text/event-stream": map[string]any{"schema": map[string]any{"type": "string"}}}},
				http.StatusBadRequest, http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound, http.StatusServiceUnavailable),
		},
		"/api/consumers": get("Consumer shards' state, for the operator role.",
			jsonOK("the consumers", dataOf(map[string]any{"type": "array"})), http.StatusUnauthorized, http.StatusForbidden, http.StatusServiceUnavailable),
		"/api/consumers/parked": get("The consumers' parked streams, for the operator role.",
			jsonOK("the parked streams", dataOf(map[string]any{"type": "array"})), http.StatusUnauthorized, http.StatusForbidden, http.StatusServiceUnavailable),
		"/api/consumers/{name}/parked/{stream}/retry": parkedAction("Ask for a parked stream to be retried from its failing event; the next pass of its shard does it. For the operator role."),
		"/api/consumers/{name}/parked/{stream}/skip":  parkedAction("Ask for a parked stream's failing event to be skipped; the next pass of its shard does it. For the operator role."),
		"/api/projections": get("Projections' state, for the operator role.",
			jsonOK("the projections", dataOf(map[string]any{"type": "array"})), http.StatusUnauthorized, http.StatusForbidden, http.StatusServiceUnavailable),
		"/metrics": get("Prometheus metrics, for the operator role (unauthenticated on a listener of their own when one is configured).",
			map[string]any{"description": "the metrics", "content": map[string]any{"text/plain": map[string]any{"schema": map[string]any{"type": "string"}}}},
			http.StatusUnauthorized, http.StatusForbidden),
		"/api/openapi.json": map[string]any{"get": map[string]any{"summary": "This document.", "responses": map[string]any{"200": jsonOK("the document", anyObject)}}},
		"/healthz":          map[string]any{"get": map[string]any{"summary": "Liveness.", "responses": map[string]any{"200": jsonOK("the process serves", anyObject)}}},
		"/readyz": map[string]any{"get": map[string]any{"summary": "Readiness: fails while the database is unreachable.", "responses": map[string]any{
			"200": jsonOK("ready", anyObject), "503": map[string]any{"$ref": "#/components/responses/503"},
		}}},
	}
}

// pathParameter is the path parameter name, a string with the schema
// keywords extra.
func pathParameter(name string, extra map[string]any) map[string]any {
	schema := map[string]any{"type": "string"}
	maps.Copy(schema, extra)
	return map[string]any{"name": name, "in": "path", "required": true, "schema": schema}
}

// openapi serves GET /api/openapi.json: the document built at NewServer.
func (s *Server) openapi(c echo.Context) error {
	return c.Blob(http.StatusOK, contentTypeJSON, s.openAPIDoc)
}

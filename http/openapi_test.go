package http_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/stretchr/testify/require"

	khttp "github.com/kumiko-go/kumiko/http"
)

// openAPIValidator loads the document a server serves and checks it with
// libopenapi-validator, which reads OpenAPI 3.1 and JSON Schema 2020-12.
func openAPIValidator(t *testing.T, e *env) validator.Validator {
	t.Helper()
	r := e.do(request{method: http.MethodGet, path: "/api/openapi.json"})
	require.Equal(t, http.StatusOK, r.status, r.String())
	doc, err := libopenapi.NewDocument(r.body)
	require.NoError(t, err)
	v, errs := validator.NewValidator(doc)
	require.Empty(t, errs)
	ok, verrs := v.ValidateDocument()
	for _, ve := range verrs {
		t.Errorf("document: %s: %s", ve.Message, ve.Reason)
	}
	require.True(t, ok)
	return v
}

// TestOpenAPIDocument checks the served document is valid OpenAPI 3.1, the
// same as the one OpenAPI builds, and names every handler of the registry.
func TestOpenAPIDocument(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	openAPIValidator(t, e)

	r := e.do(request{method: http.MethodGet, path: "/api/openapi.json"})
	built, err := khttp.OpenAPI(e.app.Executor.Registry(), "")
	require.NoError(t, err)
	require.JSONEq(t, string(built), string(r.body))

	var doc struct {
		OpenAPI    string `json:"openapi"`
		Components struct {
			Schemas map[string]json.RawMessage `json:"schemas"`
		} `json:"components"`
	}
	require.NoError(t, json.Unmarshal(r.body, &doc))
	require.Equal(t, "3.1.0", doc.OpenAPI)
	for _, h := range e.app.Executor.Registry().Handlers() {
		for _, suffix := range []string{".request", ".payload", ".result"} {
			require.Contains(t, doc.Components.Schemas, h.Name+suffix)
		}
	}
	require.NotContains(t, string(r.body), "#/$defs/", "every reference points into components")
}

// TestOpenAPIConformance sends a real request of every handler type of the
// tasks sample and the probe feature, and checks request and response
// against the document: a wrong schema for any type fails it.
func TestOpenAPIConformance(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	v := openAPIValidator(t, e)
	tok := token(t, "u1", tenantA, "Admin", "User")

	seen := map[string]bool{}
	call := func(path, typ, payload string, status int) map[string]any {
		t.Helper()
		body := `{"type":"` + typ + `","payload":` + payload + `}`
		seen[typ] = true
		return conform(t, e, v, path, tok, body, status)
	}
	task := call("/api/write", "task.create", `{"title":"doc","dueAt":"2026-01-02T03:04:05Z"}`, http.StatusOK)
	id := task["data"].(map[string]any)["id"].(string)
	call("/api/write", "task.update", `{"id":"`+id+`","version":1,"changes":{"notes":"n"}}`, http.StatusOK)
	call("/api/command", "task.complete", `{"id":"`+id+`","version":2}`, http.StatusOK)
	call("/api/query", "task.detail", `{"id":"`+id+`"}`, http.StatusOK)
	call("/api/query", "task.detail", `{"id":"0190a000-0000-7000-8000-0000000000ff"}`, http.StatusOK) // null
	call("/api/query", "task.list", `{"limit":1}`, http.StatusOK)
	call("/api/query", "task.stats", `{}`, http.StatusOK)
	call("/api/write", "task.delete", `{"id":"`+id+`"}`, http.StatusOK)
	call("/api/write", "task.restore", `{"id":"`+id+`"}`, http.StatusOK)
	m := call("/api/write", "member.create", `{"email":"a@example.com"}`, http.StatusOK)
	mid := m["data"].(map[string]any)["id"].(string)
	call("/api/write", "member.update", `{"id":"`+mid+`","version":1,"changes":{"email":"b@example.com"}}`, http.StatusOK)
	call("/api/query", "member.detail", `{"id":"`+mid+`"}`, http.StatusOK)
	call("/api/query", "member.list", `{}`, http.StatusOK)
	call("/api/write", "member.delete", `{"id":"`+mid+`"}`, http.StatusOK) // hard delete: id and version
	call("/api/command", "probe.fail", `{"note":"x"}`, http.StatusInternalServerError)
	// The error contract: a validation error and a conflict.
	call("/api/write", "task.update", `{"id":"`+id+`","version":1,"changes":{"title":""}}`, http.StatusBadRequest)
	call("/api/write", "task.update", `{"id":"`+id+`","version":1,"changes":{"title":"stale"}}`, http.StatusConflict)
	conform(t, e, v, "/api/batch", tok, `{"commands":[{"type":"task.create","payload":{"title":"b"}},{"type":"member.create","payload":{"email":"c@example.com"}}]}`, http.StatusOK)

	for _, h := range e.app.Executor.Registry().Handlers() {
		require.True(t, seen[h.Name], "handler %s has no conformance request", h.Name)
	}
}

// conform posts body to path and checks the exchange against the document
// (only the answer, for an error status); it returns the decoded answer.
func conform(t *testing.T, e *env, v validator.Validator, path, tok, body string, status int) map[string]any {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, e.srv.URL+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := e.srv.Client().Do(req)
	require.NoError(t, err)
	out, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, status, resp.StatusCode, "%s %s: %s", path, body, out)

	check, err := http.NewRequest(http.MethodPost, e.srv.URL+path, strings.NewReader(body))
	require.NoError(t, err)
	check.Header = req.Header
	resp.Body = io.NopCloser(bytes.NewReader(out))
	ok, errs := v.ValidateHttpRequestResponse(check, resp)
	if status >= http.StatusBadRequest { // the request may break the schema on purpose
		ok, errs = v.ValidateHttpResponse(check, resp)
	}
	for _, ve := range errs {
		t.Errorf("%s %s → %s: %s: %s %v", path, body, out, ve.Message, ve.Reason, ve.SchemaValidationErrors)
	}
	require.True(t, ok)
	var m map[string]any
	require.NoError(t, json.Unmarshal(out, &m))
	return m
}

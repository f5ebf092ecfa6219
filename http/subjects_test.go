package http_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/google/uuid"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/feature"
)

// crm holds personal data: a contact's name is the contact's own (its id is
// the subject), its email the customer's named by customerId (any text).
var crm = feature.Define("crm", func(r *feature.Registrar) {
	r.Entity("contact", feature.Fields{
		"name":       feature.Text().Required().Personal(),
		"email":      feature.Text().PersonalOf("customerId"),
		"customerId": feature.Text(),
		"plan":       feature.Text(),
	})
	r.Crud("contact", feature.Access{Write: feature.Roles("Admin", "User"), Read: feature.AnyUser()})
})

// forgetPath is the route forgetting subject, escaped as a path segment.
func forgetPath(subject string) string {
	return "/api/subjects/" + url.PathEscape(subject) + "/forget"
}

// forget asks, with tok, for subject to be forgotten.
func (e *env) forget(tok, subject string, header ...string) reply {
	e.t.Helper()
	h := map[string]string{}
	for i := 0; i+1 < len(header); i += 2 {
		h[header[i]] = header[i+1]
	}
	return e.do(request{path: forgetPath(subject), token: tok, header: h})
}

// contact creates a contact as tok and returns its id.
func (e *env) contact(tok, payload string) string {
	e.t.Helper()
	r := e.post("/api/write", tok, `{"type":"contact.create","payload":`+payload+`}`)
	require.Equal(e.t, http.StatusOK, r.status, r.String())
	return r.data(e.t)["id"].(string)
}

// contactDetail is the contact id as tok reads it through the detail query.
func (e *env) contactDetail(tok, id string) map[string]any {
	e.t.Helper()
	r := e.post("/api/query", tok, fmt.Sprintf(`{"type":"contact.detail","payload":{"id":%q}}`, id))
	require.Equal(e.t, http.StatusOK, r.status, r.String())
	d := r.data(e.t)
	require.NotNil(e.t, d, "contact %s is missing", id)
	return d
}

// contactRows are the contacts tok reads through the list query, by id.
func (e *env) contactRows(tok string) map[string]map[string]any {
	e.t.Helper()
	r := e.post("/api/query", tok, `{"type":"contact.list","payload":{}}`)
	require.Equal(e.t, http.StatusOK, r.status, r.String())
	out := map[string]map[string]any{}
	for _, row := range r.data(e.t)["rows"].([]any) {
		m := row.(map[string]any)
		out[m["id"].(string)] = m
	}
	return out
}

// createdPayload is the payload (as upcast, and as stored) of the first
// event of contact id, through the inspect route.
func (e *env) createdPayload(admin, id string) (payload, raw map[string]any) {
	e.t.Helper()
	r := e.do(get("/api/inspect/contact/"+id, admin))
	require.Equal(e.t, http.StatusOK, r.status, r.String())
	first := r.data(e.t)["events"].([]any)[0].(map[string]any)
	require.Equal(e.t, "contact.created", first["type"])
	return first["payload"].(map[string]any), first["rawPayload"].(map[string]any)
}

// checkExchange validates the answer r of a POST to path against the
// OpenAPI document, and the request too when whole is set.
func checkExchange(t *testing.T, e *env, v validator.Validator, path, tok string, r reply, whole bool) {
	t.Helper()
	checkMethodExchange(t, e, v, http.MethodPost, path, tok, r, whole)
}

// checkMethodExchange is checkExchange for a request of method.
func checkMethodExchange(t *testing.T, e *env, v validator.Validator, method, path, tok string, r reply, whole bool) {
	t.Helper()
	req, err := http.NewRequest(method, e.srv.URL+path, nil)
	require.NoError(t, err)
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	res := &http.Response{StatusCode: r.status, Header: r.header, Body: io.NopCloser(bytes.NewReader(r.body)), Request: req}
	ok, errs := v.ValidateHttpResponse(req, res)
	if whole {
		ok, errs = v.ValidateHttpRequestResponse(req, res)
	}
	for _, ve := range errs {
		t.Errorf("%s %s → %s: %s: %s", method, path, r, ve.Message, ve.Reason)
	}
	require.True(t, ok)
}

// An admin forgets a contact: 204 with no body, and from then on its name
// reads null in the detail, the list and the inspected events, while the
// fields of other subjects stay. Forgetting it again, and a subject that
// never had data, answer the same 204. The exchanges match the OpenAPI
// document.
func TestForgetSubject(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, 8, []*feature.Feature{crm})
	v := openAPIValidator(t, e)
	alice := token(t, "alice", tenantA, "User")
	admin := token(t, "ada", tenantA, "Admin")
	customer := uuid.NewString()
	id := e.contact(alice, fmt.Sprintf(`{"name":"Ada Lovelace","email":"ada@example.org","customerId":%q,"plan":"gold"}`, customer))
	other := e.contact(alice, `{"name":"Bob Byron","plan":"silver"}`)

	require.Equal(t, "Ada Lovelace", e.contactDetail(alice, id)["name"])
	payload, raw := e.createdPayload(admin, id)
	require.Equal(t, "Ada Lovelace", payload["name"], "readable before the forget")
	require.Equal(t, "Ada Lovelace", raw["name"])
	n := e.events()

	r := e.forget(admin, id)
	require.Equal(t, http.StatusNoContent, r.status, r.String())
	require.Empty(t, r.body)
	require.Empty(t, r.header.Get("Content-Type"))
	require.NotEmpty(t, r.header.Get("X-Request-ID"))
	checkExchange(t, e, v, forgetPath(id), admin, r, true)
	require.Equal(t, n+1, e.events(), "a forget appends its kumiko.subject.forgotten event, nothing else")
	require.Equal(t, 1, e.app.Count(t, "SELECT count(*) FROM kumiko_events WHERE type = 'kumiko.subject.forgotten' AND payload->>'subject' = $1", id))

	// The contact's own name is gone everywhere; its customer's email and
	// the plan stay, and so does another contact's name.
	d := e.contactDetail(alice, id)
	require.Contains(t, d, "name")
	require.Nil(t, d["name"])
	require.Equal(t, "ada@example.org", d["email"])
	require.Equal(t, "gold", d["plan"])
	rows := e.contactRows(alice)
	require.Nil(t, rows[id]["name"])
	require.Equal(t, "ada@example.org", rows[id]["email"])
	require.Equal(t, "Bob Byron", rows[other]["name"])
	payload, raw = e.createdPayload(admin, id)
	require.Nil(t, payload["name"])
	require.Nil(t, raw["name"])
	require.Equal(t, "ada@example.org", payload["email"])
	require.Equal(t, "gold", payload["plan"])
	require.NotContains(t, string(e.do(get("/api/inspect/contact/"+id, admin)).body), "Ada Lovelace")

	// Again, and subjects that never had data: the same answer.
	for _, s := range []string{id, uuid.NewString(), "nobody", strings.Repeat("s", 200)} {
		r := e.forget(admin, s)
		require.Equal(t, http.StatusNoContent, r.status, "%s: %s", s, r)
		require.Empty(t, r.body)
	}

	// Forgetting the customer takes the email too.
	r = e.forget(admin, customer)
	require.Equal(t, http.StatusNoContent, r.status, r.String())
	d = e.contactDetail(alice, id)
	require.Nil(t, d["email"])
	require.Equal(t, "gold", d["plan"])
	payload, _ = e.createdPayload(admin, id)
	require.Nil(t, payload["email"])
	require.Equal(t, "Bob Byron", e.contactDetail(alice, other)["name"])

	// A subject with a slash, sent as %2F, is one subject.
	slashed := e.contact(alice, `{"name":"Cy","email":"cy@example.org","customerId":"acme/c-1"}`)
	r = e.forget(admin, "acme/c-1")
	require.Equal(t, http.StatusNoContent, r.status, r.String())
	require.Nil(t, e.contactDetail(alice, slashed)["email"])
	require.Equal(t, "Cy", e.contactDetail(alice, slashed)["name"])
}

// The tenant is the token's: another tenant's admin forgetting a contact's
// id, or a text subject both tenants use, changes nothing in the first.
func TestForgetSubjectTenants(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, 8, []*feature.Feature{crm})
	aliceA, adminA := token(t, "alice", tenantA, "User"), token(t, "ada", tenantA, "Admin")
	bobB, adminB := token(t, "bob", tenantB, "User"), token(t, "bea", tenantB, "Admin")
	inA := e.contact(aliceA, `{"name":"Ada","email":"ada@a.example","customerId":"c-1"}`)
	inB := e.contact(bobB, `{"name":"Bea","email":"bea@b.example","customerId":"c-1"}`)

	// B's admin forgets A's contact id: 204 (no oracle), nothing happens in A.
	r := e.forget(adminB, inA)
	require.Equal(t, http.StatusNoContent, r.status, r.String())
	require.Equal(t, "Ada", e.contactDetail(aliceA, inA)["name"])
	payload, _ := e.createdPayload(adminA, inA)
	require.Equal(t, "Ada", payload["name"])

	// B's admin forgets the customer c-1: B's email goes, A's c-1 stays.
	r = e.forget(adminB, "c-1")
	require.Equal(t, http.StatusNoContent, r.status, r.String())
	require.Nil(t, e.contactDetail(bobB, inB)["email"])
	require.Equal(t, "Bea", e.contactDetail(bobB, inB)["name"])
	require.Equal(t, "ada@a.example", e.contactDetail(aliceA, inA)["email"])
	payload, _ = e.createdPayload(adminA, inA)
	require.Equal(t, "ada@a.example", payload["email"])

	// A's admin forgets c-1 in A.
	r = e.forget(adminA, "c-1")
	require.Equal(t, http.StatusNoContent, r.status, r.String())
	require.Nil(t, e.contactDetail(aliceA, inA)["email"])
	require.Equal(t, "Ada", e.contactDetail(aliceA, inA)["name"])
}

// Only the tenant's admin role forgets: no token is 401, a user or an
// operator without it 403, and nothing is forgotten. A subject that is
// empty, too long, not UTF-8 or holding U+0000 is 400 invalid_subject;
// another method is 405. The answers match the OpenAPI document.
func TestForgetSubjectRefused(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, 8, []*feature.Feature{crm})
	v := openAPIValidator(t, e)
	alice := token(t, "alice", tenantA, "User")
	admin := token(t, "ada", tenantA, "Admin")
	operator := token(t, "olga", tenantA, "Operator")
	id := e.contact(alice, `{"name":"Ada"}`)

	r := e.forget("", id)
	requireProblem(t, r, http.StatusUnauthorized, "unauthenticated", "")
	require.NotEmpty(t, r.header.Get("WWW-Authenticate"))
	checkExchange(t, e, v, forgetPath(id), "", r, false)
	r = e.forget(alice, id)
	requireProblem(t, r, http.StatusForbidden, "access_denied", "")
	checkExchange(t, e, v, forgetPath(id), alice, r, false)
	requireProblem(t, e.forget(operator, id), http.StatusForbidden, "access_denied", "")
	requireProblem(t, e.forget("not-a-token", id), http.StatusUnauthorized, "unauthenticated", "invalid_token")
	require.Equal(t, "Ada", e.contactDetail(alice, id)["name"], "nothing was forgotten")

	r = e.forget(admin, strings.Repeat("s", 201))
	requireProblem(t, r, http.StatusBadRequest, "validation_error", "invalid_subject")
	checkExchange(t, e, v, forgetPath("x"), admin, r, false)
	requireProblem(t, e.do(request{path: "/api/subjects//forget", token: admin}), http.StatusBadRequest, "validation_error", "invalid_subject")
	requireProblem(t, e.do(request{path: "/api/subjects/a%00b/forget", token: admin}), http.StatusBadRequest, "validation_error", "invalid_subject")
	requireProblem(t, e.do(request{path: "/api/subjects/a%FFb/forget", token: admin}), http.StatusBadRequest, "validation_error", "invalid_subject")
	// The subject check comes after the role check: a user learns nothing.
	requireProblem(t, e.do(request{path: "/api/subjects//forget", token: alice}), http.StatusForbidden, "access_denied", "")

	requireProblem(t, e.do(get(forgetPath(id), admin)), http.StatusMethodNotAllowed, "method_not_allowed", "")
	requireProblem(t, e.do(request{path: "/api/subjects/" + id, token: admin}), http.StatusNotFound, "not_found", "")
	require.Equal(t, "Ada", e.contactDetail(alice, id)["name"])
}

// A keyed forget is recorded like a keyed write: a retry replays the 204
// with Idempotent-Replayed, the key sent for another subject is
// key_reused. Every forget is logged and counted under its route template,
// never its subject.
func TestForgetSubjectIdempotencyAndObservability(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, 8, []*feature.Feature{crm})
	alice := token(t, "alice", tenantA, "User")
	admin := token(t, "ada", tenantA, "Admin")
	id := e.contact(alice, `{"name":"Ada"}`)

	r := e.forget(admin, id, "Idempotency-Key", "forget-1")
	require.Equal(t, http.StatusNoContent, r.status, r.String())
	require.Empty(t, r.header.Get("Idempotent-Replayed"))
	require.Nil(t, e.contactDetail(alice, id)["name"])

	r = e.forget(admin, id, "Idempotency-Key", "forget-1")
	require.Equal(t, http.StatusNoContent, r.status, r.String())
	require.Equal(t, "true", r.header.Get("Idempotent-Replayed"))
	require.Empty(t, r.body)
	require.Empty(t, r.header.Get("Content-Type"), "a replayed 204 has no body and no type")

	requireProblem(t, e.forget(admin, "someone-else", "Idempotency-Key", "forget-1"), http.StatusUnprocessableEntity, "idempotency_conflict", "key_reused")
	requireProblem(t, e.forget(admin, id, "Idempotency-Key", strings.Repeat("k", 256)), http.StatusBadRequest, "validation_error", "idempotency_key")

	const route = "/api/subjects/:subject/forget"
	lines := e.logs.lines(map[string]any{"msg": "request", "route": route, "status": float64(http.StatusNoContent)})
	require.Len(t, lines, 2)
	require.Equal(t, "POST", lines[0]["method"])
	require.Equal(t, tenantA.String(), lines[0]["tenant"])
	require.Equal(t, "ada", lines[0]["user"])

	m := e.do(get("/metrics", token(t, "olga", tenantA, "Operator")))
	require.Equal(t, http.StatusOK, m.status, m.String())
	require.Contains(t, string(m.body), `kumiko_http_requests_total{method="POST",route="`+route+`",status="204"} 2`)
	require.Contains(t, string(m.body), `kumiko_http_requests_total{method="POST",route="`+route+`",status="422"} 1`)
	require.NotContains(t, string(m.body), id, "subjects never become label values")
}

// exportPath is the route exporting subject, escaped as a path segment.
func exportPath(subject string) string {
	return "/api/subjects/" + url.PathEscape(subject) + "/export"
}

// export asks, with tok, for subject's export.
func (e *env) export(tok, subject string) reply {
	e.t.Helper()
	return e.do(get(exportPath(subject), tok))
}

// exportOf is subject's export as tok reads it: 200 with the usual data
// envelope, validated against the OpenAPI document v, with its subject.
func (e *env) exportOf(v validator.Validator, tok, subject string) (events, rows []map[string]any) {
	e.t.Helper()
	r := e.export(tok, subject)
	require.Equal(e.t, http.StatusOK, r.status, r.String())
	require.Equal(e.t, "application/json", r.header.Get("Content-Type"))
	checkMethodExchange(e.t, e, v, http.MethodGet, exportPath(subject), tok, r, true)
	d := r.data(e.t)
	require.Equal(e.t, subject, d["subject"])
	require.NotNil(e.t, d["events"], "a list, never null: %s", r)
	require.NotNil(e.t, d["rows"], "a list, never null: %s", r)
	for _, ev := range d["events"].([]any) {
		events = append(events, ev.(map[string]any))
	}
	for _, row := range d["rows"].([]any) {
		rows = append(rows, row.(map[string]any))
	}
	return events, rows
}

// An admin exports a contact: 200 with the usual data envelope, the
// contact's own name in its event (field as stored) and in its row, and
// nothing of another subject (the customer's email, another contact);
// the customer's export holds the email. A subject without data exports
// empty lists; after a forget the event's field is null and no row is
// left. An export appends no event. The exchanges match the OpenAPI
// document.
func TestExportSubject(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, 8, []*feature.Feature{crm})
	v := openAPIValidator(t, e)
	alice := token(t, "alice", tenantA, "User")
	admin := token(t, "ada", tenantA, "Admin")
	customer := uuid.NewString()
	id := e.contact(alice, fmt.Sprintf(`{"name":"Ada Lovelace","email":"ada@example.org","customerId":%q,"plan":"gold"}`, customer))
	other := e.contact(alice, `{"name":"Bob Byron","plan":"silver"}`)
	n := e.events()

	events, rows := e.exportOf(v, admin, id)
	require.Len(t, events, 1)
	ev := events[0]
	require.Equal(t, "contact.created", ev["type"])
	require.Equal(t, "contact", ev["aggregateType"])
	require.Equal(t, id, ev["aggregateId"])
	require.InDelta(t, 1, ev["version"], 0)
	require.NotZero(t, ev["eventId"])
	require.NotEmpty(t, ev["createdAt"])
	require.Equal(t, map[string]any{"name": "Ada Lovelace"}, ev["fields"], "the contact's own fields only")
	require.Equal(t, []map[string]any{{"entity": "contact", "id": id, "fields": map[string]any{"name": "Ada Lovelace"}}}, rows)
	r := e.export(admin, id)
	require.NotContains(t, string(r.body), "ada@example.org")
	require.NotContains(t, string(r.body), "gold", "fields that are not personal stay out")
	require.NotContains(t, string(r.body), "Bob Byron")

	events, rows = e.exportOf(v, admin, customer)
	require.Len(t, events, 1)
	require.Equal(t, id, events[0]["aggregateId"])
	require.Equal(t, map[string]any{"email": "ada@example.org"}, events[0]["fields"])
	require.Equal(t, []map[string]any{{"entity": "contact", "id": id, "fields": map[string]any{"email": "ada@example.org"}}}, rows)

	// Subjects without data: empty lists.
	for _, s := range []string{"nobody", uuid.NewString(), strings.Repeat("s", 200)} {
		r := e.export(admin, s)
		require.Equal(t, http.StatusOK, r.status, "%s: %s", s, r)
		require.JSONEq(t, fmt.Sprintf(`{"data":{"subject":%q,"events":[],"rows":[]}}`, s), string(r.body))
		checkMethodExchange(t, e, v, http.MethodGet, exportPath(s), admin, r, true)
	}

	// After the forget: the event is still there, its name null; no row.
	r = e.forget(admin, id)
	require.Equal(t, http.StatusNoContent, r.status, r.String())
	events, rows = e.exportOf(v, admin, id)
	require.Len(t, events, 1)
	require.Equal(t, map[string]any{"name": nil}, events[0]["fields"])
	require.Empty(t, rows)
	require.NotContains(t, string(e.export(admin, id).body), "Ada Lovelace")
	events, rows = e.exportOf(v, admin, other)
	require.Equal(t, map[string]any{"name": "Bob Byron"}, events[0]["fields"], "another subject's data is intact")
	require.Len(t, rows, 1)

	// A subject with a slash, sent as %2F, is one subject.
	slashed := e.contact(alice, `{"name":"Cy","email":"cy@example.org","customerId":"acme/c-1"}`)
	events, rows = e.exportOf(v, admin, "acme/c-1")
	require.Len(t, events, 1)
	require.Equal(t, slashed, events[0]["aggregateId"])
	require.Equal(t, map[string]any{"email": "cy@example.org"}, rows[0]["fields"])

	require.Equal(t, n+2, e.events(), "exports append no event (one forget and one contact since)")

	// Logged and counted under the route template, never the subject.
	const route = "/api/subjects/:subject/export"
	lines := e.logs.lines(map[string]any{"msg": "request", "route": route, "status": float64(http.StatusOK)})
	require.NotEmpty(t, lines)
	require.Equal(t, "GET", lines[0]["method"])
	require.Equal(t, tenantA.String(), lines[0]["tenant"])
	m := e.do(get("/metrics", token(t, "olga", tenantA, "Operator")))
	require.Equal(t, http.StatusOK, m.status, m.String())
	require.Contains(t, string(m.body), `kumiko_http_requests_total{method="GET",route="`+route+`",status="200"}`)
	require.NotContains(t, string(m.body), customer, "subjects never become label values")
}

// The tenant is the token's: another tenant's admin exporting a contact's
// id gets empty lists, and a text subject both tenants use exports each
// tenant's own values only.
func TestExportSubjectTenants(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, 8, []*feature.Feature{crm})
	v := openAPIValidator(t, e)
	aliceA, adminA := token(t, "alice", tenantA, "User"), token(t, "ada", tenantA, "Admin")
	bobB, adminB := token(t, "bob", tenantB, "User"), token(t, "bea", tenantB, "Admin")
	inA := e.contact(aliceA, `{"name":"Ada","email":"ada@a.example","customerId":"c-1"}`)
	inB := e.contact(bobB, `{"name":"Bea","email":"bea@b.example","customerId":"c-1"}`)

	r := e.export(adminB, inA)
	require.Equal(t, http.StatusOK, r.status, r.String())
	require.JSONEq(t, fmt.Sprintf(`{"data":{"subject":%q,"events":[],"rows":[]}}`, inA), string(r.body), "nothing of tenant A")
	events, rows := e.exportOf(v, adminA, inA)
	require.Len(t, events, 1)
	require.Len(t, rows, 1)

	events, rows = e.exportOf(v, adminB, "c-1")
	require.Len(t, events, 1)
	require.Equal(t, inB, events[0]["aggregateId"])
	require.Equal(t, map[string]any{"email": "bea@b.example"}, events[0]["fields"])
	require.Equal(t, []map[string]any{{"entity": "contact", "id": inB, "fields": map[string]any{"email": "bea@b.example"}}}, rows)
	require.NotContains(t, string(e.export(adminB, "c-1").body), "ada@a.example")

	events, rows = e.exportOf(v, adminA, "c-1")
	require.Len(t, events, 1)
	require.Equal(t, inA, events[0]["aggregateId"])
	require.Equal(t, []map[string]any{{"entity": "contact", "id": inA, "fields": map[string]any{"email": "ada@a.example"}}}, rows)
}

// Only the tenant's admin role exports: no token is 401, a user or an
// operator without it 403. A subject that is empty, too long, not UTF-8 or
// holding U+0000 is 400 invalid_subject, checked after the role; another
// method is 405. The answers match the OpenAPI document.
func TestExportSubjectRefused(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, 8, []*feature.Feature{crm})
	v := openAPIValidator(t, e)
	alice := token(t, "alice", tenantA, "User")
	admin := token(t, "ada", tenantA, "Admin")
	operator := token(t, "olga", tenantA, "Operator")
	id := e.contact(alice, `{"name":"Ada"}`)

	r := e.export("", id)
	requireProblem(t, r, http.StatusUnauthorized, "unauthenticated", "")
	require.NotEmpty(t, r.header.Get("WWW-Authenticate"))
	require.NotContains(t, string(r.body), "Ada")
	checkMethodExchange(t, e, v, http.MethodGet, exportPath(id), "", r, false)
	r = e.export(alice, id)
	requireProblem(t, r, http.StatusForbidden, "access_denied", "")
	require.NotContains(t, string(r.body), "Ada")
	checkMethodExchange(t, e, v, http.MethodGet, exportPath(id), alice, r, false)
	requireProblem(t, e.export(operator, id), http.StatusForbidden, "access_denied", "")
	requireProblem(t, e.export("not-a-token", id), http.StatusUnauthorized, "unauthenticated", "invalid_token")

	r = e.export(admin, strings.Repeat("s", 201))
	requireProblem(t, r, http.StatusBadRequest, "validation_error", "invalid_subject")
	checkMethodExchange(t, e, v, http.MethodGet, exportPath("x"), admin, r, false)
	for _, path := range []string{"/api/subjects//export", "/api/subjects/a%00b/export", "/api/subjects/a%FFb/export"} {
		requireProblem(t, e.do(get(path, admin)), http.StatusBadRequest, "validation_error", "invalid_subject")
	}
	requireProblem(t, e.do(get("/api/subjects//export", alice)), http.StatusForbidden, "access_denied", "")

	requireProblem(t, e.do(request{path: exportPath(id), token: admin}), http.StatusMethodNotAllowed, "method_not_allowed", "")
	require.Equal(t, "Ada", e.contactDetail(alice, id)["name"])
}

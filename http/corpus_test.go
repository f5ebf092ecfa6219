package http_test

import (
	"crypto/rand"
	"crypto/rsa"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"
)

// A corpus of bad requests: each answers 4xx with a stable code and reason,
// shows nothing internal, and none of them writes an event.
func TestBadInputCorpus(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	alice := token(t, "alice", tenantA, "User")
	bob := token(t, "bob", tenantB, "User")
	adminB := token(t, "bea", tenantB, "Admin")
	task := e.create(alice, "mine")
	id := task["id"].(string)
	before := e.events()

	claims := func(c jwt.MapClaims) jwt.MapClaims {
		base := jwt.MapClaims{"sub": "alice", "tid": tenantA.String(), "roles": []string{"User"}, "exp": time.Now().Add(time.Hour).Unix()}
		for k, v := range c {
			if v == nil {
				delete(base, k)
			} else {
				base[k] = v
			}
		}
		return base
	}
	sign := func(m jwt.SigningMethod, key any, c jwt.MapClaims) string {
		tok, err := jwt.NewWithClaims(m, c).SignedString(key)
		require.NoError(t, err)
		return tok
	}
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)

	create := func(payload string) string { return `{"type":"task.create","payload":` + payload + `}` }
	update := func(id string) string {
		return fmt.Sprintf(`{"type":"task.update","payload":{"id":%q,"version":1,"changes":{"title":"pwned"}}}`, id)
	}
	huge := create(`{"title":"` + strings.Repeat("a", 2<<20) + `"}`)

	for _, c := range []struct {
		name   string
		req    request
		status int
		code   string
		reason string
	}{
		// Broken JSON and envelopes.
		{"broken JSON", post("/api/write", alice, `{"type":"task.create","payload":{"title":"x"`), 400, "validation_error", "invalid_json"},
		{"not JSON", post("/api/write", alice, `hello`), 400, "validation_error", "invalid_json"},
		{"empty body", post("/api/write", alice, ``), 400, "validation_error", "invalid_json"},
		{"top-level array", post("/api/write", alice, `[{"type":"task.create"}]`), 400, "validation_error", "invalid_json"},
		{"top-level string", post("/api/query", alice, `"task.list"`), 400, "validation_error", "invalid_json"},
		{"trailing garbage", post("/api/write", alice, create(`{"title":"x"}`)+` x`), 400, "validation_error", "trailing_data"},
		{"two objects", post("/api/write", alice, create(`{"title":"x"}`)+create(`{"title":"y"}`)), 400, "validation_error", "trailing_data"},
		{"missing type", post("/api/write", alice, `{"payload":{"title":"x"}}`), 400, "validation_error", "invalid_envelope"},
		{"type not a string", post("/api/write", alice, `{"type":5,"payload":{}}`), 400, "validation_error", "invalid_envelope"},
		{"empty type", post("/api/command", alice, `{"type":"","payload":{}}`), 400, "validation_error", "invalid_envelope"},
		{"unknown envelope field", post("/api/write", alice, `{"type":"task.create","payload":{"title":"x"},"tenant":"b"}`), 400, "validation_error", "invalid_envelope"},
		{"batch without commands", post("/api/batch", alice, `{"cmds":[]}`), 400, "validation_error", "invalid_envelope"},
		{"batch commands not an array", post("/api/batch", alice, `{"commands":{"type":"task.create"}}`), 400, "validation_error", "invalid_envelope"},
		{"empty batch", post("/api/batch", alice, `{"commands":[]}`), 400, "validation_error", ""},
		// Unknown handlers, including SQL in the name.
		{"unknown type", post("/api/write", alice, `{"type":"task.nuke","payload":{}}`), 404, "not_found", "handler_not_found"},
		{"SQL in type", post("/api/write", alice, `{"type":"task.create'; DROP TABLE kumiko_events;--","payload":{}}`), 404, "not_found", "handler_not_found"},
		{"query on the write route", post("/api/write", alice, `{"type":"task.list","payload":{}}`), 404, "not_found", "handler_not_found"},
		// Payloads of the wrong shape.
		{"title of the wrong type", post("/api/write", alice, create(`{"title":42}`)), 400, "validation_error", ""},
		{"missing required title", post("/api/write", alice, create(`{"done":true}`)), 400, "validation_error", ""},
		{"unknown payload field", post("/api/write", alice, create(`{"title":"x","owner":"root"}`)), 400, "validation_error", ""},
		{"enum value not allowed", post("/api/write", alice, create(`{"title":"x","priority":"urgent"}`)), 400, "validation_error", ""},
		{"title too long", post("/api/write", alice, create(`{"title":"`+strings.Repeat("t", 201)+`"}`)), 400, "validation_error", ""},
		{"number out of range", post("/api/write", alice, create(`{"title":1e400}`)), 400, "validation_error", ""},
		{"payload an array", post("/api/write", alice, create(`[1,2]`)), 400, "validation_error", ""},
		{"version zero", post("/api/write", alice, fmt.Sprintf(`{"type":"task.update","payload":{"id":%q,"version":0,"changes":{"done":true}}}`, id)), 400, "validation_error", ""},
		{"list limit too high", post("/api/query", alice, `{"type":"task.list","payload":{"limit":1000}}`), 400, "validation_error", ""},
		{"batch with one bad command", post("/api/batch", alice, `{"commands":[`+create(`{"title":"ok"}`)+`,`+create(`{"title":false}`)+`]}`), 400, "validation_error", ""},
		// Ids that are not UUIDs, SQL where an identifier goes.
		{"non-UUID id", post("/api/write", alice, `{"type":"task.delete","payload":{"id":"42"}}`), 400, "validation_error", ""},
		{"SQL as id", post("/api/query", alice, `{"type":"task.detail","payload":{"id":"1' OR '1'='1"}}`), 400, "validation_error", ""},
		{"SQL as sort field", post("/api/query", alice, `{"type":"task.list","payload":{"sort":[{"field":"title; DROP TABLE read_task"}]}}`), 400, "validation_error", ""},
		{"SQL as filter field", post("/api/query", alice, `{"type":"task.list","payload":{"filter":{"1=1 OR title":"x"}}}`), 400, "validation_error", ""},
		{"SQL as null filter field", post("/api/query", alice, `{"type":"task.list","payload":{"filter":{"x IS NULL OR 1":null}}}`), 400, "validation_error", ""},
		{"SQL as cursor", post("/api/query", alice, `{"type":"task.list","payload":{"cursor":"' OR 1=1 --"}}`), 400, "validation_error", "invalid_cursor"},
		{"non-UUID inspect id", get("/api/inspect/task/1%20OR%201=1", token(t, "ada", tenantA, "Admin")), 400, "validation_error", "invalid_id"},
		// Sizes, depths, encodings, content types.
		{"huge body", post("/api/write", alice, huge), 413, "payload_too_large", ""},
		{"huge chunked body", request{path: "/api/write", token: alice, body: struct{ io.Reader }{strings.NewReader(huge)}}, 413, "payload_too_large", ""},
		{"deep nesting", post("/api/write", alice, deep(21)), 400, "validation_error", "too_deep"},
		{"deep batch", post("/api/batch", alice, `{"commands":[`+deep(21)+`]}`), 400, "validation_error", "too_deep"},
		{"nesting at the limit is only checked by the schema", post("/api/write", alice, deep(20)), 400, "validation_error", "validation_error"},
		{"invalid UTF-8", post("/api/write", alice, create("{\"title\":\"\xff\xfe\"}")), 400, "validation_error", "invalid_utf8"},
		{"NUL in a string", post("/api/write", alice, create(`{"title":"a\u0000b"}`)), 400, "validation_error", "invalid_character"},
		{"text/plain", withCT(post("/api/write", alice, create(`{"title":"x"}`)), "text/plain"), 400, "validation_error", "content_type"},
		{"form content type", withCT(post("/api/write", alice, `title=x`), "application/x-www-form-urlencoded"), 400, "validation_error", "content_type"},
		{"no content type", withCT(post("/api/write", alice, create(`{"title":"x"}`)), "-"), 400, "validation_error", "content_type"},
		{"latin-1 charset", withCT(post("/api/write", alice, create(`{"title":"x"}`)), "application/json; charset=latin1"), 400, "validation_error", "content_type"},
		{"over-long idempotency key", with(post("/api/write", alice, create(`{"title":"x"}`)), "Idempotency-Key", strings.Repeat("k", 256)), 400, "validation_error", "idempotency_key"},
		// Tokens.
		{"missing token", post("/api/write", "", create(`{"title":"x"}`)), 401, "unauthenticated", "unauthenticated"},
		{"forged token", post("/api/write", sign(jwt.SigningMethodHS256, []byte(strings.Repeat("f", 32)), claims(nil)), create(`{"title":"x"}`)), 401, "unauthenticated", "invalid_token"},
		{"expired token", post("/api/write", sign(jwt.SigningMethodHS256, secret, claims(jwt.MapClaims{"exp": time.Now().Add(-time.Minute).Unix()})), create(`{"title":"x"}`)), 401, "unauthenticated", "token_expired"},
		{"token without exp", post("/api/write", sign(jwt.SigningMethodHS256, secret, claims(jwt.MapClaims{"exp": nil})), create(`{"title":"x"}`)), 401, "unauthenticated", "invalid_token"},
		{"alg none", post("/api/write", sign(jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, claims(nil)), create(`{"title":"x"}`)), 401, "unauthenticated", "invalid_token"},
		{"RS256 token", post("/api/write", sign(jwt.SigningMethodRS256, rsaKey, claims(nil)), create(`{"title":"x"}`)), 401, "unauthenticated", "invalid_token"},
		{"HS512 token", post("/api/write", sign(jwt.SigningMethodHS512, secret, claims(nil)), create(`{"title":"x"}`)), 401, "unauthenticated", "invalid_token"},
		{"malformed tid", post("/api/write", sign(jwt.SigningMethodHS256, secret, claims(jwt.MapClaims{"tid": "tenant-a"})), create(`{"title":"x"}`)), 401, "unauthenticated", "invalid_token"},
		{"roles not a list", post("/api/write", sign(jwt.SigningMethodHS256, secret, claims(jwt.MapClaims{"roles": "Admin"})), create(`{"title":"x"}`)), 401, "unauthenticated", "invalid_token"},
		{"no sub", post("/api/write", sign(jwt.SigningMethodHS256, secret, claims(jwt.MapClaims{"sub": nil})), create(`{"title":"x"}`)), 401, "unauthenticated", "invalid_token"},
		{"garbage token", post("/api/write", "not.a.jwt", create(`{"title":"x"}`)), 401, "unauthenticated", "invalid_token"},
		{"basic auth", with(post("/api/write", "", create(`{"title":"x"}`)), "Authorization", "Basic YWxpY2U6c2VjcmV0"), 401, "unauthenticated", "authorization_header"},
		// Roles and other tenants' ids.
		{"role without write access", post("/api/write", token(t, "vera", tenantA, "Viewer"), create(`{"title":"x"}`)), 403, "access_denied", ""},
		{"update another tenant's task", post("/api/write", bob, update(id)), 404, "not_found", "aggregate_not_found"},
		{"delete another tenant's task", post("/api/write", bob, fmt.Sprintf(`{"type":"task.delete","payload":{"id":%q}}`, id)), 404, "not_found", "aggregate_not_found"},
		{"complete another tenant's task", post("/api/command", bob, fmt.Sprintf(`{"type":"task.complete","payload":{"id":%q,"version":1}}`, id)), 404, "not_found", "aggregate_not_found"},
		{"inspect another tenant's task", get("/api/inspect/task/"+id, adminB), 404, "not_found", "aggregate_not_found"},
		{"inspect without admin role", get("/api/inspect/task/"+id, alice), 403, "access_denied", ""},
		{"create with another tenant's id", post("/api/write", bob, create(fmt.Sprintf(`{"id":%q,"title":"takeover"}`, id))), 409, "version_conflict", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := doOn(t, e.srv, c.req)
			requireProblem(t, r, c.status, c.code, c.reason)
			if c.status == 401 {
				require.NotEmpty(t, r.header.Get("WWW-Authenticate"))
			}
		})
	}
	require.Equal(t, before, e.events(), "no bad request wrote an event")
	detail := e.post("/api/query", alice, fmt.Sprintf(`{"type":"task.detail","payload":{"id":%q}}`, id)).data(t)
	require.Equal(t, "mine", detail["title"])
	require.Equal(t, float64(1), detail["version"])
}

func post(path, token, body string) request {
	return request{path: path, token: token, body: strings.NewReader(body)}
}

func get(path, token string) request {
	return request{method: http.MethodGet, path: path, token: token}
}

func withCT(r request, ct string) request { r.contentType = ct; return r }

func with(r request, header, value string) request {
	if r.header == nil {
		r.header = map[string]string{}
	}
	r.header[header] = value
	return r
}

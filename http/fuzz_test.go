package http_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/feature"
	khttp "github.com/kumiko-go/kumiko/http"
	"github.com/kumiko-go/kumiko/kumikotest"
	"github.com/kumiko-go/kumiko/samples/tasks"
)

// The fuzz targets below send whatever they are given through a real server
// on a real database. The property is the one clients rely on: an answer is
// a success or a 4xx problem+json that shows nothing internal, never a 5xx.
// With their seeds they run as ordinary tests; go test -fuzz explores more.

// fuzzServer is a server over a fresh database with the tasks sample and the
// probe feature, for one fuzz target.
func fuzzServer(f *testing.F) *httptest.Server {
	f.Helper()
	app := kumikotest.NewApp(f, []*feature.Feature{tasks.Feature, probe})
	s, err := khttp.NewServer(khttp.Config{
		JWTSecret: secret, Idempotency: newMemStore(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}, app.Executor, app.Store)
	require.NoError(f, err)
	srv := httptest.NewServer(s.Handler())
	f.Cleanup(srv.Close)
	return srv
}

// requireNo5xx sends r and checks the property.
func requireNo5xx(t *testing.T, srv *httptest.Server, r request) {
	t.Helper()
	rep, err := send(srv, r)
	require.NoError(t, err)
	require.Less(t, rep.status, 500, "%s", rep)
	requireNoLeak(t, rep)
	if rep.status >= 400 {
		require.Equal(t, "application/problem+json", rep.header.Get("Content-Type"), "%s", rep)
		p := rep.obj(t)
		require.NotEmpty(t, p["code"], "%s", rep)
		require.Equal(t, float64(rep.status), p["status"], "%s", rep)
	}
}

// The payloads of writes, batches, commands and queries.
func FuzzPayload(f *testing.F) {
	srv := fuzzServer(f)
	alice := fuzzToken(f)
	for _, s := range []struct {
		route   uint8
		typ     string
		payload string
	}{
		{0, "task.create", `{"title":"x","dueAt":"2026-04-15T10:00:00+02:00","priority":"high"}`},
		{0, "task.create", `{"title":"x","dueAt":"0000-01-01T00:00:00Z"}`},
		{0, "task.create", `{"title":"x","dueAt":"9999-12-31T23:00:00-02:00"}`},
		{0, "task.create", `{"title":"a\u0000b"}`},
		{0, "task.create", `{"id":"0190a000-0000-7000-8000-00000000000a","title":1e400}`},
		{0, "task.update", `{"id":"0190a000-0000-7000-8000-00000000000a","version":2147483648,"changes":{"done":true}}`},
		{0, "task.update", `{"id":"0190a000-0000-7000-8000-00000000000a","version":-1,"changes":{}}`},
		{0, "task.delete", `{"id":"0190a000-0000-7000-8000-000000000000"}`},
		{1, "task.create", `{"title":"in a batch","dueAt":"0001-01-01T00:00:00Z"}`},
		{2, "task.complete", `{"id":"0190a000-0000-7000-8000-00000000000a","version":9223372036854775807}`},
		{2, "probe.fail", `{"note":"` + strings.Repeat("n", 11) + `"}`},
		{3, "task.detail", `{"id":"0190a000-0000-7000-8000-00000000000a","asOf":"9999-12-31T23:59:59.999999999Z"}`},
		{3, "task.stats", `{}`},
		{3, "task.list", `{"limit":200,"includeDeleted":true,"asOf":"0001-01-01T00:00:00Z"}`},
		{0, "task.create", `{"title":"x","title":"y"}`},
		{1, "task.create", `{"title":"x","\u0074itle":"y"}`},
		{3, "task.list", `{"filter":{"done":true,"done":false},"sort":[{"field":"title"},{"field":"title","field":"dueAt"}]}`},
	} {
		f.Add(s.route, s.typ, []byte(s.payload))
	}
	routes := []string{"/api/write", "/api/batch", "/api/command", "/api/query"}
	f.Fuzz(func(t *testing.T, route uint8, typ string, payload []byte) {
		envelope := fmt.Sprintf(`{"type":%s,"payload":%s}`, jsonString(typ), payload)
		path := routes[int(route)%len(routes)]
		if path == "/api/batch" {
			envelope = `{"commands":[` + envelope + `]}`
		}
		requireNo5xx(t, srv, post(path, alice, envelope))
	})
}

// The list input: cursors, filters, sort keys, limits and asOf.
func FuzzList(f *testing.F) {
	srv := fuzzServer(f)
	alice := fuzzToken(f)
	// Real cursors for the seeds: rows at both ends of the time range.
	for _, due := range []string{"0001-01-01T00:00:00Z", "9999-12-31T23:59:59.999999Z", "2026-05-01T12:00:00Z"} {
		rep, err := send(srv, post("/api/write", alice, `{"type":"task.create","payload":{"title":"t","dueAt":"`+due+`"}}`))
		require.NoError(f, err)
		require.Equal(f, http.StatusOK, rep.status, "%s", rep)
	}
	encode := func(v any) string {
		raw, err := json.Marshal(v)
		require.NoError(f, err)
		return base64.RawURLEncoding.EncodeToString(raw)
	}
	for _, sort := range []string{`[{"field":"dueAt"}]`, `[{"field":"title","desc":true},{"field":"priority"}]`, ``} {
		rep, err := send(srv, post("/api/query", alice, `{"type":"task.list","payload":{"limit":1,"sort":`+orNull(sort)+`}}`))
		require.NoError(f, err)
		require.Equal(f, http.StatusOK, rep.status, "%s", rep)
		var res struct {
			Data struct{ NextCursor string } `json:"data"`
		}
		require.NoError(f, json.Unmarshal(rep.body, &res))
		f.Add(res.Data.NextCursor, []byte(`{}`), []byte(sort), "", int16(1))
	}
	id := "0190a000-0000-7000-8000-00000000000a"
	f.Add(encode(map[string]any{"o": "title,id", "v": []any{"a\x00b", id}}), []byte(`null`), []byte(`[{"field":"title"}]`), "", int16(2))
	f.Add(encode(map[string]any{"o": "dueAt,id", "v": []any{"10000-01-01T00:00:00Z", id}}), []byte(`{}`), []byte(`[{"field":"dueAt"}]`), "", int16(2))
	f.Add(encode(map[string]any{"o": "createdAt,id", "v": []any{1e308, "{" + id + "}"}}), []byte(`{"done":true}`), []byte(``), "", int16(0))
	f.Add("' OR 1=1 --", []byte(`{"title":"x","dueAt":null,"id":"`+id+`"}`), []byte(`[{"field":"id"},{"field":"id"}]`), "2026-01-01T00:00:00Z", int16(200))
	f.Add("", []byte(`{"dueAt":"0000-01-01T00:00:00Z"}`), []byte(`[`+strings.Repeat(`{"field":"title"},`, 20)+`{"field":"id"}]`), "9999-12-31T23:00:00-02:00", int16(-1))
	f.Add("", []byte(`{"1=1 OR title":"x"}`), []byte(`[{"field":"title; DROP TABLE read_task"}]`), "yesterday", int16(1000))
	f.Fuzz(func(t *testing.T, cursor string, filter, sort []byte, asOf string, limit int16) {
		payload := map[string]any{"limit": limit, "cursor": cursor}
		if json.Valid(filter) {
			payload["filter"] = json.RawMessage(filter)
		}
		if json.Valid(sort) {
			payload["sort"] = json.RawMessage(sort)
		}
		if asOf != "" {
			payload["asOf"] = asOf
		}
		body, err := json.Marshal(map[string]any{"type": "task.list", "payload": payload})
		if err != nil {
			return // not a request anyone can send
		}
		requireNo5xx(t, srv, post("/api/query", alice, string(body)))
	})
}

// Boundary integers where versions, limits, numbers and integer command
// fields are read, on a stream that exists and one that does not, alone and
// in a batch.
func FuzzIntegers(f *testing.F) {
	srv := fuzzServer(f)
	alice := fuzzToken(f)
	rep, err := send(srv, post("/api/write", alice, `{"type":"task.create","payload":{"title":"t"}}`))
	require.NoError(f, err)
	require.Equal(f, http.StatusOK, rep.status, "%s", rep)
	var created struct {
		Data struct{ ID string } `json:"data"`
	}
	require.NoError(f, json.Unmarshal(rep.body, &created))
	const unknown = "0190a000-0000-7000-8000-0000000000ff"
	templates := []struct{ path, typ, payload string }{
		{"/api/write", "task.update", `{"id":"` + created.Data.ID + `","version":%n,"changes":{"done":true}}`},
		{"/api/write", "task.update", `{"id":"` + unknown + `","version":%n,"changes":{"done":true}}`},
		{"/api/write", "task.delete", `{"id":"` + created.Data.ID + `","version":%n}`},
		{"/api/write", "task.restore", `{"id":"` + unknown + `","version":%n}`},
		{"/api/batch", "task.update", `{"id":"` + created.Data.ID + `","version":%n,"changes":{"title":"b"}}`},
		{"/api/query", "task.list", `{"limit":%n}`},
		{"/api/command", "task.complete", `{"id":"` + created.Data.ID + `","version":%n}`},
		{"/api/command", "task.complete", `{"id":"` + unknown + `","version":%n}`},
	}
	for i := range templates {
		for _, n := range []string{"2147483646", "2147483647", "2147483648", "-2147483648", "9007199254740992", "-9007199254740992",
			"9223372036854775807", "9223372036854775808", "-9223372036854775809", "1e400", "-0", "1.0", "0"} {
			f.Add(uint8(i), n)
		}
	}
	f.Fuzz(func(t *testing.T, which uint8, num string) {
		tpl := templates[int(which)%len(templates)]
		envelope := fmt.Sprintf(`{"type":%q,"payload":%s}`, tpl.typ, strings.Replace(tpl.payload, "%n", num, 1))
		if tpl.path == "/api/batch" {
			envelope = `{"commands":[` + envelope + `]}`
		}
		requireNo5xx(t, srv, post(tpl.path, alice, envelope))
	})
}

// The Authorization header and the claims of signed tokens.
func FuzzAuthorization(f *testing.F) {
	srv := fuzzServer(f)
	valid := fuzzToken(f)
	exp := time.Now().Add(time.Hour).Unix()
	for _, s := range []struct{ header, claims string }{
		{"Bearer " + valid, ``},
		{"Bearer " + valid + "x", ``},
		{"bearer " + valid, ``},
		{"Bearer", ``},
		{"Bearer a.b.c", ``},
		{"Basic YWxpY2U6c2VjcmV0", ``},
		{"", fmt.Sprintf(`{"sub":"alice","tid":%q,"roles":["User"],"exp":%d}`, tenantA, exp)},
		{"", fmt.Sprintf(`{"sub":"alice","tid":"00000000-0000-4000-8000-000000000000","roles":["Admin"],"exp":%d}`, exp)},
		{"", fmt.Sprintf(`{"sub":"alice","tid":%q,"roles":"Admin","exp":1e400}`, tenantA)},
		{"", fmt.Sprintf(`{"sub":["a"],"tid":%q,"exp":%d,"nbf":"soon"}`, tenantA, exp)},
		{"", fmt.Sprintf(`{"sub":"alice","tid":%q,"roles":[null,1],"exp":%d,"iat":-62135596801}`, tenantA, exp)},
		{"", fmt.Sprintf(`{"sub":"a\u0000b","tid":%q,"roles":["User\u0000"],"exp":%d}`, tenantA, exp)},
	} {
		f.Add(s.header, []byte(s.claims))
	}
	f.Fuzz(func(t *testing.T, header string, claims []byte) {
		if len(claims) > 0 {
			header = "Bearer " + signHS256(claims)
		}
		if strings.ContainsFunc(header, func(r rune) bool { return r < ' ' && r != '\t' || r == 0x7f }) {
			return // not a header anyone can send
		}
		for _, r := range []request{
			post("/api/write", "", `{"type":"task.create","payload":{"title":"x"}}`),
			post("/api/query", "", `{"type":"task.list","payload":{}}`),
			get("/api/inspect/task/0190a000-0000-7000-8000-00000000000a", ""),
		} {
			requireNo5xx(t, srv, with(r, "Authorization", header))
		}
	})
}

// fuzzToken is alice's token.
func fuzzToken(f *testing.F) string {
	tok, err := khttp.IssueToken(secret, "alice", tenantA.String(), []string{"User"}, time.Hour)
	require.NoError(f, err)
	return tok
}

// signHS256 signs raw claims as an HS256 token with the test secret.
func signHS256(claims []byte) string {
	enc := base64.RawURLEncoding
	unsigned := enc.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT"}`)) + "." + enc.EncodeToString(claims)
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(unsigned))
	return unsigned + "." + enc.EncodeToString(mac.Sum(nil))
}

func jsonString(s string) string {
	raw, _ := json.Marshal(s)
	return string(raw)
}

func orNull(s string) string {
	if s == "" {
		return "null"
	}
	return s
}

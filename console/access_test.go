package console_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A tenant's admin cannot sign in and is refused with a session cookie made
// by hand; an anonymous visitor is sent to the login form or gets 401.
func TestRefused(t *testing.T) {
	e := newEnv(t)
	tb := newTab(t)
	tb.login(t, e, "/ops/consumers", token(t, "ada", "Admin"))
	tb.run(t, visible(`form.login p.error`))
	require.Contains(t, tb.text(t, `form.login p.error`), "does not have the role Operator")

	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	// get answers the status and the Location header.
	get := func(path, cookie, accept string) (int, string) {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, e.url+path, nil)
		require.NoError(t, err)
		if cookie != "" {
			req.AddCookie(&http.Cookie{Name: "kumiko_ops", Value: cookie})
		}
		req.Header.Set("Accept", accept)
		res, err := noRedirect.Do(req)
		require.NoError(t, err)
		require.NoError(t, res.Body.Close())
		return res.StatusCode, res.Header.Get("Location")
	}
	status, location := get("/ops/consumers", "", "text/html")
	require.Equal(t, http.StatusSeeOther, status)
	require.Equal(t, "/ops/login?next=%2Fops%2Fconsumers", location)
	require.Equal(t, http.StatusUnauthorized, first(get("/ops/consumers/live", "", "text/event-stream")))
	require.Equal(t, http.StatusUnauthorized, first(get("/ops/consumers/live", "not-a-token", "text/event-stream")))
	require.Equal(t, http.StatusForbidden, first(get("/ops/consumers/live", token(t, "ada", "Admin"), "text/event-stream")))
	require.Equal(t, http.StatusForbidden, first(get("/ops/consumers", token(t, "ada", "Admin"), "text/html")))
	// The cookie is the console's only: the API keeps bearer tokens.
	require.Equal(t, http.StatusUnauthorized, first(get("/api/consumers", token(t, "olga", "Operator"), "application/json")))
}

// The console's actions need the session's CSRF token and the console's own
// origin; the cookies are HttpOnly and SameSite=Strict.
func TestCSRF(t *testing.T) {
	e := newEnv(t)
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	login := url.Values{"token": {token(t, "olga", "Operator")}}
	// post answers the status and the cookies set.
	post := func(path, origin string, form url.Values, cookies []*http.Cookie, csrf string) (int, []*http.Cookie) {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, e.url+path, strings.NewReader(form.Encode()))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		if csrf != "" {
			req.Header.Set("X-CSRF-Token", csrf)
		}
		for _, c := range cookies {
			req.AddCookie(c)
		}
		res, err := noRedirect.Do(req)
		require.NoError(t, err)
		require.NoError(t, res.Body.Close())
		return res.StatusCode, res.Cookies()
	}
	status, _ := post("/ops/login", "https://evil.example", login, nil, "")
	require.Equal(t, http.StatusForbidden, status)
	status, cookies := post("/ops/login", e.url, login, nil, "")
	require.Equal(t, http.StatusSeeOther, status)
	require.Len(t, cookies, 2)
	var csrf string
	for _, c := range cookies {
		require.True(t, c.HttpOnly, c.Name)
		require.Equal(t, http.SameSiteStrictMode, c.SameSite, c.Name)
		require.Equal(t, "/ops", c.Path)
		if c.Name == "kumiko_ops_csrf" {
			csrf = c.Value
		}
	}
	require.NotEmpty(t, csrf)
	for _, c := range cookies {
		require.False(t, c.Secure, "plain HTTP: %s", c.Name)
	}
	// Behind a proxy that terminated TLS they are Secure.
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, e.url+"/ops/login", strings.NewReader(login.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", e.url)
	req.Header.Set("X-Forwarded-Proto", "https")
	res, err := noRedirect.Do(req)
	require.NoError(t, err)
	require.NoError(t, res.Body.Close())
	require.Len(t, res.Cookies(), 2)
	for _, c := range res.Cookies() {
		require.True(t, c.Secure, "over TLS: %s", c.Name)
	}

	form := url.Values{"name": {"entry_log"}}
	require.Equal(t, http.StatusForbidden, first(post("/ops/consumers/restart", e.url, form, cookies, "")), "no CSRF token")
	require.Equal(t, http.StatusForbidden, first(post("/ops/consumers/restart", e.url, form, cookies, "wrong")), "a wrong CSRF token")
	require.Equal(t, http.StatusForbidden, first(post("/ops/consumers/restart", "https://evil.example", form, cookies, csrf)), "another origin")
	require.Equal(t, http.StatusForbidden, first(post("/ops/consumers/restart", "", form, cookies, csrf)), "no origin")
	require.Equal(t, http.StatusOK, first(post("/ops/consumers/restart", e.url, form, cookies, csrf)))

	// The parked streams' actions alike; a stream not parked is a refusal
	// the page shows (200), an unknown action 404.
	parked := url.Values{"name": {"entry_mail"}, "stream": {"not-parked"}}
	require.Equal(t, http.StatusForbidden, first(post("/ops/consumers/parked/retry", e.url, parked, cookies, "")), "no CSRF token")
	require.Equal(t, http.StatusForbidden, first(post("/ops/consumers/parked/skip", "https://evil.example", parked, cookies, csrf)), "another origin")
	require.Equal(t, http.StatusOK, first(post("/ops/consumers/parked/retry", e.url, parked, cookies, csrf)))
	require.Equal(t, http.StatusNotFound, first(post("/ops/consumers/parked/drop", e.url, parked, cookies, csrf)))
}

// first is the first of two values.
func first[A, B any](a A, _ B) A { return a }

package console

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/kumikotype"
)

// Cookie and header names of a console session.
const (
	// SessionCookie holds the operator's bearer token.
	SessionCookie = "kumiko_ops"
	// CSRFCookie holds the session's CSRF token, which every page also
	// carries in <meta name="csrf-token">.
	CSRFCookie = "kumiko_ops_csrf"
	// CSRFHeader carries the CSRF token on the console's POST requests
	// (a form sends it in the field "csrf" instead).
	CSRFHeader = "X-CSRF-Token"
)

// session is a signed-in operator.
type session struct {
	user feature.User
	csrf string
	// bearer: the request named its token in the Authorization header,
	// which a browser never sends on its own, so it needs no CSRF check.
	bearer bool
}

// errNoSession is a request without a session cookie.
var errNoSession = errors.New("no session")

// session resolves the request's operator: errNoSession without a cookie,
// the verifier's error for a bad or expired token, errNotOperator for a user
// without the role.
//
// A request with an Authorization header is resolved by its bearer token
// instead of the cookie, as the API resolves it: scripts and tools reach the
// console's routes (and the mounted jobs UI) that way.
func (c *Console) session(r *http.Request) (session, error) {
	token, bearer := "", false
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, tok, _ := strings.Cut(h, " ")
		if !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(tok) == "" {
			return session{}, errNoSession
		}
		token, bearer = strings.TrimSpace(tok), true
	} else if ck, err := r.Cookie(SessionCookie); err == nil {
		token = ck.Value
	}
	if token == "" {
		return session{}, errNoSession
	}
	u, _, err := c.cfg.Authenticate(r.Context(), token)
	if err != nil {
		return session{}, err
	}
	if !u.Authenticated {
		return session{}, errNoSession
	}
	if !u.HasRole(c.cfg.OperatorRole) {
		return session{user: u}, errNotOperator
	}
	s := session{user: u, bearer: bearer}
	if ck, err := r.Cookie(CSRFCookie); err == nil && !bearer {
		s.csrf = ck.Value
	}
	return s, nil
}

var errNotOperator = errors.New("not an operator")

// page serves h to operators: anonymous visitors of an HTML page are sent to
// the login form, others get 401 unauthenticated; users without the role get
// 403 access_denied.
func (c *Console) page(h func(http.ResponseWriter, *http.Request, session)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, err := c.session(r)
		switch {
		case errors.Is(err, errNotOperator):
			problem(w, kumikotype.CodeAccessDenied, "",
				"the console needs the role "+c.cfg.OperatorRole)
		case err != nil:
			if strings.Contains(r.Header.Get("Accept"), "text/html") {
				http.Redirect(w, r, c.cfg.Prefix+"/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
				return
			}
			problem(w, kumikotype.CodeUnauthenticated, "", "sign in to use the console")
		default:
			h(w, r, s)
		}
	})
}

// action serves h, a state-changing request, to operators when it comes from
// the console's own origin and carries the session's CSRF token.
func (c *Console) action(h func(http.ResponseWriter, *http.Request, session)) http.Handler {
	return c.page(func(w http.ResponseWriter, r *http.Request, s session) {
		if s.bearer {
			h(w, r, s)
			return
		}
		if !sameOrigin(r) {
			problem(w, kumikotype.CodeAccessDenied, kumikotype.ReasonCrossOrigin, "the request did not come from the console's own origin")
			return
		}
		sent := r.Header.Get(CSRFHeader)
		if sent == "" {
			sent = r.PostFormValue("csrf")
		}
		if s.csrf == "" || subtle.ConstantTimeCompare([]byte(sent), []byte(s.csrf)) != 1 {
			problem(w, kumikotype.CodeAccessDenied, kumikotype.ReasonCSRFToken, "the request lacks the session's CSRF token; reload the page")
			return
		}
		h(w, r, s)
	})
}

// guarded serves h to operators when the request comes from the console's
// own origin: for a mounted tool whose script cannot send the CSRF token,
// the SameSite=Strict cookie plus the origin check keep other sites out.
func (c *Console) guarded(h http.Handler) http.Handler {
	return c.page(func(w http.ResponseWriter, r *http.Request, s session) {
		if !s.bearer && !sameOrigin(r) {
			problem(w, kumikotype.CodeAccessDenied, kumikotype.ReasonCrossOrigin, "the request did not come from the console's own origin")
			return
		}
		h.ServeHTTP(w, r)
	})
}

// sameOrigin reports whether r's Origin (or, without one, its Referer) names
// the host r was sent to. A request with neither is refused: browsers send
// Origin on every cross-origin and every same-origin POST.
func sameOrigin(r *http.Request) bool {
	src := r.Header.Get("Origin")
	if src == "" {
		src = r.Header.Get("Referer")
	}
	if src == "" || src == "null" {
		return false
	}
	u, err := url.Parse(src)
	return err == nil && u.Host != "" && strings.EqualFold(u.Host, r.Host)
}

// setSession stores token (valid until exp) and a fresh CSRF token in the
// session cookies.
func setSession(w http.ResponseWriter, r *http.Request, prefix, token string, exp time.Time) error {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return err
	}
	secure := overTLS(r)
	for name, v := range map[string]string{SessionCookie: token, CSRFCookie: base64.RawURLEncoding.EncodeToString(b)} {
		http.SetCookie(w, &http.Cookie{
			Name: name, Value: v, Path: prefix, Expires: exp, HttpOnly: true, Secure: secure,
			SameSite: http.SameSiteStrictMode,
		})
	}
	return nil
}

// overTLS reports whether the browser reached the server over TLS: the
// request itself, or a proxy that terminated TLS and said so in
// X-Forwarded-Proto (trusting it can only make the cookies stricter).
func overTLS(r *http.Request) bool {
	return r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")
}

// clearSession removes the session cookies.
func clearSession(w http.ResponseWriter, r *http.Request, prefix string) {
	for _, name := range []string{SessionCookie, CSRFCookie} {
		http.SetCookie(w, &http.Cookie{
			Name: name, Path: prefix, MaxAge: -1, HttpOnly: true, Secure: overTLS(r),
			SameSite: http.SameSiteStrictMode,
		})
	}
}

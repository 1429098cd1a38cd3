package web

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"unicode"

	"github.com/jobplane/jobplane/internal/principal"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
)

// Cookie names. The session cookie holds the API token itself: the server
// keeps no session state, so replicas and restarts need nothing shared, and
// revoking the token signs the browser out.
const (
	sessionCookie = "jobplane_session"
	// preCookie carries the sign-in form's CSRF token before there is a
	// session (double submit: the form field must equal the cookie).
	preCookie = "jobplane_signin"
	csrfField = "csrf"
	// csrfHeader is how htmx requests carry the token.
	csrfHeader = "X-CSRF-Token"
)

// session is a signed-in principal.
type session struct {
	Actor principal.Actor
	// CSRF is the token every form of this session carries.
	CSRF string
}

// csrfFor derives a session's CSRF token from its API token: only someone
// who knows the token (the cookie is HttpOnly, so not a script of another
// site) can compute it, and it needs no server-side state.
func csrfFor(apiToken string) string {
	sum := sha256.Sum256([]byte("jobplane web csrf\x00" + apiToken))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

func (h *Handler) cookie(r *http.Request, name, value string, maxAge int) *http.Cookie {
	return &http.Cookie{Name: name, Value: value, Path: "/", MaxAge: maxAge, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: h.secure || r.TLS != nil}
}

// authenticate resolves the session cookie to a principal with the API's
// authenticator (expiry and revocation included).
func (h *Handler) authenticate(r *http.Request) (*session, error) {
	c, err := r.Cookie(sessionCookie)
	if err != nil || c.Value == "" {
		return nil, fmt.Errorf("not signed in: %w", protocol.ErrUnauthorized)
	}
	probe := &http.Request{Header: http.Header{"Authorization": {"Bearer " + c.Value}}}
	p, err := h.auth.Principal(r.Context(), probe)
	if err != nil {
		return nil, err
	}
	return &session{Actor: principal.Actor{TenantID: p.Tenant, Name: p.Name, Kind: p.Kind, Admin: p.Admin}, CSRF: csrfFor(c.Value)}, nil
}

// user wraps a handler that needs a signed-in principal; on a state-changing
// method it also requires the session's CSRF token and a same-origin
// request.
func (h *Handler) user(fn func(http.ResponseWriter, *http.Request, *session)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s, err := h.authenticate(r)
		if err != nil {
			if r.Method == http.MethodGet && r.Header.Get("HX-Request") == "" && !strings.HasSuffix(r.URL.Path, "/stream") {
				http.Redirect(w, r, "/signin?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
				return
			}
			if r.Header.Get("HX-Request") != "" {
				w.Header().Set("HX-Redirect", "/signin")
			}
			h.renderError(w, r, nil, err)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			if err := checkCSRF(r, s.CSRF); err != nil {
				h.renderError(w, r, s, err)
				return
			}
		}
		// Everything the page does is in the principal's tenant (MT3).
		fn(w, r.WithContext(store.WithTenant(r.Context(), s.Actor.TenantID)), s)
	}
}

// checkCSRF requires the form field (or htmx header) to equal want, and a
// browser-sent Origin, when present, to be this host.
func checkCSRF(r *http.Request, want string) error {
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		if err != nil || u.Host != r.Host {
			return fmt.Errorf("request from origin %q to %s: %w", o, r.Host, protocol.ErrCSRF)
		}
	}
	got := r.Header.Get(csrfHeader)
	if got == "" {
		r.Body = http.MaxBytesReader(nil, r.Body, 1<<20)
		if err := readForm(r); err != nil {
			return err
		}
		got = r.PostFormValue(csrfField)
	}
	if got == "" || subtle.ConstantTimeCompare([]byte(got), []byte(want)) != 1 {
		return fmt.Errorf("the form's CSRF token is missing or wrong; reload the page and try again: %w", protocol.ErrCSRF)
	}
	return nil
}

// readForm reads a POST form's body, refusing one that did not arrive in
// time (408) or is over its limit (413) as the API does; a form otherwise
// malformed reads as empty and fails its CSRF check.
func readForm(r *http.Request) error {
	// ParseMultipartForm drops ParseForm's error on a form that is not
	// multipart, so each is asked in turn.
	err := r.ParseForm()
	if err == nil {
		if err = r.ParseMultipartForm(1 << 20); errors.Is(err, http.ErrNotMultipart) {
			return nil
		}
	}
	if err == nil {
		return nil
	}
	if err := protocol.BodyError(err); errors.Is(err, protocol.ErrRequestTimeout) || errors.Is(err, protocol.ErrTooLarge) {
		return err
	}
	return nil
}

func randomToken() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

type signinData struct {
	Pre   string
	Next  string
	Error string
}

func (h *Handler) signinForm(w http.ResponseWriter, r *http.Request) {
	pre := randomToken()
	http.SetCookie(w, h.cookie(r, preCookie, pre, 600))
	h.render(w, r, http.StatusOK, "signin", view{Title: "Sign in", Data: signinData{Pre: pre, Next: safeNext(r.URL.Query().Get("next"))}})
}

func (h *Handler) signin(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 1<<20)
	if err := readForm(r); err != nil {
		h.renderError(w, r, nil, err)
		return
	}
	pre, err := r.Cookie(preCookie)
	field := r.PostFormValue(csrfField)
	if err != nil || field == "" || subtle.ConstantTimeCompare([]byte(pre.Value), []byte(field)) != 1 {
		h.renderError(w, r, nil, fmt.Errorf("the sign-in form expired; reload it and sign in again: %w", protocol.ErrCSRF))
		return
	}
	next := safeNext(r.PostFormValue("next"))
	tok := strings.TrimSpace(r.PostFormValue("token"))
	again := func(msg string) {
		p := randomToken()
		http.SetCookie(w, h.cookie(r, preCookie, p, 600))
		h.render(w, r, http.StatusUnauthorized, "signin", view{Title: "Sign in", Data: signinData{Pre: p, Next: next, Error: msg}})
	}
	if tok == "" {
		again("Enter an API token.")
		return
	}
	probe := &http.Request{Header: http.Header{"Authorization": {"Bearer " + tok}}}
	if _, err := h.auth.Principal(r.Context(), probe); err != nil {
		again("That token is unknown, expired or revoked.")
		return
	}
	http.SetCookie(w, h.cookie(r, sessionCookie, tok, 0))
	http.SetCookie(w, h.cookie(r, preCookie, "", -1))
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// signout forgets the cookie; the token itself stays valid (it is the
// principal's API token, which `jobplane` CLI may be using too).
func (h *Handler) signout(w http.ResponseWriter, r *http.Request, _ *session) {
	http.SetCookie(w, h.cookie(r, sessionCookie, "", -1))
	http.Redirect(w, r, "/signin", http.StatusSeeOther)
}

// safeNext keeps a post-sign-in redirect on this site.
func safeNext(n string) string {
	// Browsers drop tabs and newlines from a URL before they resolve it
	// ("/\t/evil.example" becomes "//evil.example", another host), so any
	// control character or space refuses the path, as does anything that
	// parses with a scheme, host or user.
	if n == "" || len(n) > 2048 || !strings.HasPrefix(n, "/") || strings.HasPrefix(n, "//") || strings.Contains(n, `\`) ||
		strings.ContainsFunc(n, func(r rune) bool { return r <= ' ' || r == 0x7f || unicode.IsSpace(r) || unicode.IsControl(r) }) {
		return "/runs"
	}
	u, err := url.Parse(n)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || !strings.HasPrefix(u.Path, "/") || strings.HasPrefix(u.Path, "//") {
		return "/runs"
	}
	return n
}

package web_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/audit"
	"github.com/jobplane/jobplane/internal/authn"
	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
	"github.com/jobplane/jobplane/internal/web"
)

// Every state-changing route refuses a form without the session's CSRF
// token, with a wrong one, and from another origin, and changes nothing;
// the same form with the token goes through.
func TestCSRFRequiredOnEveryStateChangingForm(t *testing.T) {
	t.Parallel()
	eachStore(t, testCSRFRequired)
}

func testCSRFRequired(t *testing.T, e *env) {
	ctx := context.Background()
	alice := e.actor("alice")
	v, _, err := e.svc.RequestRun(ctx, alice, &protocol.RunRequest{Job: "deploy", Channel: "prod"})
	require.NoError(t, err)
	runID := v.Run.ID

	c := e.client()
	csrf := c.signIn(adminToken)

	ui := web.New(web.Config{Control: e.svc, Catalogs: e.srv.Catalogs(), Admin: e.srv.Admin(), Audit: audit.NewLog(e.st), Auth: &authn.Authenticator{Store: e.st, Clock: clock.Real{}}})
	routes := ui.StateChangingRoutes()
	require.NotEmpty(t, routes)
	forms := map[string]url.Values{
		"/request":           {"channel": {"prod"}, "job": {"greet"}, "p.who": {"x"}},
		"/leases/release":    {"key": {"db:prod"}, "reason": {"forged"}},
		"/runs/{id}/approve": {"comment": {"forged"}},
		"/runs/{id}/reject":  {"comment": {"forged"}},
	}
	for _, route := range routes {
		path := strings.ReplaceAll(route, "{id}", runID)
		form := url.Values{}
		for k, vs := range forms[route] {
			form[k] = vs
		}
		for name, f := range map[string]url.Values{"missing": form, "wrong": withCSRF(form, "AAAA"+csrf[4:])} {
			resp, body := c.post(path, f)
			require.Equal(t, http.StatusForbidden, resp.StatusCode, "%s %s", name, route)
			require.Contains(t, body, protocol.CodeCSRFInvalid, "%s %s", name, route)
		}
		resp, body := c.post(path, withCSRF(form, csrf), "Origin", "http://evil.example")
		require.Equal(t, http.StatusForbidden, resp.StatusCode, "cross-origin %s", route)
		require.Contains(t, body, protocol.CodeCSRFInvalid)
	}
	// Nothing happened: the run waits, no run was requested, we are signed in.
	r, err := e.st.RunGetByID(ctx, runID, false)
	require.NoError(t, err)
	require.Equal(t, store.RunPendingApproval, r.State)
	runs, _, err := e.svc.ListRuns(ctx, e.admin, store.RunListParams{})
	require.NoError(t, err)
	require.Len(t, runs, 1)
	resp, _ := c.get("/runs")
	require.Equal(t, http.StatusOK, resp.StatusCode)

	// With the token (and a same-origin Origin header) the form works.
	resp, _ = c.post("/runs/"+runID+"/cancel", withCSRF(nil, csrf), "Origin", e.url)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	r, err = e.st.RunGetByID(ctx, runID, false)
	require.NoError(t, err)
	require.Equal(t, store.RunCancelled, r.State)

	// Sign-in itself needs its double-submit token.
	anon := e.client()
	resp, body := anon.post("/signin", url.Values{"token": {adminToken}})
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	require.Contains(t, body, protocol.CodeCSRFInvalid)
	require.Empty(t, resp.Cookies())

	// Sign-out is a CSRF-protected POST that forgets the cookie.
	resp, _ = c.post("/signout", withCSRF(nil, csrf))
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	resp, _ = c.get("/runs")
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.True(t, strings.HasPrefix(resp.Header.Get("Location"), "/signin"))
}

func withCSRF(form url.Values, token string) url.Values {
	out := url.Values{}
	for k, v := range form {
		out[k] = v
	}
	out.Set("csrf", token)
	return out
}

func TestSessionCookieFlags(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := e.client()
	_, body := c.get("/signin")
	pre := csrfRE.FindStringSubmatch(body)[1]
	resp, _ := c.post("/signin", url.Values{"csrf": {pre}, "token": {adminToken}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	var sess *http.Cookie
	for _, ck := range resp.Cookies() {
		if ck.Name == "jobplane_session" {
			sess = ck
		}
	}
	require.NotNil(t, sess)
	require.True(t, sess.HttpOnly)
	require.Equal(t, http.SameSiteStrictMode, sess.SameSite)
	require.Equal(t, "/", sess.Path)
	require.False(t, sess.Secure, "plain HTTP: a Secure cookie would never come back")
	raw := strings.Join(resp.Header.Values("Set-Cookie"), "\n")
	require.Contains(t, raw, "HttpOnly")
	require.Contains(t, raw, "SameSite=Strict")

	// A wrong token sets no session.
	_, body = c.get("/signin")
	pre = csrfRE.FindStringSubmatch(body)[1]
	resp, body = c.post("/signin", url.Values{"csrf": {pre}, "token": {"jpt_wrong"}})
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	require.Contains(t, body, "unknown, expired or revoked")
	for _, ck := range resp.Cookies() {
		require.NotEqual(t, "jobplane_session", ck.Name)
	}

	// Over TLS (or with an https public URL) the cookies are Secure.
	for name, cfg := range map[string]struct {
		public string
		tls    bool
	}{"tls": {"", true}, "https public URL": {"https://jobs.example", false}} {
		ui := web.New(web.Config{Control: e.svc, Catalogs: e.srv.Catalogs(), Admin: e.srv.Admin(), Audit: audit.NewLog(e.st), Auth: &authn.Authenticator{Store: e.st, Clock: clock.Real{}}, PublicURL: cfg.public})
		req := httptest.NewRequest(http.MethodGet, "/signin", nil)
		if cfg.tls {
			req.TLS = &tls.ConnectionState{}
		}
		rec := httptest.NewRecorder()
		ui.ServeHTTP(rec, req)
		ck := rec.Result().Cookies()
		require.NotEmpty(t, ck, name)
		pre := ck[0]
		require.True(t, pre.Secure && pre.HttpOnly && pre.SameSite == http.SameSiteStrictMode, name)
		form := url.Values{"csrf": {pre.Value}, "token": {adminToken}}
		req = httptest.NewRequest(http.MethodPost, "/signin", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.AddCookie(pre)
		if cfg.tls {
			req.TLS = &tls.ConnectionState{}
		}
		rec = httptest.NewRecorder()
		ui.ServeHTTP(rec, req)
		require.Equal(t, http.StatusSeeOther, rec.Code, name)
		found := false
		for _, ck := range rec.Result().Cookies() {
			if ck.Name == "jobplane_session" {
				found = true
				require.True(t, ck.Secure && ck.HttpOnly && ck.SameSite == http.SameSiteStrictMode, name)
			}
		}
		require.True(t, found, name)
	}

	// Every page forbids inline script and framing.
	resp, _ = c.get("/signin")
	csp := resp.Header.Get("Content-Security-Policy")
	require.Contains(t, csp, "script-src 'self'")
	require.Contains(t, csp, "frame-ancestors 'none'")
	require.Equal(t, "nosniff", resp.Header.Get("X-Content-Type-Options"))
}

// A runbook's raw HTML and javascript: links never reach the page as markup.
func TestRunbookCannotInjectScript(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := e.client()
	c.signIn(e.tokens["alice"])
	resp, body := c.get("/catalog/prod/greet")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, body, "<strong>gently</strong>", "the Markdown is rendered")
	require.Contains(t, body, `href="https://example.com/docs"`)
	require.NotContains(t, body, "<script>document.title")
	lower := strings.ToLower(body)
	require.NotContains(t, lower, `href="javascript:`)
	require.NotContains(t, lower, "href=\"javascript")
	require.Contains(t, body, "javascript:alert(3)", "an unsafe autolink stays as text")
	require.NotContains(t, body, "<script>", "no script element but the two served ones")
}

// Log text goes to the page only as JSON in an event stream, which the page
// inserts with textContent (TestBrowserRequestRunWatchLog checks the DOM);
// the stream also resumes after Last-Event-ID without repeating lines.
func TestLogStreamResumesAfterLastEventID(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startWorker()
	ctx := context.Background()
	alice := e.actor("alice")
	v, _, err := e.svc.RequestRun(ctx, alice, &protocol.RunRequest{Job: "greet", Channel: "prod", Params: json.RawMessage(`{"who":"sse"}`)})
	require.NoError(t, err)
	e.open("greet")
	c := e.client()
	c.signIn(e.tokens["alice"])
	// The first stream ends when the run has ended and every line is sent.
	_, all := c.get("/runs/" + v.Run.ID + "/log/stream")
	ids := eventIDs(all)
	require.GreaterOrEqual(t, len(ids), 4)
	require.Contains(t, all, "event: end")
	require.Contains(t, all, `\u003cscript\u003e`, "markup in log text is escaped inside the JSON")
	for _, cut := range []int{1, len(ids) / 2, len(ids)} {
		req, err := http.NewRequest(http.MethodGet, e.url+"/runs/"+v.Run.ID+"/log/stream", nil)
		require.NoError(t, err)
		req.Header.Set("Last-Event-ID", ids[cut-1])
		resp, err := c.hc.Do(req)
		require.NoError(t, err)
		b := new(strings.Builder)
		_, _ = ioCopy(b, resp)
		resp.Body.Close()
		require.Equal(t, strings.Join(ids[cut:], ","), strings.Join(eventIDs(b.String()), ","), "resume after line %s", ids[cut-1])
	}
	// after= (what app.js sends when it reopens a stream) does the same.
	_, rest := c.get("/runs/" + v.Run.ID + "/log/stream?after=" + ids[1])
	require.Equal(t, strings.Join(ids[2:], ","), strings.Join(eventIDs(rest), ","))
}

func eventIDs(stream string) []string {
	var out []string
	for _, line := range strings.Split(stream, "\n") {
		if id, ok := strings.CutPrefix(line, "id: "); ok {
			out = append(out, id)
		}
	}
	return out
}

// A principal of another tenant cannot open, follow, poll or act on a run.
func TestOtherTenantCannotOpenRun(t *testing.T) {
	t.Parallel()
	eachStore(t, testOtherTenantCannotOpenRun)
}

func testOtherTenantCannotOpenRun(t *testing.T, e *env) {
	ctx := context.Background()
	v, _, err := e.svc.RequestRun(ctx, e.actor("alice"), &protocol.RunRequest{Job: "deploy", Channel: "prod"})
	require.NoError(t, err)
	id := v.Run.ID
	eve := e.client()
	csrf := eve.signIn(e.otherTenantUser("eve"))
	for _, p := range []string{"/runs/" + id, "/runs/" + id + "/live", "/runs/" + id + "/log/stream"} {
		resp, body := eve.get(p)
		require.Equal(t, http.StatusNotFound, resp.StatusCode, p)
		require.NotContains(t, body, "deploy", p)
	}
	for _, p := range []string{"/runs/" + id + "/cancel", "/runs/" + id + "/approve"} {
		resp, _ := eve.post(p, withCSRF(nil, csrf))
		require.Equal(t, http.StatusNotFound, resp.StatusCode, p)
	}
	_, body := eve.get("/runs")
	require.NotContains(t, body, id)
	_, body = eve.get("/approvals")
	require.NotContains(t, body, id)
	r, err := e.st.RunGetByID(ctx, id, false)
	require.NoError(t, err)
	require.Equal(t, store.RunPendingApproval, r.State)

	// And a non-admin of the same tenant sees no runners or audit pages.
	alice := e.client()
	alice.signIn(e.tokens["alice"])
	for _, p := range []string{"/runners", "/audit"} {
		resp, _ := alice.get(p)
		require.Equal(t, http.StatusForbidden, resp.StatusCode, p)
	}
}

// The server answers API paths with the API and everything else with the UI.
func TestMountSplitsAPIAndUI(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := e.client()
	for path, want := range map[string]struct {
		status int
		ctype  string
	}{
		"/healthz":               {http.StatusOK, "application/json"},
		"/.well-known/jwks.json": {http.StatusOK, "application/jwk-set+json"},
		"/v1/nope":               {http.StatusNotFound, "application/problem+json"},
		"/v1/runs":               {http.StatusUnauthorized, "application/problem+json"},
		"/":                      {http.StatusSeeOther, ""},
		"/runs":                  {http.StatusSeeOther, ""},
		"/signin":                {http.StatusOK, "text/html; charset=utf-8"},
		"/static/htmx.min.js":    {http.StatusOK, "text/javascript; charset=utf-8"},
		"/no/such/page":          {http.StatusNotFound, "text/html; charset=utf-8"},
	} {
		resp, _ := c.get(path)
		require.Equal(t, want.status, resp.StatusCode, path)
		if want.ctype != "" {
			require.Equal(t, want.ctype, resp.Header.Get("Content-Type"), path)
		}
	}
}

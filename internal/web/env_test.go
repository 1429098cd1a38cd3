package web_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/authn"
	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/config"
	"github.com/jobplane/jobplane/internal/control"
	"github.com/jobplane/jobplane/internal/gitsync"
	"github.com/jobplane/jobplane/internal/id"
	"github.com/jobplane/jobplane/internal/principal"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/server"
	"github.com/jobplane/jobplane/internal/store"
	"github.com/jobplane/jobplane/internal/store/testdb"
	"github.com/jobplane/jobplane/internal/worker"
)

const adminToken = "jpt_web-test-admin-token-0123456789"

// definitions of the test repository. Jobs that wait do so on a gate file
// the test creates, so that "still running" is a state the test controls
// rather than a sleep.
func definitions(gates string) map[string]string {
	return map[string]string{
		"jobs/greet.yaml": `name: greet
description: Says hello, then waits for its gate
owners: [ops]
runbook: runbooks/greet.md
params:
  type: object
  additionalProperties: false
  required: [who]
  properties:
    who: {type: string, pattern: "^[a-z]+$", description: "Lower-case name"}
    times: {type: integer, default: 1, minimum: 1, maximum: 5}
    tone: {type: string, enum: [calm, loud], default: calm}
run:
  command: [sh, -c, 'echo "hello $JOBPLANE_PARAM_WHO"; echo "<script>document.title=\"pwned\"</script><img src=x onerror=alert(1)>"; echo "to stderr" >&2; while [ ! -f "$GATE" ]; do sleep 0.05; done; echo "finished $JOBPLANE_PARAM_WHO"; printf "report for %s\n" "$JOBPLANE_PARAM_WHO" > "$JOBPLANE_ARTIFACTS_DIR/report.txt"; printf "<script>alert(1)</script>" > "$JOBPLANE_ARTIFACTS_DIR/page.html"']
  env: {GATE: ` + filepath.Join(gates, "greet") + `}
  timeout: 5m
  lease_ttl: 10s
artifacts:
  - {name: report.txt, role: report}
  - {name: page.html, role: preview}
`,
		"jobs/deploy.yaml": `name: deploy
description: Needs a lead's approval
params:
  type: object
  properties:
    version: {type: string, default: "1.0"}
run:
  command: [sh, -c, 'echo deploying']
  timeout: 5m
`,
		"jobs/migrate.yaml": `name: migrate
description: Holds the database lease until its gate opens
leases:
  - key: "db:{channel}"
    on_conflict: queue
run:
  command: [sh, -c, 'echo migrating; while [ ! -f "$GATE" ]; do sleep 0.05; done']
  env: {GATE: ` + filepath.Join(gates, "migrate") + `}
  timeout: 5m
  lease_ttl: 10s
`,
		"jobs/rotate.yaml": `name: rotate
description: Rotates a key; one of ops approves another's rotation
run:
  command: [sh, -c, 'echo rotating; exit 3']
  timeout: 5m
`,
		"runbooks/greet.md": "# Greeting\n\nRun it **gently**. <script>document.title='pwned'</script>\n\n" +
			"[safe](https://example.com/docs) [evil](javascript:alert(1)) [evil2](JaVaScRiPt:alert(2)) <javascript:alert(3)>\n",
		"groups.yaml": `groups:
  ops: {members: [admin, alice]}
  leads: {members: [bob]}
  contractors: {members: [mallory]}
`,
		"policies/main.yaml": `rules:
  - id: anyone-greets
    jobs: [greet]
    users: ["*"]
  - id: ops-migrate
    jobs: [migrate]
    groups: [ops]
  - id: no-greetings-from-contractors
    effect: deny
    jobs: [greet]
    groups: [contractors]
  - id: ops-rotate-with-ops-approval
    jobs: [rotate]
    groups: [ops]
    approval: {count: 1, groups: [ops]}
  - id: deploy-needs-a-lead
    jobs: [deploy]
    groups: [ops]
    approval: {count: 1, groups: [leads]}
`,
	}
}

type env struct {
	t      *testing.T
	srv    *server.Server
	url    string
	svc    *control.Service
	st     store.Store
	gates  string
	repo   string
	dsn    string
	admin  principal.Actor
	tokens map[string]string // principal name → API token
}

func newEnv(t *testing.T) *env { return newEnvDB(t, "") }

// eachStore runs a test against a server on SQLite and one on PostgreSQL.
func eachStore(t *testing.T, fn func(t *testing.T, e *env)) {
	t.Run("sqlite", func(t *testing.T) { t.Parallel(); fn(t, newEnv(t)) })
	t.Run("postgres", func(t *testing.T) { t.Parallel(); fn(t, newEnvDB(t, testdb.PostgresDSN(t))) })
}

// newEnvDB starts a server on dsn ("" for SQLite in the temp dir).
func newEnvDB(t *testing.T, dsn string) *env {
	t.Helper()
	dir := t.TempDir()
	if dsn == "" {
		dsn = "sqlite:" + filepath.Join(dir, "db.sqlite")
	}
	gates := filepath.Join(dir, "gates")
	require.NoError(t, os.MkdirAll(gates, 0o700))
	repo := filepath.Join(dir, "defs")
	_, err := gitsync.InitRepo(repo, "main", definitions(gates), "init")
	require.NoError(t, err)
	ctx := context.Background()
	// A port chosen up front, so that the public URL (upload links, run
	// token issuer) names it.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	srv, err := server.Start(ctx, config.Server{
		Listen: addr, PublicURL: "http://" + addr, DB: dsn, Definitions: repo,
		Channels: map[string]string{"prod": "main"}, DataDir: filepath.Join(dir, "data"), AdminToken: adminToken,
	}, server.Options{Logger: slog.New(slog.DiscardHandler), ReapInterval: 200 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Stop(sctx)
	})
	e := &env{t: t, srv: srv, url: srv.URL(), svc: srv.Control(), st: srv.Store(), gates: gates, repo: repo, dsn: dsn, tokens: map[string]string{"admin": adminToken}}
	p, err := (&authn.Authenticator{Store: e.st, Clock: clock.Real{}}).Principal(ctx, bearer(adminToken))
	require.NoError(t, err)
	e.admin = principal.Actor{TenantID: p.Tenant, Name: p.Name, Kind: p.Kind, Admin: p.Admin}
	for _, name := range []string{"alice", "bob", "mallory"} {
		_, err := e.srv.Admin().CreatePrincipal(ctx, e.admin, &protocol.PrincipalRequest{Name: name, Kind: "user"})
		require.NoError(t, err)
		tok, err := e.srv.Admin().CreateToken(ctx, e.admin, name, 3600)
		require.NoError(t, err)
		e.tokens[name] = tok.Token
	}
	return e
}

func bearer(tok string) *http.Request {
	return &http.Request{Header: http.Header{"Authorization": {"Bearer " + tok}}}
}

func (e *env) actor(name string) principal.Actor {
	e.t.Helper()
	p, err := (&authn.Authenticator{Store: e.st, Clock: clock.Real{}}).Principal(context.Background(), bearer(e.tokens[name]))
	require.NoError(e.t, err)
	return principal.Actor{TenantID: p.Tenant, Name: p.Name, Kind: p.Kind, Admin: p.Admin}
}

// otherTenantUser makes a principal of another tenant and returns its token.
func (e *env) otherTenantUser(name string) string {
	e.t.Helper()
	ctx := context.Background()
	secret := "jpt_" + id.Secret(24)
	now := clock.Real{}.Now()
	require.NoError(e.t, e.st.InTx(ctx, func(tx store.Tx) error {
		tn, err := tx.TenantEnsure(ctx, "other", nil)
		if err != nil {
			return err
		}
		p := &store.Principal{ID: id.New(id.Principal, now), Tenant: tn.ID, Kind: "user", Name: name}
		if err := tx.PrincipalCreate(ctx, p); err != nil {
			return err
		}
		return tx.APITokenCreate(ctx, &store.APIToken{ID: id.New(id.Token, now), PrincipalID: p.ID, Digest: authn.Digest(secret)})
	}))
	e.tokens[name] = secret
	return secret
}

// startWorker runs a real worker in this process against the server until
// the test ends.
func (e *env) startWorker() {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	tok, err := e.srv.Admin().CreateRegistrationToken(ctx, e.admin, &protocol.RegistrationTokenRequest{Pool: "default"})
	require.NoError(e.t, err)
	w, err := worker.New(worker.Config{Server: e.url, RegistrationToken: tok.Token, Pool: "default", StateDir: e.t.TempDir(),
		Concurrency: 2, Name: "web-test-worker", Version: "test", WaitSeconds: 1})
	require.NoError(e.t, err)
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	e.t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			e.t.Error("worker did not stop")
		}
	})
}

func (e *env) open(gate string) {
	e.t.Helper()
	require.NoError(e.t, os.WriteFile(filepath.Join(e.gates, gate), nil, 0o600))
}

// client is a browser-like HTTP client with a cookie jar that does not
// follow redirects (tests look at them).
type client struct {
	t    *testing.T
	base string
	hc   *http.Client
}

func (e *env) client() *client {
	jar, err := cookiejar.New(nil)
	require.NoError(e.t, err)
	return &client{t: e.t, base: e.url, hc: &http.Client{Jar: jar, Timeout: 10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

var (
	csrfRE = regexp.MustCompile(`name="csrf" value="([^"]+)"`)
	keyRE  = regexp.MustCompile(`name="key" value="([^"]+)"`)
)

func (c *client) get(path string) (*http.Response, string) {
	c.t.Helper()
	resp, err := c.hc.Get(c.base + path)
	require.NoError(c.t, err)
	defer resp.Body.Close()
	b := new(strings.Builder)
	_, _ = ioCopy(b, resp)
	return resp, b.String()
}

func (c *client) post(path string, form url.Values, hdr ...string) (*http.Response, string) {
	c.t.Helper()
	req, err := http.NewRequest(http.MethodPost, c.base+path, strings.NewReader(form.Encode()))
	require.NoError(c.t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.hc.Do(req)
	require.NoError(c.t, err)
	defer resp.Body.Close()
	b := new(strings.Builder)
	_, _ = ioCopy(b, resp)
	return resp, b.String()
}

// signIn signs in through the form and returns the session's CSRF token.
func (c *client) signIn(token string) string {
	c.t.Helper()
	_, body := c.get("/signin")
	m := csrfRE.FindStringSubmatch(body)
	require.NotNil(c.t, m, "sign-in form has a CSRF field")
	resp, _ := c.post("/signin", url.Values{"csrf": {m[1]}, "token": {token}, "next": {"/runs"}})
	require.Equal(c.t, http.StatusSeeOther, resp.StatusCode)
	_, body = c.get("/runs")
	m = csrfRE.FindStringSubmatch(body)
	require.NotNil(c.t, m, "signed-in pages carry the session's CSRF token")
	return m[1]
}

func ioCopy(w io.Writer, resp *http.Response) (int64, error) { return io.Copy(w, resp.Body) }

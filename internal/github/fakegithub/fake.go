package fakegithub

import (
	"crypto/rand"
	"crypto/rsa"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/github"
)

// tokenLifetime is GitHub's installation token lifetime.
const tokenLifetime = time.Hour

// maxJWTLifetime is how far in the future GitHub accepts an App JWT's exp.
const maxJWTLifetime = 10 * time.Minute

// Options configure a Fake.
type Options struct {
	// AppID is the App's ID (the JWT issuer the fake requires).
	AppID int64
	// PublicKey verifies App JWTs.
	PublicKey *rsa.PublicKey
	// Clock times JWT checks, token expiry and Check Run timestamps
	// (default: the wall clock).
	Clock clock.Clock
}

// Request is one recorded API request.
type Request struct {
	Method string
	Path   string
	// Auth is "app" (an App JWT), "installation" (an installation token),
	// "none" or "invalid".
	Auth string
	// Installation is the installation of the token used (0 for none).
	Installation int64
	Status       int
	// TokenRepositories and TokenPermissions are what a token request
	// asked for (empty when it asked for everything).
	TokenRepositories []string
	TokenPermissions  github.Permissions
}

// Installation is an installation of the App.
type Installation struct {
	ID          int64
	Account     string
	AccountType string
	Permissions github.Permissions
	Suspended   bool
}

// Repo is a repository backed by a local git repository.
type Repo struct {
	ID           int64
	FullName     string
	Private      bool
	Installation int64
	// OwnerID is the owning account's ID (repository_owner_id).
	OwnerID int64
	GitDir  string
}

type token struct {
	installation int64
	repos        map[string]bool // full names
	perms        github.Permissions
	expiresAt    time.Time
}

type checkRun struct {
	repo string
	run  github.CheckRun
	// history records every status the run has had, in order.
	history []string
}

// Fake is a fake GitHub API server.
type Fake struct {
	URL string

	appID int64
	pub   *rsa.PublicKey
	clock clock.Clock
	srv   *httptest.Server

	mu            sync.Mutex
	installations map[int64]*Installation
	repos         map[string]*Repo // by lower-case full name
	tokens        map[string]*token
	checkRuns     map[int64]*checkRun
	nextID        int64
	requests      []Request
	down          bool
	swap          map[string]string // repo@sha -> sha served instead
	actions       actionsState
}

// New starts a fake; it stops when the test ends.
func New(t testing.TB, opt Options) *Fake {
	t.Helper()
	if opt.Clock == nil {
		opt.Clock = clock.Real{}
	}
	f := &Fake{appID: opt.AppID, pub: opt.PublicKey, clock: opt.Clock,
		installations: map[int64]*Installation{}, repos: map[string]*Repo{}, tokens: map[string]*token{},
		checkRuns: map[int64]*checkRun{}, nextID: 1000, swap: map[string]string{}}
	f.actions.init(t)
	f.srv = httptest.NewServer(f.handler())
	f.URL = f.srv.URL
	t.Cleanup(f.srv.Close)
	return f
}

// AddInstallation adds an installation of the App to an account with the
// permissions the account granted.
func (f *Fake) AddInstallation(id int64, account string, perms github.Permissions) *Installation {
	f.mu.Lock()
	defer f.mu.Unlock()
	in := &Installation{ID: id, Account: account, AccountType: "Organization", Permissions: perms}
	f.installations[id] = in
	return in
}

// AddRepo adds a repository owned by the installation's account, backed by
// the git repository in gitDir.
func (f *Fake) AddRepo(installation int64, name, gitDir string) *Repo {
	f.mu.Lock()
	defer f.mu.Unlock()
	in := f.installations[installation]
	if in == nil {
		panic(fmt.Sprintf("fakegithub: no installation %d", installation))
	}
	f.nextID++
	r := &Repo{ID: f.nextID, FullName: in.Account + "/" + name, Private: true, Installation: installation,
		OwnerID: accountID(installation), GitDir: gitDir}
	f.repos[strings.ToLower(r.FullName)] = r
	return r
}

// RemoveRepo takes a repository away from its installation, as when the
// account narrows the App's repository selection: its tokens can no longer
// name it. (Tokens issued before keep working until they expire, as on
// GitHub.)
func (f *Fake) RemoveRepo(installation int64, name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	in := f.installations[installation]
	if rp := f.repos[strings.ToLower(in.Account+"/"+name)]; rp != nil && rp.Installation == installation {
		rp.Installation = 0
	}
}

// SetSuspended suspends or unsuspends an installation.
func (f *Fake) SetSuspended(installation int64, suspended bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.installations[installation].Suspended = suspended
}

// SetDown starts or ends an outage: while down, every request is answered
// 503 (and still recorded).
func (f *Fake) SetDown(down bool) {
	f.mu.Lock()
	f.down = down
	f.mu.Unlock()
}

// ServeWrongCommit makes the tarball of repo@asked contain served instead,
// as a compromised or confused upstream would.
func (f *Fake) ServeWrongCommit(repo, asked, served string) {
	f.mu.Lock()
	f.swap[strings.ToLower(repo)+"@"+asked] = served
	f.mu.Unlock()
}

// Requests returns the requests recorded so far.
func (f *Fake) Requests() []Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Request(nil), f.requests...)
}

// CheckRuns returns a repository's Check Runs, oldest first.
func (f *Fake) CheckRuns(repo string) []github.CheckRun {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []github.CheckRun
	for _, cr := range f.checkRuns {
		if strings.EqualFold(cr.repo, repo) {
			out = append(out, cr.run)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// CheckRunHistory returns the statuses a Check Run went through.
func (f *Fake) CheckRunHistory(id int64) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if cr := f.checkRuns[id]; cr != nil {
		return append([]string(nil), cr.history...)
	}
	return nil
}

func (f *Fake) handler() http.Handler {
	m := http.NewServeMux()
	m.HandleFunc("GET /app", f.appOnly(f.getApp))
	m.HandleFunc("POST /app/installations/{id}/access_tokens", f.appOnly(f.createToken))
	m.HandleFunc("POST /repos/{owner}/{repo}/check-runs", f.repoScoped("checks", "write", f.createCheckRun))
	m.HandleFunc("PATCH /repos/{owner}/{repo}/check-runs/{id}", f.repoScoped("checks", "write", f.updateCheckRun))
	m.HandleFunc("GET /repos/{owner}/{repo}/check-runs/{id}", f.repoScoped("checks", "read", f.getCheckRun))
	m.HandleFunc("GET /repos/{owner}/{repo}/commits/{ref}/check-runs", f.repoScoped("checks", "read", f.listCheckRuns))
	m.HandleFunc("GET /repos/{owner}/{repo}/tarball/{ref}", f.repoScoped("contents", "read", f.tarball))
	m.HandleFunc("GET /repos/{owner}/{repo}/commits/{ref...}", f.repoScoped("contents", "read", f.commit))
	m.HandleFunc("GET /repos/{owner}/{repo}", f.repoScoped("metadata", "read", f.repository))
	m.HandleFunc("POST /repos/{owner}/{repo}/actions/workflows/{workflow}/dispatches", f.repoScoped("actions", "write", f.dispatchWorkflow))
	m.HandleFunc("GET /oidc/.well-known/openid-configuration", f.oidcDiscovery)
	m.HandleFunc("GET /oidc/.well-known/jwks", f.oidcJWKS)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &recorder{ResponseWriter: w, status: http.StatusOK}
		f.mu.Lock()
		down := f.down
		f.mu.Unlock()
		entry := Request{Method: r.Method, Path: r.URL.Path, Auth: "none"}
		if down {
			ghError(rec, http.StatusServiceUnavailable, "Service unavailable (fake outage)")
		} else {
			m.ServeHTTP(rec, r.WithContext(withEntry(r.Context(), &entry)))
		}
		entry.Status = rec.status
		f.mu.Lock()
		f.requests = append(f.requests, entry)
		f.mu.Unlock()
	})
}

type recorder struct {
	http.ResponseWriter
	status int
}

func (r *recorder) WriteHeader(code int) {
	r.status = code
	r.ResponseWriter.WriteHeader(code)
}

func ghError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"message": msg, "documentation_url": "https://docs.github.com/rest"})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// ---- App JWT ----

func (f *Fake) appOnly(fn func(http.ResponseWriter, *http.Request)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		e := entryOf(r.Context())
		raw, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok {
			ghError(w, http.StatusUnauthorized, "A JSON web token could not be decoded")
			return
		}
		if msg := f.checkJWT(raw); msg != "" {
			e.Auth = "invalid"
			ghError(w, http.StatusUnauthorized, msg)
			return
		}
		e.Auth = "app"
		fn(w, r)
	}
}

// checkJWT verifies an App JWT as GitHub does and returns why it is refused
// ("" when it is accepted).
func (f *Fake) checkJWT(raw string) string {
	tok, err := jwt.ParseSigned(raw, []jose.SignatureAlgorithm{jose.RS256})
	if err != nil {
		return "A JSON web token could not be decoded"
	}
	var c jwt.Claims
	if err := tok.Claims(f.pub, &c); err != nil {
		return "'Issuer' claim ('iss') must be an Integer; or the signature is invalid"
	}
	if c.Issuer != strconv.FormatInt(f.appID, 10) {
		return "'Issuer' claim ('iss') must be this App's ID"
	}
	if c.IssuedAt == nil || c.Expiry == nil {
		return "'Issued at' and 'Expiration time' claims are required"
	}
	now := f.clock.Now()
	iat, exp := c.IssuedAt.Time(), c.Expiry.Time()
	switch {
	case iat.After(now):
		return "'Issued at' claim ('iat') must be an Integer representing a time in the past"
	case !exp.After(now):
		return "'Expiration time' claim ('exp') is too far in the past"
	case exp.After(now.Add(maxJWTLifetime)):
		return "'Expiration time' claim ('exp') is too far in the future"
	}
	return ""
}

func (f *Fake) getApp(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"id": f.appID, "slug": "jobplane-test"})
}

func (f *Fake) createToken(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil {
		ghError(w, http.StatusNotFound, "Not Found")
		return
	}
	var req struct {
		Repositories  []string           `json:"repositories"`
		RepositoryIDs []int64            `json:"repository_ids"`
		Permissions   github.Permissions `json:"permissions"`
	}
	if r.ContentLength != 0 {
		dec := json.NewDecoder(r.Body)
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			ghError(w, http.StatusBadRequest, "Problems parsing JSON")
			return
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	e := entryOf(r.Context())
	e.Installation, e.TokenRepositories, e.TokenPermissions = id, req.Repositories, req.Permissions
	in := f.installations[id]
	if in == nil {
		ghError(w, http.StatusNotFound, "Not Found")
		return
	}
	if in.Suspended {
		ghError(w, http.StatusForbidden, "This installation has been suspended")
		return
	}
	t := &token{installation: id, repos: map[string]bool{}, perms: github.Permissions{}, expiresAt: f.clock.Now().Add(tokenLifetime)}
	for _, name := range req.Repositories {
		rp := f.repos[strings.ToLower(in.Account+"/"+name)]
		if rp == nil || rp.Installation != id {
			ghError(w, http.StatusUnprocessableEntity, "There is at least one repository that does not exist or is not accessible to the parent installation.")
			return
		}
		t.repos[rp.FullName] = true
	}
	for _, rid := range req.RepositoryIDs {
		found := false
		for _, rp := range f.repos {
			if rp.ID == rid && rp.Installation == id {
				t.repos[rp.FullName], found = true, true
			}
		}
		if !found {
			ghError(w, http.StatusUnprocessableEntity, "There is at least one repository that does not exist or is not accessible to the parent installation.")
			return
		}
	}
	if len(req.Repositories) == 0 && len(req.RepositoryIDs) == 0 {
		for _, rp := range f.repos {
			if rp.Installation == id {
				t.repos[rp.FullName] = true
			}
		}
	}
	if len(req.Permissions) == 0 {
		for k, v := range in.Permissions {
			t.perms[k] = v
		}
	}
	for k, v := range req.Permissions {
		if level(v) == 0 || level(in.Permissions[k]) < level(v) {
			ghError(w, http.StatusUnprocessableEntity, "The permissions requested are not granted to this installation.")
			return
		}
		t.perms[k] = v
	}
	value := "ghs_" + randHex(18)
	f.tokens[value] = t
	var repos []map[string]any
	for name := range t.repos {
		rp := f.repos[strings.ToLower(name)]
		repos = append(repos, map[string]any{"id": rp.ID, "name": name[strings.IndexByte(name, '/')+1:], "full_name": name})
	}
	writeJSON(w, http.StatusCreated, map[string]any{
		"token": value, "expires_at": t.expiresAt.UTC().Format(time.RFC3339),
		"permissions": t.perms, "repository_selection": "selected", "repositories": repos,
	})
}

func level(l string) int {
	switch l {
	case "read":
		return 1
	case "write":
		return 2
	case "admin":
		return 3
	}
	return 0
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// ---- installation tokens on repositories ----

// repoScoped authenticates an installation token and checks that the
// repository is within it (404 otherwise, as GitHub hides what a token
// cannot see) and that it carries the permission at the level (403).
func (f *Fake) repoScoped(perm, lvl string, fn func(http.ResponseWriter, *http.Request, *Repo)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		e := entryOf(r.Context())
		auth := r.Header.Get("Authorization")
		raw, ok := strings.CutPrefix(auth, "token ")
		if !ok {
			raw, ok = strings.CutPrefix(auth, "Bearer ")
		}
		if !ok {
			// Unauthenticated: private repositories are invisible.
			ghError(w, http.StatusNotFound, "Not Found")
			return
		}
		f.mu.Lock()
		t := f.tokens[raw]
		var in *Installation
		if t != nil {
			in = f.installations[t.installation]
		}
		full := r.PathValue("owner") + "/" + r.PathValue("repo")
		rp := f.repos[strings.ToLower(full)]
		now := f.clock.Now()
		f.mu.Unlock()
		if t == nil || !now.Before(t.expiresAt) {
			e.Auth = "invalid"
			ghError(w, http.StatusUnauthorized, "Bad credentials")
			return
		}
		e.Auth, e.Installation = "installation", t.installation
		if in == nil || in.Suspended {
			ghError(w, http.StatusForbidden, "This installation has been suspended")
			return
		}
		if rp == nil || !t.repos[rp.FullName] {
			ghError(w, http.StatusNotFound, "Not Found")
			return
		}
		// Every installation token can read metadata, asked for or not.
		if level(t.perms[perm]) < level(lvl) && (perm != "metadata" || lvl != "read") {
			ghError(w, http.StatusForbidden, "Resource not accessible by integration")
			return
		}
		fn(w, r, rp)
	}
}

// IssuedTokens lists the value of every installation token issued, so that
// tests can look for them where they must never be (a runner's output or
// environment).
func (f *Fake) IssuedTokens() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]string, 0, len(f.tokens))
	for v := range f.tokens {
		out = append(out, v)
	}
	return out
}

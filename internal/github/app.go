package github

import (
	"bytes"
	"context"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/jobplane/jobplane/internal/clock"
)

// DefaultAPI is GitHub's REST API.
const DefaultAPI = "https://api.github.com"

// JWT timing. GitHub refuses an App JWT whose exp is more than 10 minutes
// ahead or whose iat is in the future; backdating iat by a minute absorbs
// clock drift between us and GitHub, and exp stays 9 minutes ahead so that
// a drift the other way cannot push it past the limit.
const (
	jwtBackdate = 60 * time.Second
	jwtLifetime = 9 * time.Minute
)

// tokenRefreshMargin is how long before GitHub's expiry a cached
// installation token is replaced. It covers a request that starts just
// before the expiry and a modest clock drift.
const tokenRefreshMargin = 5 * time.Minute

// maxErrorBody bounds how much of a refusal is read for its message.
const maxErrorBody = 64 << 10

// Permissions maps a GitHub App permission to a level ("read", "write"),
// for example {"contents": "read"}.
type Permissions map[string]string

// Permission sets the jobplane steps use.
var (
	// PermContentsRead fetches the source of a commit.
	PermContentsRead = Permissions{"contents": "read"}
	// PermChecksWrite creates and updates Check Runs.
	PermChecksWrite = Permissions{"checks": "write"}
)

func (p Permissions) key() string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(p)) {
		b.WriteString(k + "=" + p[k] + ";")
	}
	return b.String()
}

// Config configures an App.
type Config struct {
	// AppID is the App's numeric ID (the JWT issuer).
	AppID int64
	// PrivateKey signs the App JWT.
	PrivateKey *rsa.PrivateKey
	// BaseURL is the REST API root (default DefaultAPI).
	BaseURL string
	// HTTP is the client for API calls (default: one with a 30 s timeout).
	HTTP *http.Client
	// Clock times the JWT and the token cache.
	Clock clock.Clock
	// Logger receives debug lines; never a token.
	Logger *slog.Logger
}

// App is a GitHub App client. It is safe for concurrent use.
type App struct {
	id     int64
	key    *rsa.PrivateKey
	signer jose.Signer
	base   string
	http   *http.Client
	clock  clock.Clock
	log    *slog.Logger

	mu    sync.Mutex
	cache map[tokenKey]Token
}

type tokenKey struct {
	installation int64
	repo         string
	perms        string
}

// New returns an App.
func New(cfg Config) (*App, error) {
	if cfg.AppID <= 0 {
		return nil, errors.New("github: AppID must be a positive number")
	}
	if cfg.PrivateKey == nil {
		return nil, errors.New("github: PrivateKey is required")
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: cfg.PrivateKey},
		(&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		return nil, fmt.Errorf("github: make JWT signer: %w", err)
	}
	if cfg.BaseURL == "" {
		cfg.BaseURL = DefaultAPI
	}
	if cfg.HTTP == nil {
		cfg.HTTP = &http.Client{Timeout: 30 * time.Second}
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &App{id: cfg.AppID, key: cfg.PrivateKey, signer: signer, base: strings.TrimRight(cfg.BaseURL, "/"),
		http: cfg.HTTP, clock: cfg.Clock, log: cfg.Logger, cache: map[tokenKey]Token{}}, nil
}

// ID returns the App's ID.
func (a *App) ID() int64 { return a.id }

// ParsePrivateKey reads the PEM private key GitHub issues for an App
// (PKCS #1 "RSA PRIVATE KEY"; PKCS #8 is accepted too).
func ParsePrivateKey(pemBytes []byte) (*rsa.PrivateKey, error) {
	block, _ := pem.Decode(pemBytes)
	if block == nil {
		return nil, errors.New("github: private key: no PEM block found")
	}
	switch block.Type {
	case "RSA PRIVATE KEY":
		k, err := x509.ParsePKCS1PrivateKey(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("github: private key: %w", err)
		}
		return k, nil
	case "PRIVATE KEY":
		k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("github: private key: %w", err)
		}
		rk, ok := k.(*rsa.PrivateKey)
		if !ok {
			return nil, fmt.Errorf("github: private key: %T is not an RSA key", k)
		}
		return rk, nil
	}
	return nil, fmt.Errorf("github: private key: PEM block %q is not a private key", block.Type)
}

// JWT mints the App's JSON Web Token (RS256; iss = App ID; iat a minute in
// the past; exp nine minutes ahead).
func (a *App) JWT() (string, error) {
	now := a.clock.Now()
	claims := jwt.Claims{
		Issuer:   strconv.FormatInt(a.id, 10),
		IssuedAt: jwt.NewNumericDate(now.Add(-jwtBackdate)),
		Expiry:   jwt.NewNumericDate(now.Add(jwtLifetime)),
	}
	s, err := jwt.Signed(a.signer).Claims(claims).Serialize()
	if err != nil {
		return "", fmt.Errorf("github: sign App JWT: %w", err)
	}
	return s, nil
}

// InstallationToken returns a token of the installation narrowed to one
// repository ("owner/name") and the given permissions. Tokens are cached
// per (installation, repository, permissions) until tokenRefreshMargin
// before they expire.
func (a *App) InstallationToken(ctx context.Context, installation int64, repo string, perms Permissions) (Token, error) {
	owner, name, err := splitRepo(repo)
	if err != nil {
		return Token{}, err
	}
	if len(perms) == 0 {
		return Token{}, errors.New("github: an installation token needs at least one permission")
	}
	k := tokenKey{installation: installation, repo: owner + "/" + name, perms: perms.key()}
	now := a.clock.Now()
	a.mu.Lock()
	if t, ok := a.cache[k]; ok && now.Before(t.ExpiresAt.Add(-tokenRefreshMargin)) {
		a.mu.Unlock()
		return t, nil
	}
	a.mu.Unlock()

	jwtStr, err := a.JWT()
	if err != nil {
		return Token{}, err
	}
	body := map[string]any{"repositories": []string{name}, "permissions": perms}
	var out struct {
		Token     string    `json:"token"`
		ExpiresAt time.Time `json:"expires_at"`
	}
	path := fmt.Sprintf("/app/installations/%d/access_tokens", installation)
	if err := a.do(ctx, http.MethodPost, path, "Bearer "+jwtStr, body, &out); err != nil {
		return Token{}, err
	}
	if out.Token == "" || out.ExpiresAt.IsZero() {
		return Token{}, fmt.Errorf("github: POST %s: answer without token or expiry: %w", path, ErrUnavailable)
	}
	t := Token{value: out.Token, ExpiresAt: out.ExpiresAt}
	a.mu.Lock()
	// Tokens are per repository, so the cache grows with the repositories
	// served; each new token sweeps out the ones past their use.
	for old, ot := range a.cache {
		if !now.Before(ot.ExpiresAt.Add(-tokenRefreshMargin)) {
			delete(a.cache, old)
		}
	}
	a.cache[k] = t
	a.mu.Unlock()
	a.log.Debug("github: installation token issued", "installation", installation, "repo", k.repo,
		"permissions", k.perms, "expires_at", out.ExpiresAt)
	return t, nil
}

// Forget drops a cached token, for instance after GitHub refused it
// (revoked, or the installation was suspended).
func (a *App) Forget(installation int64, repo string, perms Permissions) {
	a.mu.Lock()
	delete(a.cache, tokenKey{installation: installation, repo: repo, perms: perms.key()})
	a.mu.Unlock()
}

// repoCall runs one API call on a repository with a narrowed token, and
// drops the token from the cache when GitHub no longer accepts it.
func (a *App) repoCall(ctx context.Context, installation int64, repo string, perms Permissions, method, path string, in, out any) error {
	tok, err := a.InstallationToken(ctx, installation, repo, perms)
	if err != nil {
		return err
	}
	err = a.do(ctx, method, path, "token "+tok.reveal(), in, out)
	if errors.Is(err, ErrUnauthorized) {
		a.Forget(installation, repo, perms)
	}
	return err
}

// do sends a JSON request and decodes a JSON answer.
func (a *App) do(ctx context.Context, method, path, auth string, in, out any) error {
	resp, err := a.send(ctx, method, path, auth, in)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBody))
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("github: %s %s: decode answer: %w", method, path, err)
	}
	return nil
}

// send returns a 2xx response (the caller closes its body) or an error.
func (a *App) send(ctx context.Context, method, path, auth string, in any) (*http.Response, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.base+path, body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/vnd.github+json")
	req.Header.Set("X-GitHub-Api-Version", "2022-11-28")
	req.Header.Set("User-Agent", "jobplane")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := a.http.Do(req)
	if err != nil {
		// The URL in a transport error carries no credential (tokens go in
		// headers only), so it may be wrapped as is.
		return nil, fmt.Errorf("github: %s %s: %w: %w", method, path, ErrUnavailable, err)
	}
	if resp.StatusCode/100 == 2 {
		return resp, nil
	}
	defer resp.Body.Close()
	var msg struct {
		Message string `json:"message"`
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	if json.Unmarshal(b, &msg) != nil || msg.Message == "" {
		msg.Message = http.StatusText(resp.StatusCode)
	}
	return nil, &APIError{Method: method, Path: path, Status: resp.StatusCode, Message: msg.Message}
}

// splitRepo checks an "owner/name" repository name.
func splitRepo(repo string) (owner, name string, err error) {
	owner, name, ok := strings.Cut(repo, "/")
	if !ok || !validRepoPart(owner) || !validRepoPart(name) {
		return "", "", fmt.Errorf("github: repository %q is not owner/name", repo)
	}
	return owner, name, nil
}

// validRepoPart accepts the characters GitHub allows in owner and
// repository names; anything else could smuggle a path into a URL.
func validRepoPart(s string) bool {
	if s == "" || len(s) > 100 || s == "." || s == ".." {
		return false
	}
	for _, c := range s {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_', c == '.':
		default:
			return false
		}
	}
	return true
}

// validSHA accepts a full 40-hex-digit commit ID: sources and checks are
// pinned to exact commits, never to a branch name that could move.
func validSHA(s string) bool {
	if len(s) != 40 {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

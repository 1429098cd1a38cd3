package actionsoidc

import (
	"bytes"
	"context"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/go-jose/go-jose/v4"

	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/protocol"
)

// Defaults of a Verifier's configuration.
const (
	// DefaultIssuer is GitHub's Actions OIDC issuer.
	DefaultIssuer = "https://token.actions.githubusercontent.com"
	// DefaultAudience is the audience a workflow requests its token for
	// (core.getIDToken("jobplane"), or &audience=jobplane on the request
	// URL). It is fixed so that a token minted for another relying party,
	// whose default audience is the repository owner's URL, is refused.
	DefaultAudience = "jobplane"
	// Leeway is the clock difference tolerated on exp, nbf and iat.
	Leeway = 30 * time.Second
	// MaxTokenSize bounds the token before it is parsed. GitHub's tokens
	// are about 1.5 KiB.
	MaxTokenSize = 16 << 10
	// refetchInterval is how often an unknown kid may make the verifier
	// fetch the key set again: a stream of forged kids costs GitHub at most
	// one request a minute.
	refetchInterval = time.Minute
	maxDocumentSize = 1 << 20
)

// Config configures a Verifier.
type Config struct {
	// Issuer is the expected iss and the base of the discovery document.
	Issuer string
	// Audience is the expected aud.
	Audience string
	// HTTP fetches the discovery document and the key set; nil is a client
	// with a 10 s timeout.
	HTTP *http.Client
	// Clock decides expiry; nil is the wall clock.
	Clock clock.Clock
}

// Claims are the claims of a verified token that jobplane uses.
type Claims struct {
	Issuer            string
	Subject           string
	Audience          string
	JTI               string
	IssuedAt          time.Time
	NotBefore         time.Time
	Expiry            time.Time
	Repository        string // owner/name
	RepositoryID      int64
	RepositoryOwner   string
	RepositoryOwnerID int64
	EventName         string
	Ref               string // refs/heads/main
	SHA               string
	WorkflowRef       string // owner/name/.github/workflows/file.yml@refs/heads/main
	RunID             int64
	RunAttempt        int64
	Actor             string
}

// Error is a refusal of a token: Err is the protocol refusal (its code is
// the problem's) and Reason says what was wrong, for the audit log and the
// problem's detail.
type Error struct {
	Err    *protocol.Error
	Reason string
}

func (e *Error) Error() string { return e.Reason + ": " + e.Err.Code }

// Unwrap makes errors.Is match the protocol sentinel.
func (e *Error) Unwrap() error { return e.Err }

func refuse(err *protocol.Error, format string, args ...any) error {
	return &Error{Err: err, Reason: fmt.Sprintf(format, args...)}
}

// Verifier verifies Actions OIDC tokens. It is safe for concurrent use.
type Verifier struct {
	cfg Config

	// fetching is the one slot for a key-set fetch. A verification that
	// needs the keys fetched waits for the slot, or for its context, rather
	// than holding mu through the issuer's answer: a token whose kid is
	// known never waits for another's fetch.
	fetching chan struct{}

	mu        sync.Mutex
	keys      map[string]*rsa.PublicKey
	fetchedAt time.Time
	fetched   bool
}

// New returns a Verifier; the key set is fetched on first use.
func New(cfg Config) (*Verifier, error) {
	if cfg.Issuer == "" {
		cfg.Issuer = DefaultIssuer
	}
	if cfg.Audience == "" {
		cfg.Audience = DefaultAudience
	}
	u, err := url.Parse(cfg.Issuer)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("github oidc issuer %q: must be an http(s) URL without query or fragment", cfg.Issuer)
	}
	if cfg.HTTP == nil {
		cfg.HTTP = &http.Client{Timeout: 10 * time.Second}
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	return &Verifier{cfg: cfg, fetching: make(chan struct{}, 1)}, nil
}

// Issuer is the issuer the verifier accepts.
func (v *Verifier) Issuer() string { return v.cfg.Issuer }

// Audience is the audience the verifier accepts.
func (v *Verifier) Audience() string { return v.cfg.Audience }

var allowedHeaders = map[string]bool{"alg": true, "kid": true, "typ": true, "x5t": true}

// Verify checks token and returns its claims. A refusal is an *Error; any
// other error is a failure to reach the issuer's keys (the caller answers
// 503, the token may be fine).
func (v *Verifier) Verify(ctx context.Context, token string) (*Claims, error) {
	if len(token) > MaxTokenSize {
		return nil, refuse(protocol.ErrOIDCTokenInvalid, "token larger than %d bytes", MaxTokenSize)
	}
	parts := strings.Split(token, ".")
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" {
		return nil, refuse(protocol.ErrOIDCTokenInvalid, "not a compact JWS")
	}
	headerJSON, err := base64.RawURLEncoding.Strict().DecodeString(parts[0])
	if err != nil {
		return nil, refuse(protocol.ErrOIDCTokenInvalid, "bad header encoding")
	}
	var header map[string]json.RawMessage
	if err := decodeStrict(headerJSON, &header); err != nil {
		return nil, refuse(protocol.ErrOIDCTokenInvalid, "bad header JSON")
	}
	for name := range header {
		if !allowedHeaders[name] {
			return nil, refuse(protocol.ErrOIDCTokenInvalid, "header parameter %q not allowed", name)
		}
	}
	var alg, kid string
	if json.Unmarshal(header["alg"], &alg) != nil || alg != string(jose.RS256) {
		return nil, refuse(protocol.ErrOIDCTokenInvalid, "alg must be RS256")
	}
	if json.Unmarshal(header["kid"], &kid) != nil || kid == "" {
		return nil, refuse(protocol.ErrOIDCTokenInvalid, "kid required")
	}
	// Parse with the algorithm pinned too, so that go-jose itself would
	// refuse anything else even if the check above were wrong.
	jws, err := jose.ParseSignedCompact(token, []jose.SignatureAlgorithm{jose.RS256})
	if err != nil {
		return nil, refuse(protocol.ErrOIDCTokenInvalid, "unparsable JWS")
	}
	key, err := v.key(ctx, kid)
	if err != nil {
		return nil, err
	}
	payload, err := jws.Verify(key)
	if err != nil {
		return nil, refuse(protocol.ErrOIDCTokenInvalid, "signature does not verify")
	}
	return v.checkClaims(payload)
}

type rawClaims struct {
	Iss               string          `json:"iss"`
	Sub               string          `json:"sub"`
	Aud               json.RawMessage `json:"aud"`
	JTI               string          `json:"jti"`
	Iat               *json.Number    `json:"iat"`
	Nbf               *json.Number    `json:"nbf"`
	Exp               *json.Number    `json:"exp"`
	Repository        string          `json:"repository"`
	RepositoryID      string          `json:"repository_id"`
	RepositoryOwner   string          `json:"repository_owner"`
	RepositoryOwnerID string          `json:"repository_owner_id"`
	EventName         string          `json:"event_name"`
	Ref               string          `json:"ref"`
	SHA               string          `json:"sha"`
	WorkflowRef       string          `json:"workflow_ref"`
	RunID             string          `json:"run_id"`
	RunAttempt        string          `json:"run_attempt"`
	Actor             string          `json:"actor"`
}

var (
	decimalRe = regexp.MustCompile(`^[1-9][0-9]{0,17}$`)
	shaRe     = regexp.MustCompile(`^[0-9a-f]{40}$`)
	repoRe    = regexp.MustCompile(`^[A-Za-z0-9-]{1,100}/[A-Za-z0-9._-]{1,100}$`)
)

func (v *Verifier) checkClaims(payload []byte) (*Claims, error) {
	var rc rawClaims
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.UseNumber()
	// Unknown claims are allowed (GitHub adds claims over time); duplicate
	// keys are not, so a claim cannot be read one way here and another way
	// by a different parser.
	if err := dec.Decode(&rc); err != nil || dec.More() || hasDuplicateKeys(payload) {
		return nil, refuse(protocol.ErrOIDCTokenInvalid, "bad claims JSON")
	}
	if rc.Iss != v.cfg.Issuer {
		return nil, refuse(protocol.ErrOIDCIssuerInvalid, "iss %q is not %q", clip(rc.Iss), v.cfg.Issuer)
	}
	var aud string
	if json.Unmarshal(rc.Aud, &aud) != nil {
		// A list is allowed only when it is exactly the audience: a token
		// for several relying parties is not one for jobplane alone.
		var auds []string
		if json.Unmarshal(rc.Aud, &auds) != nil || len(auds) != 1 {
			return nil, refuse(protocol.ErrOIDCAudienceInvalid, "aud must be %q", v.cfg.Audience)
		}
		aud = auds[0]
	}
	if aud != v.cfg.Audience {
		return nil, refuse(protocol.ErrOIDCAudienceInvalid, "aud %q is not %q", clip(aud), v.cfg.Audience)
	}
	now := v.cfg.Clock.Now()
	exp, err := numericDate("exp", rc.Exp, true)
	if err != nil {
		return nil, err
	}
	iat, err := numericDate("iat", rc.Iat, true)
	if err != nil {
		return nil, err
	}
	nbf, err := numericDate("nbf", rc.Nbf, false)
	if err != nil {
		return nil, err
	}
	if !now.Before(exp.Add(Leeway)) {
		return nil, refuse(protocol.ErrOIDCTokenExpired, "expired at %s", exp.UTC().Format(time.RFC3339))
	}
	if iat.After(now.Add(Leeway)) {
		return nil, refuse(protocol.ErrOIDCTokenExpired, "issued in the future (%s)", iat.UTC().Format(time.RFC3339))
	}
	if !nbf.IsZero() && nbf.After(now.Add(Leeway)) {
		return nil, refuse(protocol.ErrOIDCTokenExpired, "not valid before %s", nbf.UTC().Format(time.RFC3339))
	}
	if !exp.After(iat) {
		return nil, refuse(protocol.ErrOIDCClaimsInvalid, "exp not after iat")
	}
	c := &Claims{
		Issuer: rc.Iss, Subject: rc.Sub, Audience: aud, JTI: rc.JTI,
		IssuedAt: iat, NotBefore: nbf, Expiry: exp,
		Repository: rc.Repository, RepositoryOwner: rc.RepositoryOwner,
		EventName: rc.EventName, Ref: rc.Ref, SHA: rc.SHA, WorkflowRef: rc.WorkflowRef,
		Actor: rc.Actor,
	}
	ids := []struct {
		name string
		raw  string
		dst  *int64
	}{
		{"repository_id", rc.RepositoryID, &c.RepositoryID},
		{"repository_owner_id", rc.RepositoryOwnerID, &c.RepositoryOwnerID},
		{"run_id", rc.RunID, &c.RunID},
		{"run_attempt", rc.RunAttempt, &c.RunAttempt},
	}
	for _, id := range ids {
		if !decimalRe.MatchString(id.raw) {
			return nil, refuse(protocol.ErrOIDCClaimsInvalid, "%s must be a positive decimal string", id.name)
		}
		fmt.Sscan(id.raw, id.dst) //nolint:errcheck // the pattern guarantees it parses
	}
	switch {
	case c.JTI == "" || len(c.JTI) > 200:
		return nil, refuse(protocol.ErrOIDCClaimsInvalid, "jti missing")
	case c.Subject == "":
		return nil, refuse(protocol.ErrOIDCClaimsInvalid, "sub missing")
	case !repoRe.MatchString(c.Repository):
		return nil, refuse(protocol.ErrOIDCClaimsInvalid, "repository malformed")
	case c.EventName == "":
		return nil, refuse(protocol.ErrOIDCClaimsInvalid, "event_name missing")
	case !strings.HasPrefix(c.Ref, "refs/"):
		return nil, refuse(protocol.ErrOIDCClaimsInvalid, "ref malformed")
	case !shaRe.MatchString(c.SHA):
		return nil, refuse(protocol.ErrOIDCClaimsInvalid, "sha malformed")
	case !strings.Contains(c.WorkflowRef, "@"):
		return nil, refuse(protocol.ErrOIDCClaimsInvalid, "workflow_ref malformed")
	}
	return c, nil
}

func numericDate(name string, n *json.Number, required bool) (time.Time, error) {
	if n == nil {
		if required {
			return time.Time{}, refuse(protocol.ErrOIDCClaimsInvalid, "%s missing", name)
		}
		return time.Time{}, nil
	}
	f, err := n.Float64()
	if err != nil || f < 0 || f > 1e11 {
		return time.Time{}, refuse(protocol.ErrOIDCClaimsInvalid, "%s is not a NumericDate", name)
	}
	return time.Unix(int64(f), 0), nil
}

// WorkflowFile splits workflow_ref ("owner/name/.github/workflows/f.yml@ref")
// into the repository, the workflow file's path and the ref.
func (c *Claims) WorkflowFile() (repo, path, ref string, ok bool) {
	at := strings.LastIndex(c.WorkflowRef, "@")
	if at < 0 {
		return "", "", "", false
	}
	full, ref := c.WorkflowRef[:at], c.WorkflowRef[at+1:]
	segs := strings.SplitN(full, "/", 3)
	if len(segs) != 3 {
		return "", "", "", false
	}
	return segs[0] + "/" + segs[1], segs[2], ref, true
}

func clip(s string) string {
	if len(s) > 100 {
		return s[:100] + "…"
	}
	return s
}

// key returns the published key kid names, fetching the key set when it
// has not been fetched or (at most once a refetchInterval) does not hold kid.
func (v *Verifier) key(ctx context.Context, kid string) (*rsa.PublicKey, error) {
	if k, done, err := v.cached(kid); done {
		return k, err
	}
	select {
	case v.fetching <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: waiting for a fetch of the key set: %v", ErrKeysUnavailable, ctx.Err())
	}
	defer func() { <-v.fetching }()
	// The fetch this one waited for may have brought kid, or be too recent
	// to repeat.
	if k, done, err := v.cached(kid); done {
		return k, err
	}
	keys, err := v.fetch(ctx)
	if err != nil {
		return nil, err
	}
	v.mu.Lock()
	v.keys, v.fetched, v.fetchedAt = keys, true, v.cfg.Clock.Now()
	v.mu.Unlock()
	if k, ok := keys[kid]; ok {
		return k, nil
	}
	return nil, refuse(protocol.ErrOIDCTokenInvalid, "kid %q not among the issuer's keys", clip(kid))
}

// cached answers from the key set last fetched: done when it holds kid, or
// when it was fetched too recently to be fetched again for an unknown kid.
func (v *Verifier) cached(kid string) (k *rsa.PublicKey, done bool, err error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if k, ok := v.keys[kid]; ok {
		return k, true, nil
	}
	if v.fetched && v.cfg.Clock.Now().Sub(v.fetchedAt) < refetchInterval {
		return nil, true, refuse(protocol.ErrOIDCTokenInvalid, "kid %q not among the issuer's keys", clip(kid))
	}
	return nil, false, nil
}

// ErrKeysUnavailable wraps a failure to read the issuer's keys.
var ErrKeysUnavailable = errors.New("actions oidc: issuer keys unavailable")

func (v *Verifier) fetch(ctx context.Context) (map[string]*rsa.PublicKey, error) {
	var disc struct {
		Issuer  string `json:"issuer"`
		JWKSURI string `json:"jwks_uri"`
	}
	if err := v.getJSON(ctx, strings.TrimSuffix(v.cfg.Issuer, "/")+"/.well-known/openid-configuration", &disc); err != nil {
		return nil, err
	}
	if disc.Issuer != v.cfg.Issuer {
		return nil, fmt.Errorf("%w: discovery names issuer %q", ErrKeysUnavailable, clip(disc.Issuer))
	}
	iu, _ := url.Parse(v.cfg.Issuer)
	ju, err := url.Parse(disc.JWKSURI)
	if err != nil || ju.Scheme != iu.Scheme || ju.Host != iu.Host {
		return nil, fmt.Errorf("%w: jwks_uri %q is not on the issuer's origin", ErrKeysUnavailable, clip(disc.JWKSURI))
	}
	var set jose.JSONWebKeySet
	if err := v.getJSON(ctx, ju.String(), &set); err != nil {
		return nil, err
	}
	keys := map[string]*rsa.PublicKey{}
	for _, k := range set.Keys {
		pub, ok := k.Key.(*rsa.PublicKey)
		if !ok || k.KeyID == "" || (k.Use != "" && k.Use != "sig") ||
			(k.Algorithm != "" && k.Algorithm != string(jose.RS256)) || pub.N.BitLen() < 2048 {
			continue
		}
		keys[k.KeyID] = pub
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("%w: no usable RS256 key published", ErrKeysUnavailable)
	}
	return keys, nil
}

func (v *Verifier) getJSON(ctx context.Context, u string, dst any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrKeysUnavailable, err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := v.cfg.HTTP.Do(req)
	if err != nil {
		return fmt.Errorf("%w: GET %s: %v", ErrKeysUnavailable, u, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%w: GET %s: %s", ErrKeysUnavailable, u, resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxDocumentSize+1))
	if err != nil || len(body) > maxDocumentSize {
		return fmt.Errorf("%w: GET %s: unreadable or too large", ErrKeysUnavailable, u)
	}
	if err := json.Unmarshal(body, dst); err != nil {
		return fmt.Errorf("%w: GET %s: %v", ErrKeysUnavailable, u, err)
	}
	return nil
}

func decodeStrict(b []byte, dst any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(dst); err != nil {
		return err
	}
	if dec.More() || hasDuplicateKeys(b) {
		return errors.New("trailing data or duplicate keys")
	}
	return nil
}

// hasDuplicateKeys reports whether the top-level JSON object b repeats a key.
func hasDuplicateKeys(b []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(b))
	tok, err := dec.Token()
	if err != nil || tok != json.Delim('{') {
		return true
	}
	seen := map[string]bool{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return true
		}
		k, _ := t.(string)
		if seen[k] {
			return true
		}
		seen[k] = true
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return true
		}
	}
	return false
}

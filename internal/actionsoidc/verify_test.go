package actionsoidc_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/actionsoidc"
	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/github"
	"github.com/jobplane/jobplane/internal/github/fakegithub"
	"github.com/jobplane/jobplane/internal/protocol"
)

type env struct {
	fake  *fakegithub.Fake
	clk   *clock.Fake
	v     *actionsoidc.Verifier
	run   fakegithub.WorkflowRun
	fetch *int
}

func newEnv(t testing.TB) *env {
	t.Helper()
	clk := clock.NewFake(time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC))
	fake := fakegithub.New(t, fakegithub.Options{AppID: 1, PublicKey: &fakegithub.Key(t, 0).PublicKey, Clock: clk})
	fake.AddInstallation(42, "acme", github.Permissions{"actions": "write"})
	dir, sha := fakegithub.InitRepo(t, map[string]string{"README": "x"})
	rp := fake.AddRepo(42, "app", dir)
	n := 0
	counting := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		n++
		return http.DefaultTransport.RoundTrip(r)
	})}
	v, err := actionsoidc.New(actionsoidc.Config{Issuer: fake.OIDCIssuer(), HTTP: counting, Clock: clk})
	require.NoError(t, err)
	run := fake.StartWorkflowRun(fakegithub.Dispatch{Repo: rp.FullName, RepoID: rp.ID, OwnerID: rp.OwnerID,
		Workflow: "jobplane.yml", Ref: "main", FullRef: "refs/heads/main", SHA: sha})
	return &env{fake: fake, clk: clk, v: v, run: run, fetch: &n}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func refusal(t *testing.T, err error, want *protocol.Error, reason string) {
	t.Helper()
	require.Error(t, err)
	var oe *actionsoidc.Error
	require.ErrorAs(t, err, &oe, "a refusal, not a failure to reach the keys: %v", err)
	require.ErrorIs(t, err, want)
	require.Contains(t, oe.Reason, reason)
}

func TestVerifyAcceptsGitHubsToken(t *testing.T) {
	e := newEnv(t)
	c, err := e.v.Verify(context.Background(), e.fake.OIDCToken(e.run, actionsoidc.DefaultAudience))
	require.NoError(t, err)
	require.Equal(t, e.run.RepoID, c.RepositoryID)
	require.Equal(t, e.run.OwnerID, c.RepositoryOwnerID)
	require.Equal(t, e.run.RunID, c.RunID)
	require.Equal(t, int64(1), c.RunAttempt)
	require.Equal(t, "workflow_dispatch", c.EventName)
	require.Equal(t, "acme/app", c.Repository)
	require.Equal(t, e.run.SHA, c.SHA)
	repo, path, ref, ok := c.WorkflowFile()
	require.True(t, ok)
	require.Equal(t, "acme/app", repo)
	require.Equal(t, ".github/workflows/jobplane.yml", path)
	require.Equal(t, "refs/heads/main", ref)
	// The key set is fetched once (discovery + JWKS) and then reused.
	_, err = e.v.Verify(context.Background(), e.fake.OIDCToken(e.run, actionsoidc.DefaultAudience))
	require.NoError(t, err)
	require.Equal(t, 2, *e.fetch)
}

func TestVerifyRefusals(t *testing.T) {
	e := newEnv(t)
	other, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	base := func() map[string]any { return e.fake.OIDCClaims(e.run, actionsoidc.DefaultAudience) }
	with := func(k string, v any) string {
		c := base()
		if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
		return e.fake.SignOIDC(c)
	}
	now := e.clk.Now().Unix()
	pubDER, err := x509.MarshalPKIXPublicKey(&e.fake.OIDCKey().PublicKey)
	require.NoError(t, err)
	b64 := func(v any) string {
		b, _ := json.Marshal(v)
		return base64.RawURLEncoding.EncodeToString(b)
	}
	noneToken := b64(map[string]string{"alg": "none", "kid": e.fake.OIDCKeyID(), "typ": "JWT"}) + "." + b64(base()) + "."
	cases := []struct {
		name, token string
		want        *protocol.Error
		reason      string
	}{
		{"wrong audience", e.fake.OIDCToken(e.run, "https://github.com/acme"), protocol.ErrOIDCAudienceInvalid, "aud"},
		{"audience list", with("aud", []string{"jobplane", "other"}), protocol.ErrOIDCAudienceInvalid, "aud"},
		{"no audience", with("aud", nil), protocol.ErrOIDCAudienceInvalid, "aud"},
		{"wrong issuer", with("iss", "https://token.actions.githubusercontent.com"), protocol.ErrOIDCIssuerInvalid, "iss"},
		{"expired", with("exp", now-31), protocol.ErrOIDCTokenExpired, "expired"},
		{"not yet valid", with("nbf", now+120), protocol.ErrOIDCTokenExpired, "not valid before"},
		{"issued in the future", func() string { c := base(); c["iat"] = now + 120; c["exp"] = now + 600; return e.fake.SignOIDC(c) }(), protocol.ErrOIDCTokenExpired, "future"},
		{"no exp", with("exp", nil), protocol.ErrOIDCClaimsInvalid, "exp missing"},
		{"exp a string", with("exp", "soon"), protocol.ErrOIDCTokenInvalid, "claims JSON"},
		{"alg none", noneToken, protocol.ErrOIDCTokenInvalid, "compact"},
		{"alg none with a signature", noneToken + "c2ln", protocol.ErrOIDCTokenInvalid, "alg must be RS256"},
		{"HS256 keyed with the public key", fakegithub.SignJWT(pubDER, jose.HS256, e.fake.OIDCKeyID(), base()), protocol.ErrOIDCTokenInvalid, "alg must be RS256"},
		{"RS512", fakegithub.SignJWT(e.fake.OIDCKey(), jose.RS512, e.fake.OIDCKeyID(), base()), protocol.ErrOIDCTokenInvalid, "alg must be RS256"},
		{"PS256", fakegithub.SignJWT(e.fake.OIDCKey(), jose.PS256, e.fake.OIDCKeyID(), base()), protocol.ErrOIDCTokenInvalid, "alg must be RS256"},
		{"another key, issuer's kid", fakegithub.SignJWT(other, jose.RS256, e.fake.OIDCKeyID(), base()), protocol.ErrOIDCTokenInvalid, "signature"},
		{"unknown kid", fakegithub.SignJWT(other, jose.RS256, "mine", base()), protocol.ErrOIDCTokenInvalid, "kid"},
		{"no repository_id", with("repository_id", nil), protocol.ErrOIDCClaimsInvalid, "repository_id"},
		{"numeric repository_id", with("repository_id", 5), protocol.ErrOIDCTokenInvalid, "claims JSON"},
		{"repository_owner_id zero", with("repository_owner_id", "0"), protocol.ErrOIDCClaimsInvalid, "repository_owner_id"},
		{"no run_id", with("run_id", nil), protocol.ErrOIDCClaimsInvalid, "run_id"},
		{"no run_attempt", with("run_attempt", ""), protocol.ErrOIDCClaimsInvalid, "run_attempt"},
		{"no jti", with("jti", nil), protocol.ErrOIDCClaimsInvalid, "jti"},
		{"no event_name", with("event_name", nil), protocol.ErrOIDCClaimsInvalid, "event_name"},
		{"bad sha", with("sha", "main"), protocol.ErrOIDCClaimsInvalid, "sha"},
		{"bad workflow_ref", with("workflow_ref", "acme/app/.github/workflows/x.yml"), protocol.ErrOIDCClaimsInvalid, "workflow_ref"},
		{"garbage", "not.a.token", protocol.ErrOIDCTokenInvalid, ""},
		{"two parts", "abc.def", protocol.ErrOIDCTokenInvalid, "compact"},
		{"huge", strings.Repeat("a", actionsoidc.MaxTokenSize+1), protocol.ErrOIDCTokenInvalid, "larger"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.v.Verify(context.Background(), tc.token)
			refusal(t, err, tc.want, tc.reason)
		})
	}
	// A header that would select a key (jku, jwk) is refused outright.
	t.Run("jku header", func(t *testing.T) {
		opts := (&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", e.fake.OIDCKeyID()).WithHeader("jku", "https://evil.example/jwks")
		s, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: e.fake.OIDCKey()}, opts)
		require.NoError(t, err)
		b, _ := json.Marshal(base())
		obj, err := s.Sign(b)
		require.NoError(t, err)
		tok, err := obj.CompactSerialize()
		require.NoError(t, err)
		_, err = e.v.Verify(context.Background(), tok)
		refusal(t, err, protocol.ErrOIDCTokenInvalid, "jku")
	})
}

// TestVerifyLeeway: exp and iat are honoured within 30 s and not beyond.
func TestVerifyLeeway(t *testing.T) {
	e := newEnv(t)
	tok := e.fake.OIDCToken(e.run, actionsoidc.DefaultAudience) // exp = now + 5 min
	e.clk.Advance(5*time.Minute + 29*time.Second)
	_, err := e.v.Verify(context.Background(), tok)
	require.NoError(t, err)
	e.clk.Advance(time.Second)
	_, err = e.v.Verify(context.Background(), tok)
	refusal(t, err, protocol.ErrOIDCTokenExpired, "expired")
}

// TestVerifyUnknownKidRefetchesAtMostOnceAMinute: an unknown kid refetches
// the key set (GitHub rotates keys) but a stream of them costs one fetch a
// minute.
func TestVerifyUnknownKidRefetchesAtMostOnceAMinute(t *testing.T) {
	e := newEnv(t)
	_, err := e.v.Verify(context.Background(), e.fake.OIDCToken(e.run, actionsoidc.DefaultAudience))
	require.NoError(t, err)
	require.Equal(t, 2, *e.fetch)
	forged := fakegithub.SignJWT(e.fake.OIDCKey(), jose.RS256, "rotated", e.fake.OIDCClaims(e.run, actionsoidc.DefaultAudience))
	for range 5 {
		_, err = e.v.Verify(context.Background(), forged)
		refusal(t, err, protocol.ErrOIDCTokenInvalid, "kid")
	}
	require.Equal(t, 2, *e.fetch)
	e.clk.Advance(time.Minute)
	_, err = e.v.Verify(context.Background(), forged)
	refusal(t, err, protocol.ErrOIDCTokenInvalid, "kid")
	require.Equal(t, 4, *e.fetch)
}

// TestVerifyKnownKidDoesNotWaitForAFetch: while the refetch an unknown kid
// caused hangs on the issuer, a token whose key is known verifies at once,
// and a verification waiting for the fetch gives up when its context ends.
func TestVerifyKnownKidDoesNotWaitForAFetch(t *testing.T) {
	e := newEnv(t)
	var hang atomic.Bool
	entered := make(chan struct{}, 10)
	release := make(chan struct{})
	unblock := sync.OnceFunc(func() { close(release) })
	t.Cleanup(unblock)
	hc := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if hang.Load() {
			entered <- struct{}{}
			select {
			case <-release:
			case <-r.Context().Done():
				return nil, r.Context().Err()
			}
		}
		return http.DefaultTransport.RoundTrip(r)
	})}
	v, err := actionsoidc.New(actionsoidc.Config{Issuer: e.fake.OIDCIssuer(), HTTP: hc, Clock: e.clk})
	require.NoError(t, err)
	good := e.fake.OIDCToken(e.run, actionsoidc.DefaultAudience)
	_, err = v.Verify(context.Background(), good)
	require.NoError(t, err)

	e.clk.Advance(time.Minute)
	hang.Store(true)
	forged := fakegithub.SignJWT(e.fake.OIDCKey(), jose.RS256, "rotated", e.fake.OIDCClaims(e.run, actionsoidc.DefaultAudience))
	fetched := make(chan error, 1)
	go func() {
		_, err := v.Verify(context.Background(), forged)
		fetched <- err
	}()
	<-entered

	known := make(chan error, 1)
	go func() {
		_, err := v.Verify(context.Background(), good)
		known <- err
	}()
	select {
	case err := <-known:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("a token of a known kid waited for another token's key fetch")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	waiting := make(chan error, 1)
	go func() {
		_, err := v.Verify(ctx, forged)
		waiting <- err
	}()
	select {
	case err := <-waiting:
		require.ErrorIs(t, err, actionsoidc.ErrKeysUnavailable)
	case <-time.After(5 * time.Second):
		t.Fatal("a verification waiting for the key fetch did not honour its context")
	}

	unblock()
	refusal(t, <-fetched, protocol.ErrOIDCTokenInvalid, "kid")
}

// TestVerifyKeysFromTheIssuersOriginOnly: a discovery document that points
// the key set elsewhere, or names another issuer, is not used.
func TestVerifyKeysFromTheIssuersOriginOnly(t *testing.T) {
	e := newEnv(t)
	for name, doc := range map[string]map[string]string{
		"other origin": {"jwks_uri": e.fake.OIDCIssuer() + "/.well-known/jwks"}, // issuer set below
		"other issuer": {"issuer": "https://elsewhere.example", "jwks_uri": ""},
	} {
		t.Run(name, func(t *testing.T) {
			var srv *httptest.Server
			srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				d := map[string]string{"issuer": srv.URL, "jwks_uri": doc["jwks_uri"]}
				if doc["issuer"] != "" {
					d["issuer"] = doc["issuer"]
				}
				_ = json.NewEncoder(w).Encode(d)
			}))
			defer srv.Close()
			v, err := actionsoidc.New(actionsoidc.Config{Issuer: srv.URL, Clock: e.clk})
			require.NoError(t, err)
			c := e.fake.OIDCClaims(e.run, actionsoidc.DefaultAudience)
			c["iss"] = srv.URL
			_, err = v.Verify(context.Background(), e.fake.SignOIDC(c))
			require.ErrorIs(t, err, actionsoidc.ErrKeysUnavailable)
			var oe *actionsoidc.Error
			require.False(t, errors.As(err, &oe), "an unreachable key set is not the token's fault")
		})
	}
}

func TestNewRefusesABadIssuer(t *testing.T) {
	for _, iss := range []string{"token.actions.githubusercontent.com", "ftp://x", "https://x/?a=b", "https://"} {
		_, err := actionsoidc.New(actionsoidc.Config{Issuer: iss})
		require.Error(t, err, iss)
	}
}

// FuzzVerify: no input panics, and the only tokens accepted carry exactly
// the claims the issuer signed.
func FuzzVerify(f *testing.F) {
	e := newEnv(f)
	good := e.fake.OIDCToken(e.run, actionsoidc.DefaultAudience)
	want, err := e.v.Verify(context.Background(), good)
	require.NoError(f, err)
	f.Add(good)
	f.Add(fakegithub.SignJWT(e.fake.OIDCKey(), jose.RS256, "x", map[string]any{"iss": e.fake.OIDCIssuer()}))
	f.Add("eyJhbGciOiJub25lIn0.e30.")
	f.Add("a.b.c")
	f.Fuzz(func(t *testing.T, token string) {
		c, err := e.v.Verify(context.Background(), token)
		if err != nil {
			var oe *actionsoidc.Error
			if !errors.As(err, &oe) && !errors.Is(err, actionsoidc.ErrKeysUnavailable) {
				t.Fatalf("neither a refusal nor unavailable keys: %v", err)
			}
			return
		}
		if *c != *want {
			t.Fatalf("accepted a token with other claims: %+v", c)
		}
	})
}

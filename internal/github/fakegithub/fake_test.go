package fakegithub_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/github"
	"github.com/jobplane/jobplane/internal/github/fakegithub"
)

const appID = 4242

type testBundle struct {
	fake     *fakegithub.Fake
	clock    *clock.Fake
	app      *github.App
	shaA     string
	shaB     string
	repoA    string
	repoB    string
	instA    int64
	instB    int64
	lastCall func() fakegithub.Request
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	clk := clock.NewFake(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))
	key := fakegithub.Key(t, 0)
	f := fakegithub.New(t, fakegithub.Options{AppID: appID, PublicKey: &key.PublicKey, Clock: clk})
	all := github.Permissions{"metadata": "read", "contents": "read", "checks": "write", "pull_requests": "read"}
	f.AddInstallation(1, "acme", all)
	f.AddInstallation(2, "globex", all)
	dirA, shaA := fakegithub.InitRepo(t, map[string]string{"a.txt": "acme"})
	dirB, shaB := fakegithub.InitRepo(t, map[string]string{"b.txt": "globex"})
	f.AddRepo(1, "app", dirA)
	f.AddRepo(2, "svc", dirB)
	app, err := github.New(github.Config{AppID: appID, PrivateKey: key, BaseURL: f.URL, Clock: clk})
	require.NoError(t, err)
	return &testBundle{fake: f, clock: clk, app: app, shaA: shaA, shaB: shaB, repoA: "acme/app", repoB: "globex/svc",
		instA: 1, instB: 2, lastCall: func() fakegithub.Request { r := f.Requests(); return r[len(r)-1] }}
}

// rawToken asks the fake for a token directly, as GitHub's API is asked.
func rawToken(t *testing.T, b *testBundle, inst int64, body string) (int, string) {
	t.Helper()
	jwtStr, err := b.app.JWT()
	require.NoError(t, err)
	req, _ := http.NewRequest(http.MethodPost, b.fake.URL+"/app/installations/"+itoa(inst)+"/access_tokens", bytes.NewBufferString(body))
	req.Header.Set("Authorization", "Bearer "+jwtStr)
	req.ContentLength = int64(len(body))
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var out struct {
		Token string `json:"token"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out.Token
}

func itoa(n int64) string { return string(must(json.Marshal(n))) }

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func call(t *testing.T, b *testBundle, method, path, tok, body string) int {
	t.Helper()
	req, _ := http.NewRequest(method, b.fake.URL+path, bytes.NewBufferString(body))
	if tok != "" {
		req.Header.Set("Authorization", "token "+tok)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	return resp.StatusCode
}

func TestFakeTokenScope(t *testing.T) {
	t.Parallel()
	b := setup(t)

	status, tokA := rawToken(t, b, b.instA, `{"repositories":["app"],"permissions":{"contents":"read"}}`)
	require.Equal(t, http.StatusCreated, status)

	// A's token sees A's repository...
	require.Equal(t, http.StatusOK, call(t, b, "GET", "/repos/acme/app/tarball/"+b.shaA, tokA, ""))
	require.Equal(t, b.instA, b.lastCall().Installation)
	// ...but B's repository does not exist for it: 404, as GitHub hides it.
	require.Equal(t, http.StatusNotFound, call(t, b, "GET", "/repos/globex/svc/tarball/"+b.shaB, tokA, ""))
	// Beyond its permissions: 403.
	require.Equal(t, http.StatusForbidden, call(t, b, "POST", "/repos/acme/app/check-runs", tokA,
		`{"name":"x","head_sha":"`+b.shaA+`"}`))
	require.Equal(t, http.StatusForbidden, call(t, b, "GET", "/repos/acme/app/commits/"+b.shaA+"/check-runs", tokA, ""))
	// No token: private repositories are invisible.
	require.Equal(t, http.StatusNotFound, call(t, b, "GET", "/repos/acme/app/tarball/"+b.shaA, "", ""))
	require.Equal(t, http.StatusUnauthorized, call(t, b, "GET", "/repos/acme/app/tarball/"+b.shaA, "ghs_forged", ""))

	// A token cannot be asked for another installation's repository, nor
	// for permissions the installation did not grant.
	status, _ = rawToken(t, b, b.instA, `{"repositories":["svc"]}`)
	require.Equal(t, http.StatusUnprocessableEntity, status)
	status, _ = rawToken(t, b, b.instA, `{"repositories":["app"],"permissions":{"administration":"write"}}`)
	require.Equal(t, http.StatusUnprocessableEntity, status)
	status, _ = rawToken(t, b, 99, `{}`)
	require.Equal(t, http.StatusNotFound, status)

	// A token expires after an hour.
	b.clock.Advance(61 * time.Minute)
	require.Equal(t, http.StatusUnauthorized, call(t, b, "GET", "/repos/acme/app/tarball/"+b.shaA, tokA, ""))
}

func TestFakeSuspendedInstallation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, tok := rawToken(t, b, b.instA, `{"permissions":{"contents":"read"}}`)
	b.fake.SetSuspended(b.instA, true)
	require.Equal(t, http.StatusForbidden, call(t, b, "GET", "/repos/acme/app/tarball/"+b.shaA, tok, ""))
	status, _ := rawToken(t, b, b.instA, `{}`)
	require.Equal(t, http.StatusForbidden, status)
}

func TestFakeRejectsBadJWTs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	now := b.clock.Now()
	sign := func(key any, alg jose.SignatureAlgorithm, c jwt.Claims) string {
		s, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: key}, (&jose.SignerOptions{}).WithType("JWT"))
		require.NoError(t, err)
		return must(jwt.Signed(s).Claims(c).Serialize())
	}
	good := jwt.Claims{Issuer: "4242", IssuedAt: jwt.NewNumericDate(now.Add(-time.Minute)), Expiry: jwt.NewNumericDate(now.Add(9 * time.Minute))}
	with := func(mod func(c *jwt.Claims)) jwt.Claims { c := good; mod(&c); return c }
	key := fakegithub.Key(t, 0)
	cases := map[string]string{
		"wrong key":     sign(fakegithub.Key(t, 1), jose.RS256, good),
		"wrong issuer":  sign(key, jose.RS256, with(func(c *jwt.Claims) { c.Issuer = "4243" })),
		"expired":       sign(key, jose.RS256, with(func(c *jwt.Claims) { c.Expiry = jwt.NewNumericDate(now.Add(-time.Second)) })),
		"exp too far":   sign(key, jose.RS256, with(func(c *jwt.Claims) { c.Expiry = jwt.NewNumericDate(now.Add(11 * time.Minute)) })),
		"iat in future": sign(key, jose.RS256, with(func(c *jwt.Claims) { c.IssuedAt = jwt.NewNumericDate(now.Add(time.Minute)) })),
		"no iat":        sign(key, jose.RS256, with(func(c *jwt.Claims) { c.IssuedAt = nil })),
		"HS256":         sign([]byte("0123456789abcdef0123456789abcdef"), jose.HS256, good),
		"PS256":         sign(key, jose.PS256, good),
		"garbage":       "a.b.c",
	}
	for name, tok := range cases {
		req, _ := http.NewRequest(http.MethodPost, b.fake.URL+"/app/installations/1/access_tokens", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode, name)
	}
	// The control: the same claims, rightly signed, are accepted.
	req, _ := http.NewRequest(http.MethodPost, b.fake.URL+"/app/installations/1/access_tokens", nil)
	req.Header.Set("Authorization", "Bearer "+sign(key, jose.RS256, good))
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusCreated, resp.StatusCode)
}

func TestFakeCheckRunValidation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, tok := rawToken(t, b, b.instA, `{"repositories":["app"],"permissions":{"checks":"write"}}`)
	cases := map[string]string{
		"no name":                  `{"head_sha":"` + b.shaA + `"}`,
		"unknown commit":           `{"name":"x","head_sha":"` + b.shaB + `"}`,
		"completed, no conclusion": `{"name":"x","head_sha":"` + b.shaA + `","status":"completed"}`,
		"bad status":               `{"name":"x","head_sha":"` + b.shaA + `","status":"done"}`,
		"bad conclusion":           `{"name":"x","head_sha":"` + b.shaA + `","conclusion":"ok"}`,
	}
	for name, body := range cases {
		require.Equal(t, http.StatusUnprocessableEntity, call(t, b, "POST", "/repos/acme/app/check-runs", tok, body), name)
	}
	require.Empty(t, b.fake.CheckRuns(b.repoA))
}

func TestFakeWebhookSignature(t *testing.T) {
	t.Parallel()
	b := setup(t)
	secret := []byte("It's a Secret to Everybody")
	var got http.Header
	var body []byte
	srv := newReceiver(t, func(h http.Header, bb []byte) { got, body = h, bb })
	d := fakegithub.NewDelivery("installation", b.fake.InstallationPayload("created", b.instA))
	resp, err := fakegithub.Send(context.Background(), srv, secret, d)
	require.NoError(t, err)
	require.Equal(t, http.StatusNoContent, resp.Status)
	require.Equal(t, d.GUID, got.Get("X-GitHub-Delivery"))
	require.Equal(t, "installation", got.Get("X-GitHub-Event"))
	ws := github.WebhookSecrets{Current: secret}
	require.NoError(t, ws.Verify(body, got.Get("X-Hub-Signature-256"), b.clock.Now()))
}

func TestFakePullRequestPayload(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p := b.fake.PullRequestPayload(fakegithub.PullRequest{Installation: 1, Repo: "acme/app", Number: 7, Action: "opened",
		HeadSHA: b.shaA, HeadRepo: "mallory/app", Draft: true})
	raw := must(json.Marshal(p))
	var got struct {
		Number      int `json:"number"`
		PullRequest struct {
			Draft bool `json:"draft"`
			Head  struct {
				SHA  string `json:"sha"`
				Repo struct {
					FullName string `json:"full_name"`
					Fork     bool   `json:"fork"`
				} `json:"repo"`
			} `json:"head"`
		} `json:"pull_request"`
		Installation struct {
			ID int64 `json:"id"`
		} `json:"installation"`
	}
	require.NoError(t, json.Unmarshal(raw, &got))
	require.Equal(t, 7, got.Number)
	require.True(t, got.PullRequest.Draft)
	require.Equal(t, b.shaA, got.PullRequest.Head.SHA)
	require.True(t, got.PullRequest.Head.Repo.Fork)
	require.Equal(t, "mallory/app", got.PullRequest.Head.Repo.FullName)
	require.Equal(t, int64(1), got.Installation.ID)

	same := b.fake.PullRequestPayload(fakegithub.PullRequest{Installation: 1, Repo: "acme/app", Number: 8, Action: "synchronize", HeadSHA: b.shaA})
	require.NoError(t, json.Unmarshal(must(json.Marshal(same)), &got))
	require.False(t, got.PullRequest.Head.Repo.Fork)
}

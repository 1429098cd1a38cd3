package github_test

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/github"
	"github.com/jobplane/jobplane/internal/github/fakegithub"
)

const appID = 777

type testBundle struct {
	fake  *fakegithub.Fake
	clock *clock.Fake
	app   *github.App
	dirA  string
	shaA  string
	shaB  string
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	clk := clock.NewFake(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))
	key := fakegithub.Key(t, 0)
	f := fakegithub.New(t, fakegithub.Options{AppID: appID, PublicKey: &key.PublicKey, Clock: clk})
	perms := github.Permissions{"metadata": "read", "contents": "read", "checks": "write"}
	f.AddInstallation(1, "acme", perms)
	f.AddInstallation(2, "globex", perms)
	f.AddInstallation(3, "readonly", github.Permissions{"metadata": "read"})
	dirA, shaA := fakegithub.InitRepo(t, map[string]string{"README.md": "acme v1\n", "src/main.go": "package main\n"})
	dirB, shaB := fakegithub.InitRepo(t, map[string]string{"README.md": "globex\n"})
	dirC, _ := fakegithub.InitRepo(t, map[string]string{"x": "y"})
	f.AddRepo(1, "app", dirA)
	f.AddRepo(2, "svc", dirB)
	f.AddRepo(3, "ro", dirC)
	app, err := github.New(github.Config{AppID: appID, PrivateKey: key, BaseURL: f.URL, Clock: clk})
	require.NoError(t, err)
	return &testBundle{fake: f, clock: clk, app: app, dirA: dirA, shaA: shaA, shaB: shaB}
}

func tokenRequests(f *fakegithub.Fake) int {
	n := 0
	for _, r := range f.Requests() {
		if strings.HasSuffix(r.Path, "/access_tokens") && r.Status == http.StatusCreated {
			n++
		}
	}
	return n
}

func TestJWTClaims(t *testing.T) {
	t.Parallel()
	b := setup(t)
	raw, err := b.app.JWT()
	require.NoError(t, err)
	tok, err := jwt.ParseSigned(raw, []jose.SignatureAlgorithm{jose.RS256})
	require.NoError(t, err)
	require.Equal(t, "JWT", tok.Headers[0].ExtraHeaders["typ"])
	var c jwt.Claims
	require.NoError(t, tok.Claims(&fakegithub.Key(t, 0).PublicKey, &c))
	now := b.clock.Now()
	require.Equal(t, "777", c.Issuer)
	require.Equal(t, now.Add(-60*time.Second).Unix(), c.IssuedAt.Time().Unix())
	require.Equal(t, now.Add(9*time.Minute).Unix(), c.Expiry.Time().Unix())
	require.LessOrEqual(t, c.Expiry.Time().Sub(now), 10*time.Minute)
}

func TestInstallationTokenCache(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	t1, err := b.app.InstallationToken(ctx, 1, "acme/app", github.PermContentsRead)
	require.NoError(t, err)
	t2, err := b.app.InstallationToken(ctx, 1, "acme/app", github.Permissions{"contents": "read"})
	require.NoError(t, err)
	require.Equal(t, 1, tokenRequests(b.fake), "the second call is served from the cache")
	require.Equal(t, t1.ExpiresAt, t2.ExpiresAt)

	// Another permission set or repository is another token.
	_, err = b.app.InstallationToken(ctx, 1, "acme/app", github.PermChecksWrite)
	require.NoError(t, err)
	require.Equal(t, 2, tokenRequests(b.fake))

	// Still cached just before the refresh margin; replaced after it.
	b.clock.Advance(54 * time.Minute)
	_, err = b.app.InstallationToken(ctx, 1, "acme/app", github.PermContentsRead)
	require.NoError(t, err)
	require.Equal(t, 2, tokenRequests(b.fake))
	b.clock.Advance(2 * time.Minute)
	_, err = b.app.InstallationToken(ctx, 1, "acme/app", github.PermContentsRead)
	require.NoError(t, err)
	require.Equal(t, 3, tokenRequests(b.fake))
	// The stale checks token was swept out when the new one arrived.
	require.Equal(t, 1, b.app.Cached())
}

func TestInstallationTokenRefusals(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	// Installation 1 cannot get a token for installation 2's repository.
	_, err := b.app.InstallationToken(ctx, 1, "globex/svc", github.PermContentsRead)
	require.ErrorIs(t, err, github.ErrInvalid)
	_, err = b.app.Tarball(ctx, 1, "globex/svc", b.shaB)
	require.ErrorIs(t, err, github.ErrInvalid)
	// A permission the installation did not grant.
	_, err = b.app.CreateCheckRun(ctx, 3, "readonly/ro", github.CheckRunCreate{Name: "x", HeadSHA: b.shaA})
	require.ErrorIs(t, err, github.ErrInvalid)
	require.False(t, github.Retryable(err))
	// Unknown installation.
	_, err = b.app.InstallationToken(ctx, 9, "acme/app", github.PermContentsRead)
	require.ErrorIs(t, err, github.ErrNotFound)
	// Names that could smuggle a path are refused before any request.
	for _, repo := range []string{"acme", "acme/../globex/svc", "acme/app/x", "/app", "acme/", "ac me/app"} {
		_, err = b.app.InstallationToken(ctx, 1, repo, github.PermContentsRead)
		require.Error(t, err, repo)
	}
	_, err = b.app.Tarball(ctx, 1, "acme/app", "main")
	require.Error(t, err, "a branch name is not an exact commit")
	// Suspended: 403.
	b.fake.SetSuspended(1, true)
	_, err = b.app.InstallationToken(ctx, 1, "acme/app", github.PermContentsRead)
	require.ErrorIs(t, err, github.ErrForbidden)
	// Every token request was made with the App JWT, and only for the
	// installation asked.
	for _, r := range b.fake.Requests() {
		require.Equal(t, "app", r.Auth, r.Path)
	}
}

func TestCheckRunLifecycle(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	cr, err := b.app.CreateCheckRun(ctx, 1, "acme/app", github.CheckRunCreate{Name: "jobplane / test", HeadSHA: b.shaA,
		Status: github.CheckQueued, ExternalID: "run_1"})
	require.NoError(t, err)
	require.Equal(t, github.CheckQueued, cr.Status)

	found, err := b.app.FindCheckRun(ctx, 1, "acme/app", b.shaA, "run_1")
	require.NoError(t, err)
	require.Equal(t, cr.ID, found.ID)
	_, err = b.app.FindCheckRun(ctx, 1, "acme/app", b.shaA, "run_2")
	require.ErrorIs(t, err, github.ErrNotFound)

	_, err = b.app.UpdateCheckRun(ctx, 1, "acme/app", cr.ID, github.CheckRunUpdate{Status: github.CheckInProgress})
	require.NoError(t, err)
	done := github.CheckRunUpdate{Conclusion: github.ConclusionSuccess,
		Output: &github.CheckOutput{Title: "succeeded", Summary: "exit 0"}}
	for range 2 { // the same completion twice is one completion
		got, err := b.app.UpdateCheckRun(ctx, 1, "acme/app", cr.ID, done)
		require.NoError(t, err)
		require.Equal(t, github.CheckCompleted, got.Status)
		require.Equal(t, github.ConclusionSuccess, got.Conclusion)
	}
	require.Equal(t, []string{"queued", "in_progress", "completed"}, b.fake.CheckRunHistory(cr.ID))
	_, err = b.app.UpdateCheckRun(ctx, 1, "acme/app", cr.ID, github.CheckRunUpdate{Status: github.CheckInProgress})
	require.ErrorIs(t, err, github.ErrInvalid)

	// Installation 2 cannot touch installation 1's Check Run, even knowing
	// its ID: its token does not cover the repository.
	_, err = b.app.UpdateCheckRun(ctx, 2, "acme/app", cr.ID, done)
	require.ErrorIs(t, err, github.ErrInvalid)
	for _, r := range b.fake.Requests() {
		if strings.Contains(r.Path, "/repos/acme/") {
			require.Equal(t, int64(1), r.Installation, r.Path)
		}
	}
}

func readTar(t *testing.T, r io.Reader) map[string]string {
	t.Helper()
	zr, err := gzip.NewReader(r)
	require.NoError(t, err)
	tr := tar.NewReader(zr)
	out := map[string]string{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		require.NoError(t, err)
		if h.Typeflag == tar.TypeReg {
			b, err := io.ReadAll(tr)
			require.NoError(t, err)
			out[h.Name] = string(b)
		}
	}
}

func TestTarballExactCommit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	sha2 := fakegithub.Commit(t, b.dirA, map[string]string{"README.md": "acme v2\n"})

	for sha, want := range map[string]string{b.shaA: "acme v1\n", sha2: "acme v2\n"} {
		rc, err := b.app.Tarball(ctx, 1, "acme/app", sha)
		require.NoError(t, err)
		files := readTar(t, rc)
		require.NoError(t, rc.Close())
		require.Equal(t, want, files["acme-app-"+sha[:7]+"/README.md"])
		require.Contains(t, files, "acme-app-"+sha[:7]+"/src/main.go")
	}

	// An archive of another commit than the one asked for is refused.
	b.fake.ServeWrongCommit("acme/app", sha2, b.shaA)
	_, err := b.app.Tarball(ctx, 1, "acme/app", sha2)
	require.ErrorIs(t, err, github.ErrSourceMismatch)
	require.False(t, github.Retryable(err))

	// A commit the repository does not have.
	_, err = b.app.Tarball(ctx, 1, "acme/app", b.shaB)
	require.ErrorIs(t, err, github.ErrNotFound)
}

func TestOutageIsRetryable(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.fake.SetDown(true)
	_, err := b.app.CreateCheckRun(context.Background(), 1, "acme/app", github.CheckRunCreate{Name: "x", HeadSHA: b.shaA})
	require.ErrorIs(t, err, github.ErrUnavailable)
	require.True(t, github.Retryable(err))
	b.fake.SetDown(false)
	_, err = b.app.CreateCheckRun(context.Background(), 1, "acme/app", github.CheckRunCreate{Name: "x", HeadSHA: b.shaA})
	require.NoError(t, err)
}

func TestRepositoryAndCommitSHA(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	info, err := b.app.Repository(ctx, 1, "acme/app")
	require.NoError(t, err)
	require.Equal(t, "main", info.DefaultBranch)
	require.Equal(t, "acme/app", info.FullName)
	sha, err := b.app.CommitSHA(ctx, 1, "acme/app", "main")
	require.NoError(t, err)
	require.Equal(t, b.shaA, sha)
	sha2 := fakegithub.Commit(t, b.dirA, map[string]string{"x": "2"})
	sha, err = b.app.CommitSHA(ctx, 1, "acme/app", info.DefaultBranch)
	require.NoError(t, err)
	require.Equal(t, sha2, sha, "a branch resolves to its commit now")
	_, err = b.app.CommitSHA(ctx, 1, "acme/app", "no-such-branch")
	require.ErrorIs(t, err, github.ErrInvalid)
	// Metadata is readable by every installation, even without contents.
	_, err = b.app.Repository(ctx, 3, "readonly/ro")
	require.NoError(t, err)
	_, err = b.app.CommitSHA(ctx, 3, "readonly/ro", "main")
	require.ErrorIs(t, err, github.ErrInvalid, "contents: read was not granted to installation 3")
	// Check Runs of a commit are still listed by their own route.
	_, err = b.app.FindCheckRun(ctx, 1, "acme/app", b.shaA, "none")
	require.ErrorIs(t, err, github.ErrNotFound)
}

// Every token the client asks for is narrowed to the one repository and the
// one permission of the step that needs it.
func TestTokensAreNarrowed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	rc, err := b.app.Tarball(ctx, 1, "acme/app", b.shaA)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, rc)
	require.NoError(t, rc.Close())
	_, err = b.app.CreateCheckRun(ctx, 1, "acme/app", github.CheckRunCreate{Name: "x", HeadSHA: b.shaA})
	require.NoError(t, err)
	_, err = b.app.Repository(ctx, 2, "globex/svc")
	require.NoError(t, err)
	var asked []string
	for _, r := range b.fake.Requests() {
		if strings.HasSuffix(r.Path, "/access_tokens") {
			require.Len(t, r.TokenRepositories, 1, r.Path)
			require.Len(t, r.TokenPermissions, 1, r.Path)
			for k, v := range r.TokenPermissions {
				asked = append(asked, r.Path+" "+r.TokenRepositories[0]+" "+k+":"+v)
			}
		}
	}
	require.Equal(t, []string{
		"/app/installations/1/access_tokens app contents:read",
		"/app/installations/1/access_tokens app checks:write",
		"/app/installations/2/access_tokens svc metadata:read",
	}, asked)
}

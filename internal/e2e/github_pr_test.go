package e2e

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/apiclient"
	"github.com/jobplane/jobplane/internal/github"
	"github.com/jobplane/jobplane/internal/github/fakegithub"
	"github.com/jobplane/jobplane/internal/gitsync"
	"github.com/jobplane/jobplane/internal/protocol"
)

// prJob is a job requested by pull requests that records what it ran on and
// dumps its environment, so that the test can look for credentials in it.
func prJob(name, dir string) string {
	// It holds until the test has seen its Check Run in progress (the file
	// "release"), so that no state can be coalesced away by timing.
	script, _ := json.Marshal(fmt.Sprintf(`while [ ! -f %s ]; do sleep 0.1; done; echo "$JOBPLANE_RUN_ID %s $JOBPLANE_GITHUB_REPOSITORY $JOBPLANE_GITHUB_SHA $(cat mark)" >> %s; env >> %s`,
		filepath.Join(dir, "release"), name, filepath.Join(dir, "ran"), filepath.Join(dir, "env")))
	return fmt.Sprintf("name: %s\nrun:\n  command: [sh, -c, %s]\n  timeout: 2m\non:\n  pull_request: {types: [opened, synchronize]}\n", name, script)
}

const allowGitHub = "rules:\n  - id: pull-requests\n    jobs: [\"*\"]\n    users: [github]\n"

// TestGitHubPullRequestsEndToEnd: two unrelated installations, one with its
// own .jobplane definitions and one on the server's, each open a pull
// request; real workers run both; the Check Runs go queued, in_progress,
// completed; no request of one installation touches the other's
// repositories; no installation token reaches a runner; a self-hosted
// runner outside the allow-list gets nothing.
func TestGitHubPullRequestsEndToEnd(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		secret := "e2e-webhook-secret-" + randHex(8)
		key := fakegithub.Key(t, 0)
		fake := fakegithub.New(t, fakegithub.Options{AppID: 4242, PublicKey: &key.PublicKey})
		perms := github.Permissions{"metadata": "read", "checks": "write", "contents": "read", "pull_requests": "read"}
		fake.AddInstallation(21, "acme", perms)
		fake.AddInstallation(22, "globex", perms)
		effects := t.TempDir()
		// Each repository's working tree marks itself: the job prints the
		// mark of the source it was given (the source broker).
		apiDir, shaA := fakegithub.InitRepo(t, map[string]string{"main.go": "package main\n", "mark": "acme-api"})
		svcDir, shaB := fakegithub.InitRepo(t, map[string]string{"main.py": "print()\n", "mark": "globex-svc"})
		dotDir, _ := fakegithub.InitRepo(t, map[string]string{"jobs/lint.yaml": prJob("lint", effects),
			"groups.yaml": "groups: {}\n", "policies/github.yaml": allowGitHub})
		fake.AddRepo(21, "api", apiDir)
		fake.AddRepo(21, ".jobplane", dotDir)
		fake.AddRepo(22, "svc", svcDir)

		defs := filepath.Join(t.TempDir(), "definitions")
		_, err := gitsync.InitRepo(defs, "main", map[string]string{"jobs/ci.yaml": prJob("ci", effects),
			"groups.yaml": "groups: {}\n", "policies/github.yaml": allowGitHub}, "server definitions")
		require.NoError(t, err)
		keyPath := filepath.Join(t.TempDir(), "app.pem")
		require.NoError(t, os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY",
			Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600))

		addr := freeAddr(t)
		s := &server{t: t, addr: addr, url: "http://" + addr, adminToken: "jpt_e2e_" + randHex(16)}
		s.admin = &apiclient.Client{BaseURL: s.url, Token: s.adminToken, HTTP: checkedHTTP(t, 10*time.Second)}
		s.proc = startProc(t, "server", []string{"JOBPLANE_GITHUB_WEBHOOK_SECRET=" + secret, "JOBPLANE_ADMIN_TOKEN=" + s.adminToken},
			"server", "--listen", addr, "--db", b.dsn(t), "--definitions", defs, "--channel", "prod=main",
			"--data-dir", t.TempDir(), "--log-level", "debug", "--github-channel", "prod",
			"--github-app-id", "4242", "--github-private-key", keyPath, "--github-api", fake.URL)
		s.waitReady(30 * time.Second)

		send := func(d fakegithub.Delivery) string {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			resp, err := fakegithub.Send(ctx, s.url+"/v1/github/webhook", []byte(secret), d)
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
			var out struct{ Outcome string }
			require.NoError(t, json.Unmarshal(resp.Body, &out))
			return out.Outcome
		}
		for _, inst := range []int64{21, 22} {
			require.Equal(t, "processed", send(fakegithub.NewDelivery("installation", fake.InstallationPayload("created", inst))))
		}
		regToken := func(inst int64, req protocol.RegistrationTokenRequest) string {
			body, _ := json.Marshal(req)
			hr, err := http.NewRequest(http.MethodPost, fmt.Sprintf("%s/v1/github/installations/%d/registration-tokens", s.url, inst), bytes.NewReader(body))
			require.NoError(t, err)
			hr.Header.Set("Authorization", "Bearer "+s.adminToken)
			hr.Header.Set("Content-Type", "application/json")
			resp, err := checkedHTTP(t, 10*time.Second).Do(hr)
			require.NoError(t, err)
			defer resp.Body.Close()
			require.Equal(t, http.StatusCreated, resp.StatusCode)
			var tok protocol.TokenResponse
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&tok))
			return tok.Token
		}

		// A self-hosted runner of acme for another repository polls first:
		// it must get neither acme/api's run nor globex's.
		// (Its token comes from the CLI an operator would use.)
		stdout, stderr, code := runCLI(t, s, "runners", "token", "create", "--installation", "21", "--self-hosted",
			"--allowed-repo", "acme/other", "--ttl", "10m")
		require.Zero(t, code, stderr)
		outsider := startWorker(t, s, "acme-self-hosted", t.TempDir(), strings.TrimSpace(stdout))

		dA := fakegithub.NewDelivery("pull_request", fake.PullRequestPayload(fakegithub.PullRequest{Installation: 21, Repo: "acme/api", Number: 1, Action: "opened", HeadSHA: shaA}))
		dB := fakegithub.NewDelivery("pull_request", fake.PullRequestPayload(fakegithub.PullRequest{Installation: 22, Repo: "globex/svc", Number: 5, Action: "opened", HeadSHA: shaB}))
		require.Equal(t, "processed", send(dA))
		require.Equal(t, "processed", send(dB))
		require.Equal(t, "duplicate", send(dA), "a redelivery requests nothing more")

		checkOf := func(repo string) (github.CheckRun, bool) {
			crs := fake.CheckRuns(repo)
			if len(crs) != 1 {
				return github.CheckRun{}, false
			}
			return crs[0], true
		}
		eventually(t, 30*time.Second, "both Check Runs queued", func() (bool, string) {
			a, okA := checkOf("acme/api")
			b, okB := checkOf("globex/svc")
			return okA && okB && a.Status == github.CheckQueued && b.Status == github.CheckQueued, fmt.Sprintf("%+v %+v", a, b)
		})
		workers := []*worker{outsider,
			startWorker(t, s, "acme-managed", t.TempDir(), regToken(21, protocol.RegistrationTokenRequest{TTLSeconds: 600})),
			startWorker(t, s, "globex-managed", t.TempDir(), regToken(22, protocol.RegistrationTokenRequest{TTLSeconds: 600}))}
		eventually(t, 60*time.Second, "both Check Runs in progress", func() (bool, string) {
			a, okA := checkOf("acme/api")
			b, okB := checkOf("globex/svc")
			return okA && okB && a.Status == github.CheckInProgress && b.Status == github.CheckInProgress, fmt.Sprintf("%+v %+v", a, b)
		})
		require.NoError(t, os.WriteFile(filepath.Join(effects, "release"), nil, 0o600))
		eventually(t, 60*time.Second, "both Check Runs completed", func() (bool, string) {
			a, okA := checkOf("acme/api")
			b, okB := checkOf("globex/svc")
			return okA && okB && a.Status == github.CheckCompleted && b.Status == github.CheckCompleted, fmt.Sprintf("%+v %+v", a, b)
		})
		for repo, name := range map[string]string{"acme/api": "jobplane / lint", "globex/svc": "jobplane / ci"} {
			cr, _ := checkOf(repo)
			require.Equal(t, name, cr.Name, "acme's job comes from acme/.jobplane, globex's from the server's definitions")
			require.Equal(t, github.ConclusionSuccess, cr.Conclusion)
			hist := fake.CheckRunHistory(cr.ID)
			require.Equal(t, []string{github.CheckQueued, github.CheckInProgress, github.CheckCompleted}, slices.Compact(hist), "%s: %v", repo, hist)
		}

		// Each job ran once, on its own repository and exact head commit.
		ran := readLines(t, filepath.Join(effects, "ran"))
		require.Len(t, ran, 2, "%v", ran)
		var runIDs []string
		for _, l := range ran {
			f := strings.Fields(l)
			require.Len(t, f, 5, l)
			runIDs = append(runIDs, f[0])
			switch f[1] {
			case "lint":
				require.Equal(t, []string{"acme/api", shaA, "acme-api"}, f[2:])
			case "ci":
				require.Equal(t, []string{"globex/svc", shaB, "globex-svc"}, f[2:])
			default:
				t.Fatalf("unexpected job line %q", l)
			}
		}
		for _, id := range runIDs {
			require.NotContains(t, outsider.proc.output(), id, "the self-hosted runner outside the allow-list saw a run")
		}

		// The two installations never crossed at GitHub.
		owner := map[int64]string{21: "/repos/acme/", 22: "/repos/globex/"}
		tokens := 0
		for _, r := range fake.Requests() {
			if r.Auth == "installation" {
				require.True(t, strings.HasPrefix(r.Path+"/", owner[r.Installation]), "installation %d requested %s", r.Installation, r.Path)
			}
			if r.Auth == "app" && strings.HasSuffix(r.Path, "/access_tokens") {
				tokens++
				require.Len(t, r.TokenRepositories, 1, "%+v", r)
				require.Len(t, r.TokenPermissions, 1, "%+v", r)
			}
		}
		require.Positive(t, tokens)

		// No installation token reached a runner: not in any job's
		// environment, not in any worker's output.
		envDump, err := os.ReadFile(filepath.Join(effects, "env"))
		require.NoError(t, err)
		issued := fake.IssuedTokens()
		require.NotEmpty(t, issued)
		for _, tok := range issued {
			require.NotContains(t, string(envDump), tok)
			for _, w := range workers {
				require.NotContains(t, w.proc.output(), tok, w.name)
			}
			require.NotContains(t, s.proc.output(), tok, "tokens are never logged")
		}
	})
}

func readLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

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

// TestForkPullRequestWaitsForAnIsolatedWorker: a pull request from a fork
// runs in safe mode, which needs an isolated runner. A managed worker
// without --job-user runs a pull request from the repository itself, but
// is never handed the fork's run: its Check Run stays queued. A managed
// worker with --job-user nobody runs it, as that user.
func TestForkPullRequestWaitsForAnIsolatedWorker(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("--job-user needs a worker running as root")
	}
	secret := "e2e-webhook-secret-" + randHex(8)
	key := fakegithub.Key(t, 0)
	fake := fakegithub.New(t, fakegithub.Options{AppID: 4242, PublicKey: &key.PublicKey})
	fake.AddInstallation(21, "acme", github.Permissions{"metadata": "read", "checks": "write", "contents": "read", "pull_requests": "read"})
	// Written by the job user.
	effects, err := os.MkdirTemp("", "jobplane-fork-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(effects) })
	require.NoError(t, os.Chmod(effects, 0o777))
	apiDir, sha := fakegithub.InitRepo(t, map[string]string{"main.go": "package main\n"})
	fake.AddRepo(21, "api", apiDir)

	script, _ := json.Marshal(fmt.Sprintf(`echo "$JOBPLANE_RUN_ID uid=$(id -u)" >> %s/ran`, effects))
	defs := filepath.Join(t.TempDir(), "definitions")
	_, err = gitsync.InitRepo(defs, "main", map[string]string{
		"jobs/ci.yaml":         fmt.Sprintf("name: ci\nrun:\n  command: [sh, -c, %s]\n  timeout: 2m\non:\n  pull_request: {types: [opened, synchronize]}\n", script),
		"groups.yaml":          "groups: {}\n",
		"policies/github.yaml": allowGitHub}, "server definitions")
	require.NoError(t, err)
	keyPath := filepath.Join(t.TempDir(), "app.pem")
	require.NoError(t, os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY",
		Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600))
	addr := freeAddr(t)
	s := &server{t: t, addr: addr, url: "http://" + addr, adminToken: "jpt_e2e_" + randHex(16)}
	s.admin = &apiclient.Client{BaseURL: s.url, Token: s.adminToken, HTTP: checkedHTTP(t, 10*time.Second)}
	s.proc = startProc(t, "server", []string{"JOBPLANE_GITHUB_WEBHOOK_SECRET=" + secret, "JOBPLANE_ADMIN_TOKEN=" + s.adminToken},
		"server", "--listen", addr, "--db", backends[0].dsn(t), "--definitions", defs, "--channel", "prod=main",
		"--data-dir", t.TempDir(), "--log-level", "debug", "--github-channel", "prod",
		"--github-app-id", "4242", "--github-private-key", keyPath, "--github-api", fake.URL)
	s.waitReady(30 * time.Second)
	send := func(d fakegithub.Delivery) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		resp, err := fakegithub.Send(ctx, s.url+"/v1/github/webhook", []byte(secret), d)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	}
	send(fakegithub.NewDelivery("installation", fake.InstallationPayload("created", 21)))
	regToken := func() string {
		body, _ := json.Marshal(protocol.RegistrationTokenRequest{TTLSeconds: 600})
		hr, err := http.NewRequest(http.MethodPost, s.url+"/v1/github/installations/21/registration-tokens", bytes.NewReader(body))
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
	exposed := startWorker(t, s, "exposed", t.TempDir(), regToken())

	checkRunOf := func(head string) (github.CheckRun, bool) {
		for _, cr := range fake.CheckRuns("acme/api") {
			if cr.HeadSHA == head {
				return cr, true
			}
		}
		return github.CheckRun{}, false
	}
	// The exposed worker takes the installation's runs that need no
	// isolation: a pull request from the repository itself.
	send(fakegithub.NewDelivery("pull_request", fake.PullRequestPayload(fakegithub.PullRequest{Installation: 21, Repo: "acme/api",
		Number: 2, Action: "opened", HeadSHA: sha})))
	eventually(t, 60*time.Second, "the same-repository pull request's Check Run completed", func() (bool, string) {
		cr, ok := checkRunOf(sha)
		return ok && cr.Status == github.CheckCompleted, fmt.Sprintf("%+v", cr)
	})
	ran := readLines(t, filepath.Join(effects, "ran"))
	require.Len(t, ran, 1)
	require.Equal(t, "uid=0", strings.Fields(ran[0])[1], "the exposed worker runs jobs as its own user")
	require.NoError(t, os.Remove(filepath.Join(effects, "ran")))

	forkSHA := fakegithub.Commit(t, apiDir, map[string]string{"main.go": "package main // from a fork\n"})
	send(fakegithub.NewDelivery("pull_request", fake.PullRequestPayload(fakegithub.PullRequest{Installation: 21, Repo: "acme/api",
		Number: 3, Action: "opened", HeadSHA: forkSHA, HeadRepo: "mallory/api"})))
	checkRun := func() (github.CheckRun, bool) { return checkRunOf(forkSHA) }
	eventually(t, 30*time.Second, "the Check Run queued", func() (bool, string) {
		cr, ok := checkRun()
		return ok && cr.Status == github.CheckQueued, fmt.Sprintf("%+v", cr)
	})
	// Several of the exposed worker's claims later: still queued, run
	// nowhere.
	time.Sleep(3 * time.Second)
	cr, _ := checkRun()
	require.Equal(t, github.CheckQueued, cr.Status, "%+v", cr)
	_, err = os.Stat(filepath.Join(effects, "ran"))
	require.True(t, os.IsNotExist(err), "the fork's run ran on a worker that is not isolated")

	isolated := startWorkerVia(t, s.url, "isolated", t.TempDir(), regToken(), "--job-user", "nobody")
	eventually(t, 60*time.Second, "the Check Run completed", func() (bool, string) {
		cr, ok := checkRun()
		return ok && cr.Status == github.CheckCompleted, fmt.Sprintf("%+v", cr)
	})
	cr, _ = checkRun()
	require.Equal(t, github.ConclusionSuccess, cr.Conclusion, "%+v", cr)
	ran = readLines(t, filepath.Join(effects, "ran"))
	require.Len(t, ran, 1)
	f := strings.Fields(ran[0])
	require.Equal(t, "uid=65534", f[1])
	require.Contains(t, isolated.proc.output(), f[0])
	require.NotContains(t, exposed.proc.output(), f[0], "the run reached the worker that is not isolated")
}

package e2e

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
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

// TestGitHubActionsRunEndToEnd: a real server with the fake GitHub as its
// API and Actions OIDC issuer, two installations whose job runs in the
// GitHub Actions compatibility mode. Each pull request's attempt is
// dispatched in its own repository with its own narrowed token; the real
// `jobplane actions-run` binary plays the dispatched workflow: it fetches
// its OIDC token the way a workflow does, exchanges it, runs the pinned
// command, streams its logs, renews its lease and reports; both Check Runs
// complete.
func TestGitHubActionsRunEndToEnd(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		secret := "e2e-webhook-secret-" + randHex(8)
		key := fakegithub.Key(t, 0)
		fake := fakegithub.New(t, fakegithub.Options{AppID: 4343, PublicKey: &key.PublicKey})
		perms := github.Permissions{"metadata": "read", "checks": "write", "contents": "read", "pull_requests": "read", "actions": "write"}
		fake.AddInstallation(31, "acme", perms)
		fake.AddInstallation(32, "globex", perms)
		effects := t.TempDir()
		shas := map[string]string{}
		for inst, repo := range map[int64]string{31: "acme/api", 32: "globex/svc"} {
			dir, sha := fakegithub.InitRepo(t, map[string]string{"README": repo})
			fake.AddRepo(inst, repo[strings.IndexByte(repo, '/')+1:], dir)
			fake.AddWorkflow(fakegithub.Workflow{Repo: repo, File: "jobplane.yml", Inputs: []string{"jobplane_run", "jobplane_attempt", "jobplane_commit"}})
			shas[repo] = sha
		}
		// Longer than the lease: the workflow must renew to report.
		script, _ := json.Marshal(fmt.Sprintf(`echo "hello from $JOBPLANE_GITHUB_REPOSITORY"; echo "run token: $JOBPLANE_RUN_TOKEN"; echo "run token base64: $(printf %%s "$JOBPLANE_RUN_TOKEN" | base64 -w0)"; sleep 4; echo "$JOBPLANE_RUN_ID $JOBPLANE_GITHUB_REPOSITORY $JOBPLANE_GITHUB_SHA" >> %s`,
			filepath.Join(effects, "ran")))
		job := fmt.Sprintf("name: build\nrun:\n  command: [sh, -c, %s]\n  timeout: 2m\n  lease_ttl: 2s\nexecutor: github-actions\nworkflow: jobplane.yml\n"+
			"on:\n  pull_request: {types: [opened, synchronize]}\n", script)
		defs := filepath.Join(t.TempDir(), "definitions")
		_, err := gitsync.InitRepo(defs, "main", map[string]string{"jobs/build.yaml": job,
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
			"--github-app-id", "4343", "--github-private-key", keyPath, "--github-api", fake.URL,
			"--github-oidc-issuer", fake.OIDCIssuer())
		s.waitReady(30 * time.Second)

		post := func(path, token string, body any, want int, out any) {
			b, _ := json.Marshal(body)
			hr, err := http.NewRequest(http.MethodPost, s.url+path, bytes.NewReader(b))
			require.NoError(t, err)
			hr.Header.Set("Authorization", "Bearer "+token)
			hr.Header.Set("Content-Type", "application/json")
			resp, err := checkedHTTP(t, 20*time.Second).Do(hr)
			require.NoError(t, err)
			defer resp.Body.Close()
			require.Equal(t, want, resp.StatusCode, path)
			if out != nil {
				require.NoError(t, json.NewDecoder(resp.Body).Decode(out))
			}
		}
		send := func(d fakegithub.Delivery) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			resp, err := fakegithub.Send(ctx, s.url+"/v1/github/webhook", []byte(secret), d)
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
		}
		for _, inst := range []int64{31, 32} {
			send(fakegithub.NewDelivery("installation", fake.InstallationPayload("created", inst)))
		}
		// A person of each installation, to read its runs and logs.
		people := map[string]*apiclient.Client{}
		for inst, repo := range map[int64]string{31: "acme/api", 32: "globex/svc"} {
			post(fmt.Sprintf("/v1/github/installations/%d/principals", inst), s.adminToken, map[string]string{"name": "dev", "kind": "user"}, http.StatusCreated, nil)
			var tok protocol.TokenResponse
			post(fmt.Sprintf("/v1/github/installations/%d/principals/dev/tokens", inst), s.adminToken, map[string]int{"ttl_seconds": 0}, http.StatusCreated, &tok)
			people[repo] = &apiclient.Client{BaseURL: s.url, Token: tok.Token, HTTP: checkedHTTP(t, 10*time.Second)}
		}
		send(fakegithub.NewDelivery("pull_request", fake.PullRequestPayload(fakegithub.PullRequest{Installation: 31, Repo: "acme/api", Number: 1, Action: "opened", HeadSHA: shas["acme/api"]})))
		send(fakegithub.NewDelivery("pull_request", fake.PullRequestPayload(fakegithub.PullRequest{Installation: 32, Repo: "globex/svc", Number: 2, Action: "opened", HeadSHA: shas["globex/svc"]})))

		var ds []fakegithub.Dispatch
		eventually(t, 30*time.Second, "both workflows dispatched", func() (bool, string) {
			ds = fake.Dispatches()
			return len(ds) == 2, fmt.Sprintf("%+v", ds)
		})
		// Each dispatch used its own installation's token, narrowed to the
		// one repository and actions: write.
		for _, d := range ds {
			require.Equal(t, map[string]int64{"acme/api": 31, "globex/svc": 32}[d.Repo], d.Installation)
			require.Equal(t, "main", d.Ref)
			require.Equal(t, shas[d.Repo], d.Inputs["jobplane_commit"])
		}
		narrowed := 0
		for _, r := range fake.Requests() {
			if r.Auth == "app" && r.TokenPermissions["actions"] != "" {
				narrowed++
				require.Equal(t, github.Permissions{"actions": "write"}, r.TokenPermissions)
				require.Len(t, r.TokenRepositories, 1)
			}
		}
		require.GreaterOrEqual(t, narrowed, 2, "a token per installation")

		// GitHub takes seconds to start a dispatched workflow; the Check
		// Run is posted in the meantime. Waiting for it keeps the history
		// below about the run, not about which goroutine won.
		eventually(t, 30*time.Second, "both Check Runs posted", func() (bool, string) {
			a, b := fake.CheckRuns("acme/api"), fake.CheckRuns("globex/svc")
			return len(a) == 1 && len(b) == 1, fmt.Sprintf("%+v %+v", a, b)
		})

		// The simulated workflows: GitHub's token endpoint for the job's
		// OIDC token, and the real binary.
		workflows := make([]*proc, len(ds))
		for i, d := range ds {
			run := fake.StartWorkflowRun(d)
			reqToken := "actions-request-" + randHex(8)
			idp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Header.Get("Authorization") != "Bearer "+reqToken {
					http.Error(w, "unauthorized", http.StatusUnauthorized)
					return
				}
				_ = json.NewEncoder(w).Encode(map[string]string{"value": fake.OIDCToken(run, r.URL.Query().Get("audience"))})
			}))
			t.Cleanup(idp.Close)
			workflows[i] = startProc(t, "workflow-"+d.Repo[:strings.IndexByte(d.Repo, '/')],
				[]string{"ACTIONS_ID_TOKEN_REQUEST_URL=" + idp.URL + "/token?api-version=2.0", "ACTIONS_ID_TOKEN_REQUEST_TOKEN=" + reqToken, "RUNNER_TEMP=" + t.TempDir()},
				"actions-run", "--server", s.url, "--attempt", d.Inputs["jobplane_attempt"], "--log-level", "debug")
		}
		for _, w := range workflows {
			select {
			case <-w.done:
			case <-time.After(90 * time.Second):
				t.Fatalf("%s did not finish:\n%s", w.name, w.output())
			}
			require.NoError(t, w.err, "%s:\n%s", w.name, w.output())
		}

		checkOf := func(repo string) (github.CheckRun, bool) {
			crs := fake.CheckRuns(repo)
			if len(crs) != 1 {
				return github.CheckRun{}, false
			}
			return crs[0], true
		}
		eventually(t, 30*time.Second, "both Check Runs completed", func() (bool, string) {
			a, okA := checkOf("acme/api")
			b, okB := checkOf("globex/svc")
			return okA && okB && a.Status == github.CheckCompleted && b.Status == github.CheckCompleted, fmt.Sprintf("%+v %+v", a, b)
		})
		for _, d := range ds {
			cr, _ := checkOf(d.Repo)
			require.Equal(t, github.ConclusionSuccess, cr.Conclusion, d.Repo)
			require.Equal(t, d.Inputs["jobplane_run"], cr.ExternalID)
			hist := slices.Compact(fake.CheckRunHistory(cr.ID))
			require.Equal(t, []string{github.CheckQueued, github.CheckInProgress, github.CheckCompleted}, hist, d.Repo)

			// The run's logs came from the workflow, seen by the
			// installation's own people.
			cl := people[d.Repo]
			r, err := cl.GetRun(s.ctx(), d.Inputs["jobplane_run"])
			require.NoError(t, err)
			require.Equal(t, "succeeded", r.State)
			page, err := cl.Logs(s.ctx(), r.ID, 0)
			require.NoError(t, err)
			var text []string
			for _, l := range page.Lines {
				text = append(text, l.Text)
			}
			all := strings.Join(text, "\n")
			require.Contains(t, all, "hello from "+d.Repo)
			// The workflow masks what it holds as the worker does: the
			// run token, plain and encoded.
			require.Contains(t, all, "run token: ***\n")
			require.Contains(t, all, "run token base64: ***")
			require.NotContains(t, all, "eyJ", "no JWT in the log")
		}
		ran := readLines(t, filepath.Join(effects, "ran"))
		require.Len(t, ran, 2, "%v", ran)
		for _, l := range ran {
			f := strings.Fields(l)
			require.Len(t, f, 3, l)
			require.Equal(t, shas[f[1]], f[2], "the job saw its pull request's head commit")
		}
		// No installation token reached a workflow.
		for _, tok := range fake.IssuedTokens() {
			for _, w := range workflows {
				require.NotContains(t, w.output(), tok)
			}
		}
	})
}

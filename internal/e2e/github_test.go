package e2e

import (
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

	"github.com/jobplane/jobplane/internal/github"
	"github.com/jobplane/jobplane/internal/github/fakegithub"
)

// TestGitHubWebhookProcess drives the real binary configured as a GitHub
// App (flags and environment as an operator sets them) with signed
// deliveries from the fake, across a SIGKILL of the server: a delivery
// processed before the kill stays processed after it.
func TestGitHubWebhookProcess(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		secret := "e2e-webhook-secret-" + randHex(8)
		key := fakegithub.Key(t, 0)
		fake := fakegithub.New(t, fakegithub.Options{AppID: 31337, PublicKey: &key.PublicKey})
		perms := github.Permissions{"metadata": "read", "checks": "write", "contents": "read", "pull_requests": "read"}
		fake.AddInstallation(11, "acme", perms)
		fake.AddInstallation(12, "globex", perms)
		fake.AddRepo(11, "api", "")
		fake.AddRepo(12, "svc", "")

		keyPath := filepath.Join(t.TempDir(), "app.pem")
		require.NoError(t, os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY",
			Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600))
		e := newEnv(t, func(string) []job { return nil })
		addr, db, dataDir := freeAddr(t), b.dsn(t), t.TempDir()
		start := func(n int) *proc {
			p := startProc(t, fmt.Sprintf("server-%d", n), []string{"JOBPLANE_GITHUB_WEBHOOK_SECRET=" + secret},
				"server", "--listen", addr, "--db", db, "--definitions", e.defs, "--channel", "prod=main",
				"--data-dir", dataDir, "--log-level", "debug",
				"--github-app-id", "31337", "--github-private-key", keyPath, "--github-api", fake.URL)
			s := &server{t: t, url: "http://" + addr, proc: p}
			s.waitReady(30 * time.Second)
			return p
		}
		url := "http://" + addr + "/v1/github/webhook"
		send := func(d fakegithub.Delivery, sec string) (int, string) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			resp, err := fakegithub.Send(ctx, url, []byte(sec), d)
			require.NoError(t, err)
			var out struct {
				Outcome string `json:"outcome"`
				Code    string `json:"code"`
			}
			_ = json.Unmarshal(resp.Body, &out)
			return resp.Status, out.Outcome + out.Code
		}

		p := start(1)
		created := fakegithub.NewDelivery("installation", fake.InstallationPayload("created", 11))
		status, what := send(created, secret)
		require.Equal(t, http.StatusOK, status)
		require.Equal(t, "processed", what)
		status, what = send(fakegithub.NewDelivery("installation", fake.InstallationPayload("created", 12)), "not-the-secret")
		require.Equal(t, http.StatusUnauthorized, status)
		require.Equal(t, "webhook_signature_invalid", what)

		p.kill()
		p = start(2)
		status, what = send(created, secret)
		require.Equal(t, http.StatusOK, status)
		require.Equal(t, "duplicate", what, "a processed delivery survives a server kill")
		status, what = send(fakegithub.NewDelivery("installation", fake.InstallationPayload("created", 12)), secret)
		require.Equal(t, http.StatusOK, status)
		require.Equal(t, "processed", what)
		require.NoError(t, p.stop(t, 10*time.Second))
		require.NotContains(t, p.output(), secret, "the webhook secret is never logged")
		require.False(t, strings.Contains(p.output(), "PRIVATE KEY"))
	})
}

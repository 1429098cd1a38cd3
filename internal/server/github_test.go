package server_test

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/config"
	"github.com/jobplane/jobplane/internal/github"
	"github.com/jobplane/jobplane/internal/github/fakegithub"
	"github.com/jobplane/jobplane/internal/gitsync"
	"github.com/jobplane/jobplane/internal/openapi/openapitest"
	"github.com/jobplane/jobplane/internal/server"
)

const webhookSecret = "a webhook secret of some length"

func startServer(t *testing.T, gh config.GitHubApp) (*server.Server, error) {
	t.Helper()
	dir := t.TempDir()
	repo := filepath.Join(dir, "defs")
	_, err := gitsync.InitRepo(repo, "main", files("true"), "init")
	require.NoError(t, err)
	srv, err := server.Start(context.Background(), config.Server{Listen: "127.0.0.1:0", DataDir: filepath.Join(dir, "data"),
		Definitions: repo, Channels: map[string]string{"prod": "main"}, GitHub: gh}, server.Options{})
	if err == nil {
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = srv.Stop(ctx)
		})
	}
	return srv, err
}

func keyFile(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "app.pem")
	b := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(fakegithub.Key(t, 0))})
	require.NoError(t, os.WriteFile(p, b, 0o600))
	return p
}

func ping(t *testing.T, url string) int {
	t.Helper()
	body := []byte(`{"zen":"Half measures are as bad as nothing at all."}`)
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/github/webhook", bytes.NewReader(body))
	req.Header.Set("X-Hub-Signature-256", github.SignWebhook([]byte(webhookSecret), body))
	req.Header.Set("X-GitHub-Event", "ping")
	req.Header.Set("X-GitHub-Delivery", "0b7a2f2e-0000-4000-8000-000000000001")
	resp, err := openapitest.Client(t, nil).Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	return resp.StatusCode
}

func TestServerGitHubWiring(t *testing.T) {
	t.Parallel()
	srv, err := startServer(t, config.GitHubApp{AppID: 1, PrivateKeyFile: keyFile(t), WebhookSecret: webhookSecret})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, ping(t, srv.URL()))

	// Without the App the route does not exist.
	plain, err := startServer(t, config.GitHubApp{})
	require.NoError(t, err)
	require.Equal(t, http.StatusNotFound, ping(t, plain.URL()))
}

func TestServerGitHubConfigErrors(t *testing.T) {
	t.Parallel()
	key := keyFile(t)
	notKey := filepath.Join(t.TempDir(), "not.pem")
	require.NoError(t, os.WriteFile(notKey, []byte("hello"), 0o600))
	cases := map[string]struct {
		cfg   config.GitHubApp
		field string
	}{
		"no app id":          {config.GitHubApp{PrivateKeyFile: key, WebhookSecret: webhookSecret}, "--github-app-id"},
		"no key":             {config.GitHubApp{AppID: 1, WebhookSecret: webhookSecret}, "--github-private-key"},
		"missing key file":   {config.GitHubApp{AppID: 1, PrivateKeyFile: key + ".gone", WebhookSecret: webhookSecret}, "--github-private-key"},
		"not a key":          {config.GitHubApp{AppID: 1, PrivateKeyFile: notKey, WebhookSecret: webhookSecret}, "--github-private-key"},
		"no secret":          {config.GitHubApp{AppID: 1, PrivateKeyFile: key}, "JOBPLANE_GITHUB_WEBHOOK_SECRET"},
		"short secret":       {config.GitHubApp{AppID: 1, PrivateKeyFile: key, WebhookSecret: "short"}, "JOBPLANE_GITHUB_WEBHOOK_SECRET"},
		"previous, no until": {config.GitHubApp{AppID: 1, PrivateKeyFile: key, WebhookSecret: webhookSecret, PreviousWebhookSecret: webhookSecret + "0"}, "JOBPLANE_GITHUB_WEBHOOK_SECRET_PREVIOUS_UNTIL"},
		"bad until":          {config.GitHubApp{AppID: 1, PrivateKeyFile: key, WebhookSecret: webhookSecret, PreviousWebhookSecret: webhookSecret + "0", PreviousUntil: "tomorrow"}, "JOBPLANE_GITHUB_WEBHOOK_SECRET_PREVIOUS_UNTIL"},
		"until, no previous": {config.GitHubApp{AppID: 1, PrivateKeyFile: key, WebhookSecret: webhookSecret, PreviousUntil: "2026-12-01T00:00:00Z"}, "JOBPLANE_GITHUB_WEBHOOK_SECRET_PREVIOUS"},
		"bad api":            {config.GitHubApp{AppID: 1, PrivateKeyFile: key, WebhookSecret: webhookSecret, API: "ftp://x"}, "--github-api"},
	}
	for name, c := range cases {
		cfg := c.cfg
		err := cfg.Validate()
		if err == nil {
			_, err = startServer(t, c.cfg)
		}
		var fe *config.FieldError
		require.True(t, errors.As(err, &fe), "%s: %v", name, err)
		require.Equal(t, c.field, fe.Field, name)
	}
}

package server

import (
	"context"
	"log/slog"
	"time"

	"github.com/jobplane/jobplane/internal/api"
	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/config"
	"github.com/jobplane/jobplane/internal/control"
	"github.com/jobplane/jobplane/internal/github"
	"github.com/jobplane/jobplane/internal/store"
)

// gitHubWiring is what the GitHub App configuration turns into; every
// field is nil when the App is not configured.
type gitHubWiring struct {
	app     *github.App
	webhook *api.GitHubWebhook
	clock   clock.Clock
}

// openGitHub validates the App's configuration and loads its key, so that
// a bad key file stops the server at start rather than at the first event.
func openGitHub(cfg *config.GitHubApp, clk clock.Clock, log *slog.Logger) (*gitHubWiring, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if !cfg.Enabled() {
		return &gitHubWiring{}, nil
	}
	pemBytes, err := cfg.ReadPrivateKey()
	if err != nil {
		return nil, err
	}
	key, err := github.ParsePrivateKey(pemBytes)
	if err != nil {
		return nil, &config.FieldError{Field: "--github-private-key", Message: err.Error()}
	}
	app, err := github.New(github.Config{AppID: cfg.AppID, PrivateKey: key, BaseURL: cfg.API, Clock: clk, Logger: log})
	if err != nil {
		return nil, err
	}
	until, err := cfg.PreviousDeadline()
	if err != nil {
		return nil, err
	}
	secrets := github.WebhookSecrets{Current: []byte(cfg.WebhookSecret), PreviousUntil: until}
	if cfg.PreviousWebhookSecret != "" {
		secrets.Previous = []byte(cfg.PreviousWebhookSecret)
	}
	if err := secrets.Validate(); err != nil {
		return nil, err
	}
	return &gitHubWiring{app: app, webhook: &api.GitHubWebhook{Secrets: secrets, Clock: clk}, clock: clk}, nil
}

// runs configures pull-request runs; nil when the App is not configured.
func (gh *gitHubWiring) runs(st store.Store, channel string, log *slog.Logger) *control.GitHubRuns {
	if gh.app == nil {
		return nil
	}
	if channel == "" {
		channel = control.DefaultGitHubChannel
	}
	return &control.GitHubRuns{Channel: channel, Catalogs: newGitHubCatalogs(gh.app, st, channel, gh.clock, log),
		Sources: &githubSources{app: gh.app}}
}

// startGitHub starts the GitHub background work.
func (s *Server) startGitHub(ctx context.Context, gh *gitHubWiring) {
	if gh.app == nil {
		return
	}
	s.loop(ctx, "github check runs", time.Second, func(ctx context.Context) error {
		_, err := s.svc.DispatchGitHubChecks(ctx, gh.app, 50)
		return err
	})
	s.loop(ctx, "github delivery purge", time.Hour, func(ctx context.Context) error {
		_, err := s.svc.PurgeGitHubDeliveries(ctx)
		return err
	})
}

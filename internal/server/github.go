package server

import (
	"context"
	"log/slog"
	"time"

	"github.com/jobplane/jobplane/internal/actionsoidc"
	"github.com/jobplane/jobplane/internal/api"
	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/config"
	"github.com/jobplane/jobplane/internal/control"
	"github.com/jobplane/jobplane/internal/github"
	"github.com/jobplane/jobplane/internal/githubapp"
	"github.com/jobplane/jobplane/internal/githubapp/actions"
	"github.com/jobplane/jobplane/internal/store"
)

// gitHubWiring is what the GitHub App configuration turns into; every
// field is nil when the App is not configured.
type gitHubWiring struct {
	app     *github.App
	webhook *api.GitHubWebhook
	clock   clock.Clock
	oidc    *actionsoidc.Verifier
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
	oidc, err := actionsoidc.New(actionsoidc.Config{Issuer: cfg.OIDCIssuer, Clock: clk})
	if err != nil {
		return nil, &config.FieldError{Field: "--github-oidc-issuer", Message: err.Error()}
	}
	return &gitHubWiring{app: app, webhook: &api.GitHubWebhook{Secrets: secrets, Clock: clk}, clock: clk, oidc: oidc}, nil
}

// actions builds the GitHub Actions compatibility mode, off when the App
// is not configured; access re-checks an installation's repositories.
func (gh *gitHubWiring) actions(st store.Store, access actions.Access, clk clock.Clock, log *slog.Logger) (*actions.Service, error) {
	cfg := actions.Config{Store: st, Clock: clk, Logger: log, Access: access}
	if gh.app != nil {
		cfg.Verifier, cfg.App = gh.oidc, actions.Dispatcher{App: gh.app}
	}
	return actions.New(cfg)
}

// service builds the GitHub App's service. It is built whether or not the
// App is configured: installation tenants recorded while it was keep their
// rules (suspended ones refused, their definitions on the GitHub channel),
// and the operator administers them, without it.
func (gh *gitHubWiring) service(st store.Store, adm githubapp.Admin, defs control.Definitions, channel string, clk clock.Clock, log *slog.Logger) (*githubapp.Service, error) {
	cfg := githubapp.Config{Store: st, Clock: clk, Logger: log, Definitions: defs, Admin: adm}
	if gh.app != nil {
		if channel == "" {
			channel = githubapp.DefaultChannel
		}
		cfg.Channel = channel
		cfg.Catalogs = newGitHubCatalogs(gh.app, st, channel, gh.clock, log)
		cfg.Sources = &githubSources{app: gh.app}
		cfg.Access = githubAccess{app: gh.app}
	}
	return githubapp.New(cfg)
}

// githubAccess asks GitHub whether an installation can access a
// repository, with a token narrowed to it (metadata: read): GitHub refuses
// the token, or the read, for a repository the installation cannot access.
type githubAccess struct{ app *github.App }

func (g githubAccess) RepositoryID(ctx context.Context, installation int64, repo string) (int64, error) {
	info, err := g.app.Repository(ctx, installation, repo)
	switch {
	case err == nil:
		return info.ID, nil
	case github.Retryable(err):
		return 0, err
	}
	return 0, nil
}

// RepoAccess is the githubapp.RepoAccess of app (for tests).
func RepoAccess(app *github.App) githubapp.RepoAccess { return githubAccess{app: app} }

// startGitHub starts the GitHub background work.
func (s *Server) startGitHub(ctx context.Context, gh *gitHubWiring, app *githubapp.Service, act *actions.Service) {
	if gh.app == nil {
		return
	}
	s.loop(ctx, "github check runs", time.Second, func(ctx context.Context) error {
		_, err := app.DispatchChecks(ctx, gh.app, 50)
		return err
	})
	s.loop(ctx, "github actions dispatch", time.Second, func(ctx context.Context) error {
		_, err := act.Dispatch(ctx)
		return err
	})
	s.loop(ctx, "github delivery purge", time.Hour, func(ctx context.Context) error {
		_, err := app.PurgeDeliveries(ctx)
		return err
	})
}

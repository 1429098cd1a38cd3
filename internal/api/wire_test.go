package api_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/control"
	"github.com/jobplane/jobplane/internal/githubapp"
	"github.com/jobplane/jobplane/internal/githubapp/actions"
)

// wire builds a run service and the GitHub App's service plugged into it,
// as internal/server does.
func wire(t *testing.T, cfg control.Config) (*control.Service, *githubapp.Service) {
	t.Helper()
	gh, err := githubapp.New(githubapp.Config{Store: cfg.Store, Clock: cfg.Clock, Definitions: cfg.Definitions})
	require.NoError(t, err)
	cfg.Tenants = gh
	svc, err := control.New(cfg)
	require.NoError(t, err)
	gh.Attach(svc)
	return svc, gh
}

// wireActions is wire with the GitHub Actions mode plugged in as well;
// act's store and clock are cfg's.
func wireActions(t *testing.T, cfg control.Config, act actions.Config) (*control.Service, *githubapp.Service, *actions.Service) {
	t.Helper()
	gh, err := githubapp.New(githubapp.Config{Store: cfg.Store, Clock: cfg.Clock, Definitions: cfg.Definitions})
	require.NoError(t, err)
	act.Store, act.Clock, act.Access = cfg.Store, cfg.Clock, gh
	mode, err := actions.New(act)
	require.NoError(t, err)
	cfg.Tenants, cfg.Actions = gh, mode
	svc, err := control.New(cfg)
	require.NoError(t, err)
	gh.Attach(svc)
	mode.Attach(svc)
	return svc, gh, mode
}

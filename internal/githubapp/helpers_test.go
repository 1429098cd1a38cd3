package githubapp_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/control"
	"github.com/jobplane/jobplane/internal/githubapp"
	"github.com/jobplane/jobplane/internal/githubapp/actions"
	"github.com/jobplane/jobplane/internal/schedule"
)

// wire builds a run service and the GitHub App's service plugged into
// it, as internal/server does; gh's store, clock and definitions are
// cfg's.
// scheduler is the schedule service over a run service and its App, as
// the server builds it.
func scheduler(cfg control.Config, svc *control.Service, gh *githubapp.Service) *schedule.Service {
	return schedule.New(schedule.Config{Store: cfg.Store, Clock: cfg.Clock, Runs: svc, Definitions: cfg.Definitions, Tenants: gh})
}

func wire(t testing.TB, cfg control.Config, gh githubapp.Config) (*control.Service, *githubapp.Service) {
	t.Helper()
	gh.Store, gh.Clock, gh.Definitions = cfg.Store, cfg.Clock, cfg.Definitions
	app, err := githubapp.New(gh)
	require.NoError(t, err)
	cfg.Tenants = app
	svc, err := control.New(cfg)
	require.NoError(t, err)
	app.Attach(svc)
	return svc, app
}

// wireActions is wire with the GitHub Actions mode plugged in as
// internal/server plugs it; act's store, clock and access are cfg's and
// the GitHub App's.
func wireActions(t testing.TB, cfg control.Config, gh githubapp.Config, act actions.Config) (*control.Service, *githubapp.Service, *actions.Service) {
	t.Helper()
	gh.Store, gh.Clock, gh.Definitions = cfg.Store, cfg.Clock, cfg.Definitions
	app, err := githubapp.New(gh)
	require.NoError(t, err)
	act.Store, act.Clock, act.Access = cfg.Store, cfg.Clock, app
	mode, err := actions.New(act)
	require.NoError(t, err)
	cfg.Tenants, cfg.Actions = app, mode
	svc, err := control.New(cfg)
	require.NoError(t, err)
	app.Attach(svc)
	mode.Attach(svc)
	return svc, app, mode
}

package server

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/control"
	"github.com/jobplane/jobplane/internal/github"
	"github.com/jobplane/jobplane/internal/github/fakegithub"
	"github.com/jobplane/jobplane/internal/githubapp"
	"github.com/jobplane/jobplane/internal/principal"
	"github.com/jobplane/jobplane/internal/schedule"
	"github.com/jobplane/jobplane/internal/store"
	"github.com/jobplane/jobplane/internal/store/testdb"
)

const tenantJob = `name: lint
run:
  command: ["true"]
on:
  pull_request:
    types: [opened]
`

func TestTenantDefinitionsFromDotJobplane(t *testing.T) {
	t.Parallel()
	st := testdb.SQLite(t)
	fc := clock.NewFake(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))
	key := fakegithub.Key(t, 0)
	f := fakegithub.New(t, fakegithub.Options{AppID: 5, PublicKey: &key.PublicKey, Clock: fc})
	perms := github.Permissions{"metadata": "read", "contents": "read", "checks": "write"}
	f.AddInstallation(1, "acme", perms)
	f.AddInstallation(2, "globex", perms)
	defsDir, sha1 := fakegithub.InitRepo(t, map[string]string{"jobs/lint.yaml": tenantJob, "groups.yaml": "groups: {}\n",
		"policies/p.yaml": "rules:\n  - id: gh\n    jobs: [lint]\n    users: [github]\n", "README.md": "not a definition"})
	f.AddRepo(1, ".jobplane", defsDir)
	appDir, _ := fakegithub.InitRepo(t, map[string]string{"x": "1"})
	f.AddRepo(1, "app", appDir)
	svcDir, _ := fakegithub.InitRepo(t, map[string]string{"y": "2"})
	f.AddRepo(2, "svc", svcDir)
	app, err := github.New(github.Config{AppID: 5, PrivateKey: key, BaseURL: f.URL, Clock: fc})
	require.NoError(t, err)
	svc, err := githubapp.New(githubapp.Config{Store: st, Clock: fc})
	require.NoError(t, err)
	ctx := context.Background()
	for _, inst := range []int64{1, 2} {
		d := fakegithub.NewDelivery("installation", f.InstallationPayload("created", inst))
		_, err := svc.HandleDelivery(ctx, githubapp.Delivery{ID: d.GUID, Event: d.Event, Body: d.Body})
		require.NoError(t, err)
	}
	inst := func(id int64) *store.GitHubInstallation {
		in, err := st.GitHubInstallationGet(ctx, id)
		require.NoError(t, err)
		return in
	}
	gc := newGitHubCatalogs(app, st, "prod", fc, slog.New(slog.DiscardHandler))

	cat, err := gc.TenantCatalog(ctx, inst(1))
	require.NoError(t, err)
	require.NotNil(t, cat)
	require.Equal(t, sha1, cat.Commit())
	require.Equal(t, []string{"lint"}, cat.(githubapp.PullRequestCatalog).PullRequestJobs("opened", false))
	_, ok := cat.Job("lint")
	require.True(t, ok)

	cat2, err := gc.TenantCatalog(ctx, inst(2))
	require.NoError(t, err)
	require.Nil(t, cat2, "without a .jobplane repository the server's definitions apply")

	// A push to .jobplane applies to the next use, without a webhook.
	sha2 := fakegithub.Commit(t, defsDir, map[string]string{"jobs/fmt.yaml": strings.ReplaceAll(tenantJob, "lint", "fmt")})
	cat, err = gc.TenantCatalog(ctx, inst(1))
	require.NoError(t, err)
	require.Equal(t, sha2, cat.Commit())
	require.Equal(t, []string{"fmt", "lint"}, cat.(githubapp.PullRequestCatalog).PullRequestJobs("opened", false))

	// A head that does not validate keeps the last good commit.
	fakegithub.Commit(t, defsDir, map[string]string{"jobs/fmt.yaml": "name: fmt\n"})
	cat, err = gc.TenantCatalog(ctx, inst(1))
	require.NoError(t, err)
	require.Equal(t, sha2, cat.Commit())

	// Every token was narrowed to the .jobplane repository and one
	// read permission; no request of installation 1 touched another
	// repository, none of installation 2 touched acme's.
	tokens := 0
	for _, r := range f.Requests() {
		if r.Auth == "app" && strings.HasSuffix(r.Path, "/access_tokens") {
			tokens++
			require.Equal(t, []string{".jobplane"}, r.TokenRepositories, "%+v", r)
			require.Len(t, r.TokenPermissions, 1, "%+v", r)
			for _, lvl := range r.TokenPermissions {
				require.Equal(t, "read", lvl)
			}
		}
		if r.Auth == "installation" {
			require.Equal(t, int64(1), r.Installation)
			require.True(t, r.Path == "/repos/acme/.jobplane" || strings.HasPrefix(r.Path, "/repos/acme/.jobplane/"), r.Path)
		}
	}
	require.Positive(t, tokens)

	// The scheduler's reads: a head read less than a minute ago is not
	// read again; an older one is.
	n := len(f.Requests())
	for range 5 {
		cat, err = gc.TenantCatalogWithin(ctx, inst(1), time.Minute)
		require.NoError(t, err)
		require.Equal(t, sha2, cat.Commit())
	}
	require.Len(t, f.Requests(), n, "no API call within the minute")
	cat2, err = gc.TenantCatalogWithin(ctx, inst(2), time.Minute)
	require.NoError(t, err)
	require.Nil(t, cat2)
	fc.Advance(time.Minute)
	sha3 := fakegithub.Commit(t, defsDir, map[string]string{"jobs/fmt.yaml": strings.ReplaceAll(tenantJob, "lint", "fmt")})
	cat, err = gc.TenantCatalogWithin(ctx, inst(1), time.Minute)
	require.NoError(t, err)
	require.Equal(t, sha3, cat.Commit(), "a minute later the head is read again")
	require.Greater(t, len(f.Requests()), n)
}

// TestTenantSchedulesFromDotJobplane: the scheduler fires a .jobplane
// repository's schedule in its installation's tenant, reading the head
// from the fake GitHub at most once a minute; a push changing the
// schedule reaches it; losing .jobplane forgets it.
func TestTenantSchedulesFromDotJobplane(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		ctx := context.Background()
		fc := clock.NewFake(time.Date(2026, 11, 29, 12, 0, 30, 0, time.UTC))
		key := fakegithub.Key(t, 0)
		f := fakegithub.New(t, fakegithub.Options{AppID: 5, PublicKey: &key.PublicKey, Clock: fc})
		f.AddInstallation(1, "acme", github.Permissions{"metadata": "read", "contents": "read", "checks": "write"})
		job := func(cron string) string {
			return "name: report\nrun:\n  command: [\"true\"]\nschedule: {cron: \"" + cron + "\", channel: prod}\n"
		}
		defsDir, _ := fakegithub.InitRepo(t, map[string]string{"jobs/report.yaml": job("*/5 * * * *"), "groups.yaml": "groups: {}\n",
			"policies/p.yaml": "rules:\n  - id: s\n    jobs: [report]\n    users: [scheduler]\n"})
		f.AddRepo(1, ".jobplane", defsDir)
		app, err := github.New(github.Config{AppID: 5, PrivateKey: key, BaseURL: f.URL, Clock: fc})
		require.NoError(t, err)
		gc := newGitHubCatalogs(app, st, "prod", fc, slog.New(slog.DiscardHandler))
		gh, err := githubapp.New(githubapp.Config{Store: st, Clock: fc, Channel: "prod", Catalogs: gc})
		require.NoError(t, err)
		svc, err := control.New(control.Config{Store: st, Clock: fc, Tenants: gh})
		require.NoError(t, err)
		gh.Attach(svc)
		sched := schedule.New(schedule.Config{Store: st, Clock: fc, Runs: svc, Tenants: gh})
		deliver := func(d fakegithub.Delivery) {
			_, err := gh.HandleDelivery(ctx, githubapp.Delivery{ID: d.GUID, Event: d.Event, Body: d.Body})
			require.NoError(t, err)
		}
		deliver(fakegithub.NewDelivery("installation", f.InstallationPayload("created", 1)))
		in, err := st.GitHubInstallationGet(ctx, 1)
		require.NoError(t, err)
		fire := func() int {
			n, err := sched.Fire(ctx)
			require.NoError(t, err)
			return n
		}
		reads := func() int {
			n := 0
			for _, r := range f.Requests() {
				if r.Path == "/repos/acme/.jobplane" {
					n++
				}
			}
			return n
		}
		runs := func() []*control.RunView {
			v, _, err := svc.ListRuns(ctx, principal.Actor{TenantID: in.Tenant}, store.RunListParams{Limit: 100})
			require.NoError(t, err)
			return v
		}

		require.Equal(t, 0, fire())
		require.Equal(t, 1, reads())
		// Passes every 10 s for five minutes: one window fired, the head read
		// about once a minute, not thirty times.
		for range 30 {
			fc.Advance(10 * time.Second)
			fire()
		}
		require.Len(t, runs(), 1)
		require.Equal(t, "report", runs()[0].Run.Job)
		require.Equal(t, schedule.Principal, runs()[0].Run.Actor)
		require.LessOrEqual(t, reads(), 7)
		v, err := sched.List(ctx, principal.Actor{TenantID: in.Tenant})
		require.NoError(t, err)
		require.Len(t, v.Schedules, 1)
		require.Equal(t, "*/5 * * * *", v.Schedules[0].Cron)

		// A push changing the schedule is seen within a minute.
		fakegithub.Commit(t, defsDir, map[string]string{"jobs/report.yaml": job("0 * * * *")})
		fc.Advance(time.Minute)
		fire()
		v, err = sched.List(ctx, principal.Actor{TenantID: in.Tenant})
		require.NoError(t, err)
		require.Equal(t, "0 * * * *", v.Schedules[0].Cron)

		// Losing .jobplane forgets the tenant's schedules.
		deliver(fakegithub.NewDelivery("installation_repositories", f.InstallationRepositoriesPayload(1, nil, []string{".jobplane"})))
		fire()
		rows, err := st.ScheduleList(ctx, in.Tenant)
		require.NoError(t, err)
		require.Empty(t, rows)
	})
}

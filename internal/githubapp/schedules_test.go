package githubapp_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/catalogs"
	"github.com/jobplane/jobplane/internal/control"
	"github.com/jobplane/jobplane/internal/github/fakegithub"
	"github.com/jobplane/jobplane/internal/githubapp"
	"github.com/jobplane/jobplane/internal/gitsync"
	"github.com/jobplane/jobplane/internal/principal"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/schedule"
	"github.com/jobplane/jobplane/internal/server"
	"github.com/jobplane/jobplane/internal/store"
	"github.com/jobplane/jobplane/internal/store/testdb"
)

// openCatalog is the prod catalog of a definitions repository made of files.
func openCatalog(t *testing.T, files map[string]string) control.Catalog {
	t.Helper()
	repo := t.TempDir()
	_, err := gitsync.InitRepo(repo, "main", files, "definitions")
	require.NoError(t, err)
	defs, err := server.OpenDefinitions(repo, map[string]string{"prod": "main"})
	require.NoError(t, err)
	cat, err := defs.Resolve(context.Background(), "prod", "")
	require.NoError(t, err)
	return cat
}

func openDefs(t *testing.T, files map[string]string) control.Definitions {
	t.Helper()
	repo := t.TempDir()
	_, err := gitsync.InitRepo(repo, "main", files, "definitions")
	require.NoError(t, err)
	defs, err := server.OpenDefinitions(repo, map[string]string{"prod": "main"})
	require.NoError(t, err)
	return defs
}

// Installation 1's .jobplane schedules a job hourly; installation 2 has no
// .jobplane; the server's definitions schedule their own job in the
// default tenant.
// scheduleServerFiles are the server's definitions in tenantScheduleEnv.
var scheduleServerFiles = map[string]string{
	"jobs/nightly.yaml": "name: nightly\nrun:\n  command: [\"true\"]\nschedule: {cron: \"0 * * * *\", channel: prod}\n",
	"groups.yaml":       "groups: {}\n",
	"policies/p.yaml":   "rules:\n  - id: sched\n    jobs: [\"*\"]\n    users: [scheduler]\n",
}

func tenantScheduleEnv(t *testing.T, st store.Store) (e *prEnv, replicas []*schedule.Service) {
	t.Helper()
	own := openCatalog(t, map[string]string{
		"jobs/report.yaml": "name: report\nrun:\n  command: [\"true\"]\nschedule: {cron: \"0 * * * *\", channel: prod}\n",
		"jobs/other.yaml":  "name: other\nrun:\n  command: [\"true\"]\nschedule: {cron: \"0 * * * *\", channel: staging}\n",
		"groups.yaml":      "groups: {}\n",
		"policies/p.yaml":  "rules:\n  - id: sched\n    jobs: [report]\n    users: [scheduler]\n",
	})
	e = newPREnv(t, st)
	for i := range 2 {
		cfg := control.Config{Store: st, Clock: e.clock, Definitions: openDefs(t, scheduleServerFiles)}
		svc, gh := wire(t, cfg, githubapp.Config{Catalogs: stubCatalogs{1: own}})
		replicas = append(replicas, scheduler(cfg, svc, gh))
		if i == 0 {
			e.svc, e.gh = svc, gh
		}
	}
	return e, replicas
}

func (e *prEnv) runsOfTenant(tenant string) []*control.RunView {
	e.t.Helper()
	runs, _, err := e.svc.ListRuns(context.Background(), principal.Actor{TenantID: tenant}, store.RunListParams{Limit: 100})
	require.NoError(e.t, err)
	return runs
}

// pass runs one scheduler pass on every replica at once.
func pass(t *testing.T, replicas []*schedule.Service) int {
	t.Helper()
	var mu sync.Mutex
	var wg sync.WaitGroup
	total := 0
	for _, svc := range replicas {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, err := svc.Fire(context.Background())
			require.NoError(t, err)
			mu.Lock()
			total += n
			mu.Unlock()
		}()
	}
	wg.Wait()
	return total
}

func TestTenantSchedulesFireInTheirTenant(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		ctx := context.Background()
		e, replicas := tenantScheduleEnv(t, st)
		def, err := st.TenantEnsure(ctx, principal.DefaultTenant, nil)
		require.NoError(t, err)
		t1, t2 := e.tenant(1), e.tenant(2)

		require.Equal(t, 0, pass(t, replicas), "first sight never fires")
		// Each tenant sees its own next firings only.
		list := func(tenant string) []protocol.ScheduleView {
			v, err := replicas[0].List(ctx, principal.Actor{TenantID: tenant, Name: "someone"})
			require.NoError(t, err)
			return v.Schedules
		}
		mine := list(t1)
		require.Len(t, mine, 1, "the staging schedule has no catalog in a tenant served on prod only")
		require.Equal(t, "report", mine[0].Job)
		require.Equal(t, time.Date(2026, 11, 29, 13, 0, 0, 0, time.UTC), *mine[0].NextFireAt)
		require.Empty(t, list(t2), "no .jobplane: no schedules, the server's are not the tenant's")
		srv := list(def.ID)
		require.Len(t, srv, 1)
		require.Equal(t, "nightly", srv[0].Job)

		// The window: one run per tenant, job and window across replicas.
		e.clock.Advance(time.Hour + 5*time.Second)
		require.Equal(t, 2, pass(t, replicas), "report in tenant 1 and nightly in default")
		require.Equal(t, 0, pass(t, replicas))
		runs := e.runsOfTenant(t1)
		require.Len(t, runs, 1)
		r := runs[0].Run
		require.Equal(t, "report", r.Job)
		require.Equal(t, schedule.Principal, r.Actor)
		require.Equal(t, store.RunQueued, r.State, "the tenant's policy allows scheduler")
		require.Equal(t, "schedule", sourceMap(t, r)["kind"])
		require.Equal(t, schedule.IdempotencyKey("prod", "report", time.Date(2026, 11, 29, 13, 0, 0, 0, time.UTC)), r.IdempotencyKey)
		require.Empty(t, e.runsOfTenant(t2))
		defRuns := e.runsOfTenant(def.ID)
		require.Len(t, defRuns, 1)
		require.Equal(t, "nightly", defRuns[0].Run.Job)

		// Suspended: nothing fires; after the unsuspension the latest
		// missed window runs once (catch_up: latest).
		e.deliver(fakegithub.NewDelivery("installation", e.fake.InstallationPayload("suspend", 1)))
		e.clock.Advance(3 * time.Hour)
		pass(t, replicas)
		require.Len(t, e.runsOfTenant(t1), 1)
		require.Empty(t, list(t1), "a suspended tenant has no next firings")
		e.deliver(fakegithub.NewDelivery("installation", e.fake.InstallationPayload("unsuspend", 1)))
		pass(t, replicas)
		pass(t, replicas)
		runs = e.runsOfTenant(t1)
		require.Len(t, runs, 2)
		require.Equal(t, "report", runs[0].Run.Job)
		require.Equal(t, "2026-11-29T16:00:00Z", sourceMap(t, runs[0].Run)["window"])
	})
}

// A tenant's policy decides for its scheduled runs: without a rule for
// scheduler the window's run is kept as denied, in the tenant.
func TestTenantScheduleDeniedByTenantPolicy(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		own := openCatalog(t, map[string]string{
			"jobs/report.yaml": "name: report\nrun:\n  command: [\"true\"]\nschedule: {cron: \"*/5 * * * *\", channel: prod}\n",
			"groups.yaml":      "groups: {}\n",
			"policies/p.yaml":  "rules:\n  - id: humans\n    jobs: [report]\n    users: [alice]\n",
		})
		e := newPREnv(t, st)
		cfg := control.Config{Store: st, Clock: e.clock}
		svc, gh := wire(t, cfg, githubapp.Config{Catalogs: stubCatalogs{1: own}})
		e.svc, e.gh = svc, gh
		sched := scheduler(cfg, svc, gh)
		_, err := sched.Fire(context.Background())
		require.NoError(t, err)
		e.clock.Advance(5 * time.Minute)
		n, err := sched.Fire(context.Background())
		require.NoError(t, err)
		require.Equal(t, 1, n)
		runs := e.runs(1)
		require.Len(t, runs, 1)
		require.Equal(t, store.RunDenied, runs[0].Run.State)
	})
}

// The jobs and catalogs views of a tenant with .jobplane are its own
// definitions; another tenant and the default tenant see theirs.
func TestCatalogViewsPerTenant(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		ctx := context.Background()
		e, _ := tenantScheduleEnv(t, st)
		def, err := st.TenantEnsure(ctx, principal.DefaultTenant, nil)
		require.NoError(t, err)
		cats, err := catalogs.New(catalogs.Config{Store: st, Clock: e.clock, Definitions: openDefs(t, scheduleServerFiles), Tenants: e.gh, Runs: e.svc})
		require.NoError(t, err)
		names := func(tenant, channel string) ([]string, error) {
			v, err := cats.ListJobs(ctx, principal.Actor{TenantID: tenant, Name: "someone"}, channel, "")
			if err != nil {
				return nil, err
			}
			var out []string
			for _, j := range v.Jobs {
				out = append(out, j.Name)
			}
			return out, nil
		}
		got, err := names(e.tenant(1), "")
		require.NoError(t, err)
		require.Equal(t, []string{"other", "report"}, got)
		got, err = names(e.tenant(2), "prod")
		require.NoError(t, err)
		require.Equal(t, []string{"nightly"}, got, "without .jobplane: the server's")
		got, err = names(def.ID, "prod")
		require.NoError(t, err)
		require.Equal(t, []string{"nightly"}, got)
		_, err = names(e.tenant(1), "staging")
		require.ErrorIs(t, err, protocol.ErrUnknownChannel)

		_, err = cats.ShowJob(ctx, principal.Actor{TenantID: e.tenant(1)}, "prod", "", "nightly")
		require.ErrorIs(t, err, protocol.ErrUnknownJob, "the server's job is not the tenant's")
		_, err = cats.ShowJob(ctx, principal.Actor{TenantID: e.tenant(2)}, "prod", "", "report")
		require.ErrorIs(t, err, protocol.ErrUnknownJob, "another tenant's job is unknown")
		v, err := cats.ShowJob(ctx, principal.Actor{TenantID: e.tenant(1)}, "prod", "", "report")
		require.NoError(t, err)
		require.Equal(t, "report", v.Name)

		cv, err := cats.Catalogs(ctx, principal.Actor{TenantID: e.tenant(1)})
		require.NoError(t, err)
		require.Len(t, cv.Channels, 1)
		cv2, err := cats.Catalogs(ctx, principal.Actor{TenantID: e.tenant(2)})
		require.NoError(t, err)
		require.Len(t, cv2.Channels, 1)
		require.NotEqual(t, cv.Channels[0].ActiveCommit, cv2.Channels[0].ActiveCommit)
	})
}

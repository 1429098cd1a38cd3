package server_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/catalogs"
	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/control"
	"github.com/jobplane/jobplane/internal/gitsync"
	"github.com/jobplane/jobplane/internal/principal"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/server"
	"github.com/jobplane/jobplane/internal/store"
	"github.com/jobplane/jobplane/internal/store/testdb"
)

var t0 = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

const policy = `rules:
  - id: anyone
    jobs: ["*"]
    users: ["*"]
`

func files(command string) map[string]string {
	return map[string]string{
		"jobs/greet.yaml":   "name: greet\nowners: [ops]\nrunbook: runbooks/greet.md\nrun:\n  command: [" + command + "]\n",
		"runbooks/greet.md": "# Greet\n\nSee [the docs](https://example.com) and run **it**.\n",
		"groups.yaml":       "groups:\n  ops: {members: [olga]}\n",
		"policies/p.yaml":   policy,
	}
}

type env struct {
	repo  string
	st    store.Store
	svc   *control.Service
	cats  *catalogs.Service
	admin principal.Actor
}

func newEnv(t *testing.T, st store.Store, repo string, channels map[string]string) *env {
	t.Helper()
	defs, err := server.OpenDefinitionsWith(repo, gitsync.Options{Channels: channels})
	require.NoError(t, err)
	fc := clock.NewFake(t0)
	svc, err := control.New(control.Config{Store: st, Clock: fc, Definitions: defs})
	require.NoError(t, err)
	cats, err := catalogs.New(catalogs.Config{Store: st, Clock: fc, Definitions: defs, Runs: svc})
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, cats.LoadCatalogs(ctx))
	tn, err := st.TenantEnsure(ctx, "default", nil)
	require.NoError(t, err)
	return &env{repo: repo, st: st, svc: svc, cats: cats, admin: principal.Actor{TenantID: tn.ID, Name: "admin", Kind: "user", Admin: true}}
}

func TestCatalogActivationsPersistAndPin(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		ctx := context.Background()
		repo := t.TempDir()
		good, err := gitsync.InitRepo(repo, "main", files(`"true"`), "init", gitsync.WithTime(t0))
		require.NoError(t, err)
		e := newEnv(t, st, repo, map[string]string{"prod": "main"})
		require.NoError(t, e.cats.RefreshCatalogs(ctx))

		// A run requested now pins the good commit and its job definition.
		v, _, err := e.svc.RequestRun(ctx, e.admin, &protocol.RunRequest{Job: "greet", Channel: "prod"})
		require.NoError(t, err)
		require.Equal(t, good, v.Run.Commit)

		bad, err := gitsync.CommitFiles(repo, "main", map[string]string{"policies/p.yaml": "rules:\n  - id: r\n    jobs: [x]\n"}, "bad policy", gitsync.WithTime(t0.Add(time.Minute)))
		require.NoError(t, err)
		view, err := e.cats.SyncCatalogs(ctx, e.admin)
		require.NoError(t, err)
		require.Len(t, view.Channels, 1)
		ch := view.Channels[0]
		require.Equal(t, good, ch.ActiveCommit)
		require.NotNil(t, ch.ActivatedAt)
		require.Len(t, ch.Rejected, 1)
		require.Equal(t, bad, ch.Rejected[0].Commit)
		require.Equal(t, []protocol.CatalogError{{File: "policies/p.yaml", Line: 2, Column: 5, Message: "must name groups or users"}}, ch.Rejected[0].Errors)

		// A policy change (and a new command) after the request: the run keeps
		// its commit and the definition it was authorized with.
		changed, err := gitsync.CommitFiles(repo, "main", map[string]string{"policies/p.yaml": "rules:\n  - id: olga-only\n    jobs: [\"*\"]\n    users: [olga]\n",
			"jobs/greet.yaml": "name: greet\nrun:\n  command: [\"false\"]\n"}, "tighten", gitsync.WithTime(t0.Add(2*time.Minute)))
		require.NoError(t, err)
		require.NoError(t, e.cats.RefreshCatalogs(ctx))
		r, err := st.RunGetByID(ctx, v.Run.ID, false)
		require.NoError(t, err)
		require.Equal(t, good, r.Commit)
		var spec control.Spec
		require.NoError(t, json.Unmarshal(r.Spec, &spec))
		require.Equal(t, []string{"true"}, spec.Command, "the claim hands out the pinned definition")

		// Every activation and rejection is audited with commit and author.
		events, err := st.AuditList(ctx, &store.AuditListParams{Tenant: e.admin.TenantID, Limit: 100})
		require.NoError(t, err)
		var actions []string
		for _, ev := range events {
			if ev.Action == "catalog.activated" || ev.Action == "catalog.rejected" {
				actions = append(actions, ev.Action+" "+ev.Subject)
				var d struct{ Author, Commit string }
				require.NoError(t, json.Unmarshal(ev.Details, &d))
				require.Equal(t, "jobplane <jobplane@localhost>", d.Author)
				require.NotEmpty(t, d.Commit)
			}
		}
		require.Equal(t, []string{"catalog.activated prod@" + good, "catalog.rejected prod@" + bad, "catalog.activated prod@" + changed}, actions)

		// A new bad head, then a restart: the persisted active commit is served.
		_, err = gitsync.CommitFiles(repo, "main", map[string]string{"groups.yaml": "groups: [\n"}, "bad again", gitsync.WithTime(t0.Add(3*time.Minute)))
		require.NoError(t, err)
		restarted := newEnv(t, st, repo, map[string]string{"prod": "main"})
		jobs, err := restarted.cats.ListJobs(ctx, restarted.admin, "prod", "")
		require.NoError(t, err)
		require.Equal(t, changed, jobs.Commit)
		require.Len(t, jobs.Jobs, 1)
	})
}

func TestRestartServesPersistedCommitOverHistory(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		ctx := context.Background()
		repo := t.TempDir()
		first, err := gitsync.InitRepo(repo, "main", files(`"true"`), "init", gitsync.WithTime(t0))
		require.NoError(t, err)
		e := newEnv(t, st, repo, map[string]string{"prod": "main"})
		require.NoError(t, e.cats.RefreshCatalogs(ctx))
		// Two commits the first process never saw: a good one, then a bad head.
		_, err = gitsync.CommitFiles(repo, "main", map[string]string{"README.md": "x\n"}, "unseen", gitsync.WithTime(t0.Add(time.Minute)))
		require.NoError(t, err)
		_, err = gitsync.CommitFiles(repo, "main", map[string]string{"jobs/greet.yaml": "name: greet\n"}, "bad", gitsync.WithTime(t0.Add(2*time.Minute)))
		require.NoError(t, err)
		restarted := newEnv(t, st, repo, map[string]string{"prod": "main"})
		jobs, err := restarted.cats.ListJobs(ctx, restarted.admin, "prod", "")
		require.NoError(t, err)
		require.Equal(t, first, jobs.Commit, "the recorded active commit survives the restart")
	})
}

func TestPatternChannelRunsAndShowJob(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		ctx := context.Background()
		repo := t.TempDir()
		_, err := gitsync.InitRepo(repo, "main", files(`"true"`), "init", gitsync.WithTime(t0))
		require.NoError(t, err)
		feat, err := gitsync.CommitFiles(repo, "feature/a", map[string]string{"jobs/greet.yaml": "name: greet\nowners: [ops]\nrun:\n  command: [echo, a]\n"}, "a", gitsync.WithTime(t0.Add(time.Minute)))
		require.NoError(t, err)
		e := newEnv(t, st, repo, map[string]string{"prod": "main", "sandbox": "feature/*"})

		v, _, err := e.svc.RequestRun(ctx, e.admin, &protocol.RunRequest{Job: "greet", Channel: "sandbox", Ref: "feature/a"})
		require.NoError(t, err)
		require.Equal(t, feat, v.Run.Commit)
		require.Equal(t, "feature/a", v.Run.Ref)
		_, _, err = e.svc.RequestRun(ctx, e.admin, &protocol.RunRequest{Job: "greet", Channel: "sandbox", Ref: "main"})
		require.ErrorIs(t, err, protocol.ErrBadRequest)
		_, _, err = e.svc.RequestRun(ctx, e.admin, &protocol.RunRequest{Job: "greet", Channel: "prod", Ref: "feature/a"})
		require.ErrorIs(t, err, protocol.ErrBadRequest)
		// A ref of the pattern naming no branch is the client's error, and
		// says which ref.
		_, _, err = e.svc.RequestRun(ctx, e.admin, &protocol.RunRequest{Job: "greet", Channel: "sandbox", Ref: "feature/nope"})
		require.ErrorIs(t, err, protocol.ErrNotFound)
		require.NotErrorIs(t, err, protocol.ErrCatalogUnavailable)
		var fe *protocol.FieldError
		require.ErrorAs(t, err, &fe)
		require.Equal(t, "ref", fe.Field)
		require.Contains(t, err.Error(), `"feature/nope"`)

		require.NoError(t, e.cats.RefreshCatalogs(ctx))
		view, err := e.cats.Catalogs(ctx, e.admin)
		require.NoError(t, err)
		require.Len(t, view.Channels, 2)
		require.Equal(t, "sandbox", view.Channels[1].Channel)
		require.Equal(t, "feature/a", view.Channels[1].Branch)
		require.Equal(t, feat, view.Channels[1].ActiveCommit)

		job, err := e.cats.ShowJob(ctx, e.admin, "prod", "", "greet")
		require.NoError(t, err)
		require.Equal(t, []string{"ops"}, job.Owners)
		require.Equal(t, "Greet\n=====\n\nSee the docs (https://example.com) and run it.\n", job.RunbookText)
		require.Equal(t, []protocol.PrincipalAccess{{Principal: "*", Rule: "anyone"}, {Principal: "olga", Rule: "anyone"}}, job.MayRun)
		_, err = e.cats.ShowJob(ctx, e.admin, "prod", "", "nope")
		require.ErrorIs(t, err, protocol.ErrUnknownJob)
		_, err = e.cats.ListJobs(ctx, e.admin, "", "")
		require.ErrorIs(t, err, protocol.ErrBadRequest, "two channels: the channel is required")
		_, err = e.cats.SyncCatalogs(ctx, principal.Actor{TenantID: e.admin.TenantID, Name: "olga"})
		require.ErrorIs(t, err, protocol.ErrForbidden)
	})
}

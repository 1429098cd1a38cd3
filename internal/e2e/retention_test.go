package e2e

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// TestRetentionOneReplicaSweeps: two server processes on one PostgreSQL
// database, started with retention periods: one of them holds the sweep's
// lease and sweeps, the other skips, and both keep serving the run and its
// logs, which are not due yet; `jobplane admin prune --dry-run` says so.
func TestRetentionOneReplicaSweeps(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(string) []job { return []job{{name: "hello", script: `echo "kept for an hour"`}} })
	dsn := backends[1].dsn(t)
	env := []string{"JOBPLANE_SECRET_KEY=" + randHex(32)}
	args := []string{"--retention-logs", "1h", "--retention-artifacts", "2d"}
	a := startServerWith(t, dsn, e, args, env)
	b := startServerWith(t, dsn, e, args, env)
	startWorker(t, b, "worker-b", t.TempDir(), b.registrationToken())

	run := b.createRun("hello")
	r := b.waitState(run.ID, 90*time.Second, "succeeded", "failed", "cancelled", "timed_out")
	require.Equal(t, "succeeded", r.State, runSummary(r))

	ra, err := a.admin.Prune(a.ctx())
	require.NoError(t, err)
	rb, err := b.admin.Prune(b.ctx())
	require.NoError(t, err)
	require.NotEqual(t, ra.Skipped, rb.Skipped, "exactly one replica holds the lease: %+v %+v", ra, rb)
	require.Zero(t, ra.LogLines+rb.LogLines, "nothing is due within the hour")

	for _, s := range []*server{a, b} {
		out, errOut, code := runCLI(t, s, "admin", "prune", "--dry-run")
		require.Equal(t, 0, code, errOut)
		require.Contains(t, out, "nothing is due for deletion")
		lines := s.allLogs(run.ID)
		var texts []string
		for _, l := range lines {
			texts = append(texts, l.Text)
		}
		require.Contains(t, texts, "kept for an hour", "served by %s", s.url)
	}
	out, errOut, code := runCLI(t, a, "server", "--definitions", e.defs, "--retention-logs", "10m")
	require.Equal(t, 1, code, out)
	require.Contains(t, errOut, "--retention-logs")
	require.Contains(t, errOut, "between 1h and 3650d")
}

// TestRetentionPrunesWhileTheOtherServes: two replicas on one PostgreSQL
// database; a run whose logs and artifacts are due (its due times set back
// in the database, as an hour passing would) is pruned by the replica
// holding the sweep's lease while the other keeps serving it: the run
// record stays, its logs are empty through both, its artifact is no longer
// listed, and `jobplane audit verify` passes through both, with the
// pruning events in the chain.
func TestRetentionPrunesWhileTheOtherServes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(string) []job { return []job{artifactJob("small", false)} })
	dsn := backends[1].dsn(t)
	env := []string{"JOBPLANE_SECRET_KEY=" + randHex(32)}
	args := []string{"--retention-logs", "1h", "--retention-artifacts", "1h"}
	a := startServerWith(t, dsn, e, args, env)
	b := startServerWith(t, dsn, e, args, env)
	b.adminToken = a.adminToken
	b.admin.Token = a.adminToken
	startWorker(t, a, "worker-a", t.TempDir(), a.registrationToken())

	run := a.createRun("small")
	r := a.waitState(run.ID, 90*time.Second, "succeeded", "failed", "cancelled", "timed_out")
	require.Equal(t, "succeeded", r.State, runSummary(r))
	require.NotEmpty(t, b.allLogs(run.ID))
	list, err := b.admin.ListArtifacts(b.ctx(), run.ID)
	require.NoError(t, err)
	require.Len(t, list.Artifacts, 1)

	// As the database's superuser (past row-level security): wait for a
	// sweep to fix the run's periods, then make them due.
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	u.User = url.User("postgres")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, u.String())
	require.NoError(t, err)
	defer conn.Close(context.Background())
	eventually(t, 60*time.Second, "the run's retention periods fixed", func() (bool, string) {
		for _, s := range []*server{a, b} {
			_, err := s.admin.Prune(s.ctx())
			require.NoError(t, err)
		}
		var n int
		require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM run_retention WHERE run_id = $1`, run.ID).Scan(&n))
		return n == 1, "not stamped"
	})
	tag, err := conn.Exec(ctx, `UPDATE run_retention SET logs_due_at = now() - interval '1 minute',
		artifacts_due_at = now() - interval '1 minute' WHERE run_id = $1`, run.ID)
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected())

	out, errOut, code := runCLI(t, b, "admin", "prune", "--dry-run")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, run.ID, "the dry run lists what is due")

	var pruner *server
	eventually(t, 60*time.Second, "one replica prunes the run", func() (bool, string) {
		var seen []string
		for _, s := range []*server{a, b} {
			rep, err := s.admin.Prune(s.ctx())
			require.NoError(t, err)
			seen = append(seen, fmt.Sprintf("%+v", *rep))
			if !rep.Skipped && rep.LogRuns == 1 && rep.ArtifactRuns == 1 {
				pruner = s
			}
			// The other replica serves the run all along.
			got, err := s.admin.GetRun(s.ctx(), run.ID)
			require.NoError(t, err)
			require.Equal(t, "succeeded", got.State)
		}
		if pruner == nil {
			// The replicas' own sweeps may have pruned it already.
			var logs, arts *time.Time
			require.NoError(t, conn.QueryRow(ctx, `SELECT logs_pruned_at, artifacts_pruned_at FROM run_retention WHERE run_id = $1`, run.ID).Scan(&logs, &arts))
			if logs != nil && arts != nil {
				pruner = a
			}
		}
		return pruner != nil, strings.Join(seen, "; ")
	})
	for _, s := range []*server{a, b} {
		require.Empty(t, s.allLogs(run.ID), "no lines through %s", s.url)
		list, err := s.admin.ListArtifacts(s.ctx(), run.ID)
		require.NoError(t, err)
		require.Empty(t, list.Artifacts, "no artifact listed through %s", s.url)
		out, errOut, code := runCLI(t, s, "audit", "--run", run.ID)
		require.Equal(t, 0, code, errOut)
		require.Contains(t, out, "run.logs_pruned")
		require.Contains(t, out, "run.artifacts_pruned")
		eventually(t, 20*time.Second, "the audit chain verifies through "+s.url, func() (bool, string) {
			out, errOut, code := runCLI(t, s, "audit", "verify")
			return code == 0 && strings.Contains(out, " 0 waiting"), out + errOut
		})
	}
}

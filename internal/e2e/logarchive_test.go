package e2e

import (
	"context"
	"errors"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/apiclient"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/s3test"
)

// TestLogsMovedToS3TwoReplicas: two replicas on one PostgreSQL database
// and one bucket, started with --archive-logs-after 1s. The sweep of the
// replica holding the lease moves an ended run's logs into the bucket;
// both replicas serve them as before, with the same ids; with the S3
// server stopped, reading them is 503 unavailable, and after its restart
// they are served again.
func TestLogsMovedToS3TwoReplicas(t *testing.T) {
	t.Parallel()
	srv := s3test.Start(t)
	e := newEnv(t, func(string) []job {
		return []job{{name: "chatty", script: `i=0; while [ $i -lt 2500 ]; do i=$((i+1)); echo "line $i"; done`}}
	})
	bucket := srv.Bucket(t)
	dsn := backends[1].dsn(t)
	env := []string{"JOBPLANE_SECRET_KEY=" + randHex(32), "AWS_ACCESS_KEY_ID=" + srv.AccessKey, "AWS_SECRET_ACCESS_KEY=" + srv.SecretKey}
	args := []string{"--artifacts", "s3://" + bucket + "/jobplane?endpoint=" + srv.Endpoint, "--archive-logs-after", "1s"}
	a := startServerWith(t, dsn, e, args, env)
	b := startServerWith(t, dsn, e, args, env)
	b.adminToken = a.adminToken
	b.admin.Token = a.adminToken
	startWorker(t, a, "worker-a", t.TempDir(), a.registrationToken())

	run := a.createRun("chatty")
	r := a.waitState(run.ID, 90*time.Second, "succeeded", "failed", "cancelled", "timed_out")
	require.Equal(t, "succeeded", r.State, runSummary(r))
	before := a.allLogs(run.ID)
	n := 0
	for _, l := range before {
		if strings.HasPrefix(l.Text, "line ") {
			n++
		}
	}
	require.Equal(t, 2500, n)

	// Sweep on both until the run's logs are in the bucket (a replica's
	// own sweep may get there first).
	moved := func() bool {
		out, err := srv.Client().ListObjectsV2(context.Background(), &s3.ListObjectsV2Input{Bucket: aws.String(bucket), Prefix: aws.String("jobplane/.logs/")})
		require.NoError(t, err)
		for _, o := range out.Contents {
			if strings.Contains(aws.ToString(o.Key), "/"+run.ID+"/") {
				return true
			}
		}
		return false
	}
	// A round of the lease holder that finds nothing to move once the
	// object is there has seen the move finished (a replica's rounds run
	// one at a time).
	var reps []protocol.PruneReport
	deadline := time.Now().Add(90 * time.Second)
	for done := false; !done; {
		require.True(t, time.Now().Before(deadline), "the logs were not moved: %+v", reps)
		for _, s := range []*server{a, b} {
			rep, err := s.admin.Prune(s.ctx())
			require.NoError(t, err)
			reps = append(reps, *rep)
			done = done || (!rep.Skipped && rep.LogRunsMoved == 0 && moved())
		}
		time.Sleep(time.Second)
	}
	for _, s := range []*server{b, a} {
		require.Equal(t, before, s.allLogs(run.ID), "served by %s from the bucket", s.url)
	}
	page, err := b.admin.Logs(b.ctx(), run.ID, before[1000].ID)
	require.NoError(t, err)
	require.Equal(t, before[1001:1001+len(page.Lines)], page.Lines, "a cursor from before the move")

	srv.Stop()
	_, err = b.admin.Logs(b.ctx(), run.ID, 0)
	var pe *apiclient.APIError
	require.True(t, errors.As(err, &pe) && pe.Status == http.StatusServiceUnavailable && pe.Problem.Code == protocol.CodeUnavailable,
		"logs while the store is down: %v", err)
	got, err := a.admin.GetRun(a.ctx(), run.ID)
	require.NoError(t, err)
	require.Equal(t, "succeeded", got.State, "the run is not lost")
	srv.Restart(t)
	require.Equal(t, before, b.allLogs(run.ID))
}

// TestLogsMovedFilesystem: with the filesystem store, an ended run's logs
// are listed by `admin prune --dry-run` as moving, then move into
// DATA-DIR/artifacts/.logs and are served as before, on SQLite
// and on PostgreSQL (as the app role, under row-level security).
func TestLogsMovedFilesystem(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, be backend) {
		e := newEnv(t, func(string) []job {
			return []job{{name: "chatty", script: `i=0; while [ $i -lt 1500 ]; do i=$((i+1)); echo "line $i"; done`}}
		})
		s := startServerWith(t, be.dsn(t), e, []string{"--archive-logs-after", "1s"}, []string{"JOBPLANE_SECRET_KEY=" + randHex(32)})
		startWorker(t, s, "worker", t.TempDir(), s.registrationToken())
		run := s.createRun("chatty")
		r := s.waitState(run.ID, 90*time.Second, "succeeded", "failed", "cancelled", "timed_out")
		require.Equal(t, "succeeded", r.State, runSummary(r))
		before := s.allLogs(run.ID)
		require.Greater(t, len(before), 1500)
		// A dry run lists the move first (the server's own sweep is a
		// minute away): kept, not deleted.
		eventually(t, 20*time.Second, "the dry run lists the move", func() (bool, string) {
			out, errOut, code := runCLI(t, s, "admin", "prune", "--dry-run")
			require.Equal(t, 0, code, errOut)
			for _, line := range strings.Split(out, "\n") {
				if strings.Contains(line, run.ID) && strings.Contains(line, "logs move to the object store") {
					return true, ""
				}
			}
			return false, out
		})
		var reps []protocol.PruneReport
		deadline := time.Now().Add(60 * time.Second)
		for {
			matches, _ := filepath.Glob(filepath.Join(s.dataDir, "artifacts", ".logs", "*", run.ID, "*.jsonl.gz"))
			rep, err := s.admin.Prune(s.ctx())
			require.NoError(t, err)
			reps = append(reps, *rep)
			if len(matches) == 1 && !rep.Skipped && rep.LogRunsMoved == 0 {
				break
			}
			require.True(t, time.Now().Before(deadline), "the logs were not moved: %+v", reps)
			time.Sleep(time.Second)
		}
		require.Equal(t, before, s.allLogs(run.ID))
		out, errOut, code := runCLI(t, s, "logs", run.ID)
		require.Equal(t, 0, code, errOut)
		require.Contains(t, out, "line 1500")
	})
}

package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
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

// artifactJob writes report.bin, 3 MB of a repeated line (one part: the
// S3 store publishes it with one conditional PutObject) or, with big, 20 MB
// (three parts of a multipart upload).
func artifactJob(name string, big bool) job {
	size := 3_000_000
	if big {
		size = 20_000_000
	}
	return job{name: name, leaseTTL: "10s",
		script: fmt.Sprintf(`yes jobplane-artifact | head -c %d > "$JOBPLANE_ARTIFACTS_DIR/report.bin"; echo wrote`, size),
		extra:  "artifacts:\n  - {name: report.bin, max_bytes: 50000000}\n"}
}

func artifactBytes(big bool) []byte {
	size := 3_000_000
	if big {
		size = 20_000_000
	}
	line := []byte("jobplane-artifact\n")
	out := make([]byte, 0, size+len(line))
	for len(out) < size {
		out = append(out, line...)
	}
	return out[:size]
}

// s3Replicas starts two server processes on one PostgreSQL database with
// different data directories (so nothing is shared through a disk), one
// secret key and one S3 bucket, as replicas on two machines would be.
// env is added to the first replica's environment only.
func s3Replicas(t *testing.T, srv *s3test.Server, e *env, envA []string) (a, b *server, bucket string) {
	t.Helper()
	bucket = srv.Bucket(t)
	dsn := backends[1].dsn(t)
	secret := "JOBPLANE_SECRET_KEY=" + randHex(32)
	creds := []string{secret, "AWS_ACCESS_KEY_ID=" + srv.AccessKey, "AWS_SECRET_ACCESS_KEY=" + srv.SecretKey}
	store := []string{"--artifacts", "s3://" + bucket + "/jobplane?endpoint=" + srv.Endpoint}
	a = startServerWith(t, dsn, e, store, append(creds, envA...))
	b = startServerWith(t, dsn, e, store, creds)
	b.adminToken = a.adminToken
	b.admin.Token = a.adminToken
	return a, b, bucket
}

// startServerWith is startServer with more arguments and environment; the
// admin token is the one of the environment's first server.
func startServerWith(t *testing.T, db string, e *env, args, env []string) *server {
	t.Helper()
	addr := freeAddr(t)
	s := &server{t: t, addr: addr, url: "http://" + addr, db: db, defs: e.defs, dataDir: t.TempDir(),
		adminToken: "jpt_e2e_shared_admin_token_0001", args: args, env: env}
	s.admin = &apiclient.Client{BaseURL: s.url, Token: s.adminToken, HTTP: checkedHTTP(t, 30*time.Second)}
	s.start()
	return s
}

func download(t *testing.T, s *server, runID, name string) ([]byte, error) {
	t.Helper()
	rc, err := s.admin.DownloadArtifact(s.ctx(), runID, name)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(rc)
}

// TestStorageTwoReplicasS3: an artifact uploaded through one replica is
// listed and downloaded through the other, and no replica kept it on its
// own disk.
func TestStorageTwoReplicasS3(t *testing.T) {
	t.Parallel()
	srv := s3test.Start(t)
	e := newEnv(t, func(string) []job { return []job{artifactJob("small", false), artifactJob("big", true)} })
	a, b, bucket := s3Replicas(t, srv, e, nil)
	startWorker(t, a, "worker-a", t.TempDir(), a.registrationToken())

	for _, big := range []bool{false, true} {
		name := map[bool]string{false: "small", true: "big"}[big]
		run := b.createRun(name)
		r := b.waitState(run.ID, 90*time.Second, "succeeded", "failed", "cancelled", "timed_out")
		require.Equal(t, "succeeded", r.State, runSummary(r))
		want := artifactBytes(big)
		sum := sha256.Sum256(want)

		list, err := b.admin.ListArtifacts(b.ctx(), run.ID)
		require.NoError(t, err)
		require.Len(t, list.Artifacts, 1, "listed through the other replica")
		require.Equal(t, hex.EncodeToString(sum[:]), list.Artifacts[0].SHA256)
		require.Equal(t, int64(len(want)), list.Artifacts[0].Size)
		for _, s := range []*server{b, a} {
			got, err := download(t, s, run.ID, "report.bin")
			require.NoError(t, err)
			require.Equal(t, sum, sha256.Sum256(got), "downloaded through %s", s.url)
		}
		// The object is in the bucket under the prefix, keyed as on disk.
		objects, err := srv.Client().ListObjectsV2(context.Background(), &s3.ListObjectsV2Input{Bucket: aws.String(bucket), Prefix: aws.String("jobplane/")})
		require.NoError(t, err)
		suffix := fmt.Sprintf("/%s/%s/report.bin", run.ID, list.Artifacts[0].AttemptID)
		found := false
		for _, o := range objects.Contents {
			found = found || strings.HasSuffix(aws.ToString(o.Key), suffix)
		}
		require.True(t, found, "an object jobplane/TENANT%s", suffix)
	}
	for _, s := range []*server{a, b} {
		entries, _ := os.ReadDir(filepath.Join(s.dataDir, "artifacts"))
		require.Empty(t, entries, "replica %s keeps no artifact on its disk", s.url)
	}
}

// TestStorageS3Faults: a replica killed between publishing an artifact and
// committing its row leaves an object that is never listed nor served; an
// S3 server that is down makes uploads and downloads fail with 503
// unavailable while the run itself still finishes, with nothing listed.
func TestStorageS3Faults(t *testing.T) {
	t.Parallel()
	srv := s3test.Start(t)
	e := newEnv(t, func(string) []job { return []job{artifactJob("small", false)} })
	a, b, bucket := s3Replicas(t, srv, e, []string{"JOBPLANE_FAILPOINTS=upload.afterPublishBeforeCommit=exit"})
	startWorker(t, a, "worker-a", t.TempDir(), a.registrationToken())

	run := b.createRun("small")
	select {
	case <-a.proc.done:
	case <-time.After(90 * time.Second):
		t.Fatal("replica a did not die at upload.afterPublishBeforeCommit")
	}
	require.ErrorContains(t, a.proc.err, "exit status 99")
	objects, err := srv.Client().ListObjectsV2(context.Background(), &s3.ListObjectsV2Input{Bucket: aws.String(bucket), Prefix: aws.String("jobplane/")})
	require.NoError(t, err)
	require.Len(t, objects.Contents, 1, "the object was published before the crash")
	list, err := b.admin.ListArtifacts(b.ctx(), run.ID)
	require.NoError(t, err)
	require.Empty(t, list.Artifacts, "an object without its committed row is not listed")
	_, err = download(t, b, run.ID, "report.bin")
	var pe *apiclient.APIError
	require.True(t, errors.As(err, &pe) && pe.Status == http.StatusNotFound, "not served: %v", err)

	// The store goes down: a new run on b's worker finishes, its upload
	// refused with 503, and downloads are 503 too.
	startWorker(t, b, "worker-b", t.TempDir(), b.registrationToken())
	ok := b.createRun("small")
	r := b.waitState(ok.ID, 90*time.Second, "succeeded", "failed", "cancelled", "timed_out")
	require.Equal(t, "succeeded", r.State, runSummary(r))
	srv.Stop()
	down := b.createRun("small")
	r = b.waitState(down.ID, 120*time.Second, "succeeded", "failed", "cancelled", "timed_out")
	require.Equal(t, "succeeded", r.State, "a run is not lost when its artifact cannot be stored: %s", runSummary(r))
	list, err = b.admin.ListArtifacts(b.ctx(), down.ID)
	require.NoError(t, err)
	require.Empty(t, list.Artifacts, "nothing half-published is listed")
	_, err = download(t, b, ok.ID, "report.bin")
	require.True(t, errors.As(err, &pe) && pe.Status == http.StatusServiceUnavailable && pe.Problem.Code == protocol.CodeUnavailable, "download while the store is down: %v", err)
	logs := b.allLogs(down.ID)
	found := false
	for _, l := range logs {
		found = found || (l.Stream == "system" && strings.Contains(l.Text, "report.bin not uploaded"))
	}
	require.True(t, found, "the refused upload is reported in the job's log: %v", logs)

	srv.Restart(t)
	got, err := download(t, b, ok.ID, "report.bin")
	require.NoError(t, err)
	require.Equal(t, sha256.Sum256(artifactBytes(false)), sha256.Sum256(got))
}

// TestStorageTwoReplicasFilesystem: with the filesystem store (the
// default), two replicas on one PostgreSQL database with data directories
// of their own behave as documented: an artifact and moved logs are listed
// through both, served by the replica that holds the bytes, and answered
// 503 unavailable by the other, never as missing or empty.
func TestStorageTwoReplicasFilesystem(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(string) []job {
		return []job{artifactJob("small", false),
			{name: "chatty", script: `i=0; while [ $i -lt 300 ]; do i=$((i+1)); echo "line $i"; done`}}
	})
	dsn := backends[1].dsn(t)
	secret := []string{"JOBPLANE_SECRET_KEY=" + randHex(32)}
	// Both move logs: whichever holds the sweep's lease moves them to its
	// own disk.
	a := startServerWith(t, dsn, e, []string{"--archive-logs-after", "1s"}, secret)
	b := startServerWith(t, dsn, e, []string{"--archive-logs-after", "1s"}, secret)
	b.adminToken = a.adminToken
	b.admin.Token = a.adminToken
	startWorker(t, a, "worker-a", t.TempDir(), a.registrationToken())

	run := b.createRun("small")
	r := b.waitState(run.ID, 90*time.Second, "succeeded", "failed", "cancelled", "timed_out")
	require.Equal(t, "succeeded", r.State, runSummary(r))
	list, err := b.admin.ListArtifacts(b.ctx(), run.ID)
	require.NoError(t, err)
	require.Len(t, list.Artifacts, 1, "listed through the other replica")
	sum := sha256.Sum256(artifactBytes(false))
	got, err := download(t, a, run.ID, "report.bin")
	require.NoError(t, err)
	require.Equal(t, sum, sha256.Sum256(got), "served by the replica that received it")
	unavailable := func(err error) bool {
		var pe *apiclient.APIError
		return errors.As(err, &pe) && pe.Status == http.StatusServiceUnavailable && pe.Problem.Code == protocol.CodeUnavailable
	}
	_, err = download(t, b, run.ID, "report.bin")
	require.True(t, unavailable(err), "the other replica has not the bytes: 503 unavailable, not 404 or an empty body: %v", err)

	// Logs moved by one replica are on its disk: the other answers 503.
	chatty := a.createRun("chatty")
	r = a.waitState(chatty.ID, 90*time.Second, "succeeded", "failed", "cancelled", "timed_out")
	require.Equal(t, "succeeded", r.State, runSummary(r))
	before := a.allLogs(chatty.ID)
	require.Equal(t, before, b.allLogs(chatty.ID), "served from the database by both before the move")
	var holder, other *server
	var reps []protocol.PruneReport
	deadline := time.Now().Add(90 * time.Second)
	for holder == nil {
		require.True(t, time.Now().Before(deadline), "the logs were not moved: %+v", reps)
		for _, s := range []*server{a, b} {
			rep, err := s.admin.Prune(s.ctx())
			require.NoError(t, err)
			reps = append(reps, *rep)
			if rep.Skipped || rep.LogRunsMoved != 0 {
				continue
			}
			for _, d := range []*server{a, b} {
				if m, _ := filepath.Glob(filepath.Join(d.dataDir, "artifacts", ".logs", "*", chatty.ID, "*.jsonl.gz")); len(m) == 1 {
					holder = d
				}
			}
		}
		time.Sleep(time.Second)
	}
	other = map[*server]*server{a: b, b: a}[holder]
	require.Equal(t, before, holder.allLogs(chatty.ID), "served from its disk by the replica that moved them")
	_, err = other.admin.Logs(other.ctx(), chatty.ID, 0)
	require.True(t, unavailable(err), "moved logs on another replica's disk: 503 unavailable, not an empty log: %v", err)
}

package supervise

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/apiclient"
	"github.com/jobplane/jobplane/internal/config"
	"github.com/jobplane/jobplane/internal/gitsync"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/server"
)

// filesEnv is a real server with a source repository and an artifact store,
// and a runner that claims attempts of its job "build".
type filesEnv struct {
	url   string
	admin *apiclient.Client
	rc    *apiclient.RunnerClient
}

func newFilesEnv(t *testing.T) *filesEnv {
	t.Helper()
	ctx := context.Background()
	defs, code, data := t.TempDir(), t.TempDir(), t.TempDir()
	_, err := gitsync.InitRepo(code, "main", map[string]string{"input.txt": "from the source\n"}, "code")
	require.NoError(t, err)
	_, err = gitsync.InitRepo(defs, "main", map[string]string{
		"jobs/build.yaml": "name: build\nrun:\n  command: [\"true\"]\n  lease_ttl: 30s\n" +
			"artifacts:\n  - {name: out.txt, role: report, max_bytes: 100}\n  - {name: big.txt, max_bytes: 3}\nsource: {repo: code}\n",
		"policies/main.yaml": "rules:\n  - id: all\n    jobs: [build]\n    users: [\"*\"]\n",
	}, "defs")
	require.NoError(t, err)
	const admin = "supervise-test-admin-token-0123456789"
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	srv, err := server.Start(ctx, config.Server{Listen: addr, DB: "sqlite:" + filepath.Join(data, "db.sqlite"),
		Definitions: defs, Channels: map[string]string{"prod": "main"}, DataDir: data, AdminToken: admin,
		SourceRepos: map[string]string{"code": code}}, server.Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Stop(context.Background()) })
	e := &filesEnv{url: srv.URL(), admin: &apiclient.Client{BaseURL: srv.URL(), Token: admin}}
	tok, err := e.admin.CreateRegistrationToken(ctx, protocol.RegistrationTokenRequest{Pool: "default"})
	require.NoError(t, err)
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	e.rc = &apiclient.RunnerClient{BaseURL: srv.URL(), Key: priv}
	reg, err := e.rc.Register(ctx, tok.Token, protocol.RegisterRequest{Name: "r", PublicKey: protocol.EncodeKey(pub)})
	require.NoError(t, err)
	e.rc.RunnerID = reg.RunnerID
	return e
}

// claim requests a run of build and claims it: the assignment carries the
// run token a pod's supervisor gets.
func (e *filesEnv) claim(t *testing.T) *protocol.Assignment {
	t.Helper()
	ctx := context.Background()
	_, err := e.admin.CreateRun(ctx, &protocol.RunRequest{Job: "build", Channel: "prod"})
	require.NoError(t, err)
	resp, err := e.rc.Claim(ctx, 5, "")
	require.NoError(t, err)
	require.NotNil(t, resp)
	require.NotNil(t, resp.RunToken)
	return resp
}

func (e *filesEnv) jobEnv(a *protocol.Assignment) []string {
	return []string{"PATH=/usr/bin:/bin", protocol.EnvAPI + "=" + e.url, protocol.EnvRunToken + "=" + a.RunToken.Token,
		protocol.EnvAttemptID + "=" + a.AttemptID}
}

// TestFilesWithTheServer runs the supervisor as the Kubernetes executor's
// pod does, against a real server: it unpacks the attempt's source before
// the job, uploads what the job left after it (within max_bytes), and
// reports the stored IDs; a source of another commit never starts the job,
// and a stopped job uploads nothing.
func TestFilesWithTheServer(t *testing.T) {
	e := newFilesEnv(t)
	decl := `[{"name":"out.txt","role":"report","max_bytes":100},{"name":"big.txt","max_bytes":3}]`
	opts := func(t *testing.T, a *protocol.Assignment, commit string) (Options, string) {
		root := t.TempDir()
		return Options{UntilMS: 60000, Workspace: filepath.Join(root, "workspace"), Dir: filepath.Join(root, "workspace"),
			ArtifactsDir: filepath.Join(root, "artifacts"), SourceCommit: commit, Artifacts: decl,
			Report: filepath.Join(root, "report")}, root
	}

	t.Run("source in, artifacts out", func(t *testing.T) {
		a := e.claim(t)
		o, _ := opts(t, a, a.Source.Commit)
		s := start(t, o, e.jobEnv(a), "sh", "-c", `tr a-z A-Z < input.txt > "$1/out.txt"; echo toolong > "$1/big.txt"`, "sh", o.ArtifactsDir)
		st := s.exit(t)
		require.Equal(t, 0, st.Code, s.out.String())
		require.Contains(t, s.out.String(), "jobplane: source code at "+a.Source.Commit+" unpacked")
		require.Contains(t, s.out.String(), "jobplane: artifact big.txt not uploaded: 8 bytes, at most 3 allowed")
		b, err := os.ReadFile(o.Report)
		require.NoError(t, err)
		ids := ReadReport(string(b)).Artifacts
		require.Len(t, ids, 1, string(b))
		rd, err := e.admin.DownloadArtifact(context.Background(), a.RunID, "out.txt")
		require.NoError(t, err)
		got, _ := io.ReadAll(rd)
		rd.Close()
		require.Equal(t, "FROM THE SOURCE\n", string(got))
		list, err := e.admin.ListArtifacts(context.Background(), a.RunID)
		require.NoError(t, err)
		require.Equal(t, ids[0], list.Artifacts[0].ID)
		_, err = e.rc.Result(context.Background(), apiclient.AttemptRef{RunID: a.RunID, AttemptID: a.AttemptID, LeaseToken: a.Lease.Token},
			protocol.ResultRequest{Outcome: "succeeded", Artifacts: ids})
		require.NoError(t, err)
	})

	t.Run("another commit than the claim's", func(t *testing.T) {
		a := e.claim(t)
		o, root := opts(t, a, strings.Repeat("0", 40))
		marker := filepath.Join(root, "ran")
		s := start(t, o, e.jobEnv(a), "sh", "-c", `touch "$1"`, "sh", marker)
		st := startFailure(t, s)
		require.Contains(t, st.Error, "the server offers commit")
		require.NoFileExists(t, marker, "the job never started")
		_, err := e.rc.Result(context.Background(), apiclient.AttemptRef{RunID: a.RunID, AttemptID: a.AttemptID, LeaseToken: a.Lease.Token},
			protocol.ResultRequest{Outcome: "failed", ExitCode: 127})
		require.NoError(t, err)
	})

	t.Run("a stopped job uploads nothing; an ended attempt fetches nothing", func(t *testing.T) {
		a := e.claim(t)
		o, _ := opts(t, a, a.Source.Commit)
		s := start(t, o, e.jobEnv(a), "sh", "-c", `echo x > "$1/out.txt"; sleep 60`, "sh", o.ArtifactsDir)
		require.Eventually(t, func() bool { _, err := os.Stat(filepath.Join(o.ArtifactsDir, "out.txt")); return err == nil }, 20*time.Second, 20*time.Millisecond)
		_, err := s.ctl.WriteString("stop 0\n")
		require.NoError(t, err)
		st := s.exit(t)
		require.Equal(t, ReasonStopped, st.Reason)
		b, err := os.ReadFile(o.Report)
		require.NoError(t, err)
		require.Empty(t, ReadReport(string(b)).Artifacts)
		list, err := e.admin.ListArtifacts(context.Background(), a.RunID)
		require.NoError(t, err)
		require.Empty(t, list.Artifacts)
		_, err = e.rc.Result(context.Background(), apiclient.AttemptRef{RunID: a.RunID, AttemptID: a.AttemptID, LeaseToken: a.Lease.Token},
			protocol.ResultRequest{Outcome: "failed", ExitCode: 137})
		require.NoError(t, err)
		// The same token once its attempt ended: 410, and no job.
		o2, root := opts(t, a, a.Source.Commit)
		marker := filepath.Join(root, "ran")
		s2 := start(t, o2, e.jobEnv(a), "sh", "-c", `touch "$1"`, "sh", marker)
		require.Contains(t, startFailure(t, s2).Error, "attempt_ended")
		require.NoFileExists(t, marker)
	})
}

// startFailure waits for a supervisor that did not start its job.
func startFailure(t *testing.T, s *supervised) Status {
	t.Helper()
	<-s.done
	first, ok := <-s.statuses
	require.True(t, ok)
	require.Equal(t, "start_failed", first.Event, s.out.String())
	require.Equal(t, codeStartFailed, s.cmd.ProcessState.ExitCode())
	return first
}

package worker_test

import (
	"bytes"
	"context"
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
	jcli "github.com/jobplane/jobplane/internal/cli"
	"github.com/jobplane/jobplane/internal/config"
	"github.com/jobplane/jobplane/internal/gitsync"
	"github.com/jobplane/jobplane/internal/openapi/openapitest"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/server"
	"github.com/jobplane/jobplane/internal/worker"
)

// TestWorkerSourceAndArtifacts runs a real server and a real worker: the
// job runs in the unpacked source commit, and of what it leaves in
// JOBPLANE_ARTIFACTS_DIR only the declared regular files are uploaded (a
// symlink to a file outside is not followed, an undeclared file ignored).
func TestWorkerSourceAndArtifacts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	defsRepo, codeRepo, data := t.TempDir(), t.TempDir(), t.TempDir()
	_, err := gitsync.InitRepo(codeRepo, "main", map[string]string{"main.go": "package main\n", "scripts/run.sh": "echo from source\n"}, "code")
	require.NoError(t, err)
	_, err = gitsync.InitRepo(defsRepo, "main", map[string]string{
		"jobs/build.yaml": `name: build
run:
  command: [sh, -c, 'sh scripts/run.sh; cp main.go "$JOBPLANE_ARTIFACTS_DIR/report.json"; ln -s /etc/passwd "$JOBPLANE_ARTIFACTS_DIR/big.bin"; echo x > "$JOBPLANE_ARTIFACTS_DIR/undeclared.txt"; test "$JOBPLANE_SOURCE_REPO" = code']
  lease_ttl: 10s
artifacts:
  - {name: report.json, role: report, max_bytes: 1000}
  - {name: big.bin}
source: {repo: code}
`,
		"policies/main.yaml": "rules:\n  - id: all\n    jobs: [build]\n    users: [\"*\"]\n",
	}, "defs")
	require.NoError(t, err)
	const admin = "worker-test-admin-token-0123456789"
	// The capability and ticket URLs are absolute, built from the public
	// URL, so the server needs its real address up front.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	srv, err := server.Start(ctx, config.Server{Listen: addr, DB: "sqlite:" + filepath.Join(data, "db.sqlite"),
		Definitions: defsRepo, Channels: map[string]string{"prod": "main"}, DataDir: data, AdminToken: admin,
		SourceRepos: map[string]string{"code": codeRepo}}, server.Options{Logger: logger(t)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Stop(context.Background()) })
	// Both the admin's and the worker's exchanges are checked against the
	// OpenAPI document: the artifact upload, list and download included.
	cli := &apiclient.Client{BaseURL: srv.URL(), Token: admin, HTTP: openapitest.Client(t, nil)}
	tok, err := cli.CreateRegistrationToken(ctx, protocol.RegistrationTokenRequest{Pool: "default"})
	require.NoError(t, err)
	w, err := worker.New(worker.Config{Server: srv.URL(), RegistrationToken: tok.Token, StateDir: t.TempDir(), WaitSeconds: 1, Logger: logger(t),
		HTTP: openapitest.Client(t, nil)})
	require.NoError(t, err)
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	t.Cleanup(func() { cancel(); <-done })

	run, err := cli.CreateRun(ctx, &protocol.RunRequest{Job: "build", Channel: "prod"})
	require.NoError(t, err)
	limit := time.Now().Add(90 * time.Second)
	for !terminal(run.State) {
		require.True(t, time.Now().Before(limit), "run still %s", run.State)
		time.Sleep(50 * time.Millisecond) // polling for the outcome, not measuring time
		run, err = cli.GetRun(ctx, run.ID)
		require.NoError(t, err)
	}
	logs, err := cli.Logs(ctx, run.ID, 0)
	require.NoError(t, err)
	var text []string
	for _, l := range logs.Lines {
		text = append(text, l.Text)
	}
	all := strings.Join(text, "\n")
	require.Equal(t, "succeeded", run.State, all)
	require.Contains(t, all, "from source")
	require.Contains(t, all, "artifact big.bin not uploaded: not a regular file")

	list, err := cli.ListArtifacts(ctx, run.ID)
	require.NoError(t, err)
	require.Len(t, list.Artifacts, 1)
	require.Equal(t, "report.json", list.Artifacts[0].Name)
	rd, err := cli.DownloadArtifact(ctx, run.ID, "report.json")
	require.NoError(t, err)
	b, _ := io.ReadAll(rd)
	rd.Close()
	require.Equal(t, "package main\n", string(b))
	require.Len(t, run.Attempts, 1)
	require.True(t, bytes.Contains(run.Attempts[0].Result, []byte(list.Artifacts[0].ID)), "the result names the stored artifact: %s", run.Attempts[0].Result)
	_, err = os.Stat(filepath.Join(data, "artifacts", ".tmp"))
	require.NoError(t, err)

	// The CLI lists and downloads (verifying the digest).
	var out, errOut bytes.Buffer
	flags := []string{"--server", srv.URL(), "--token", admin}
	code := jcli.Main(ctx, append([]string{"artifacts", run.ID}, flags...), strings.NewReader(""), &out, &errOut)
	require.Equal(t, 0, code, errOut.String())
	require.Contains(t, out.String(), "report.json")
	require.Contains(t, out.String(), list.Artifacts[0].SHA256)
	dst := filepath.Join(t.TempDir(), "r.json")
	code = jcli.Main(ctx, append([]string{"artifacts", run.ID, "--download", "report.json", "-o", dst}, flags...), strings.NewReader(""), &out, &errOut)
	require.Equal(t, 0, code, errOut.String())
	b, err = os.ReadFile(dst)
	require.NoError(t, err)
	require.Equal(t, "package main\n", string(b))
	errOut.Reset()
	code = jcli.Main(ctx, append([]string{"artifacts", run.ID, "--download", "nope.txt"}, flags...), strings.NewReader(""), &out, &errOut)
	require.Equal(t, 1, code)
	require.Contains(t, errOut.String(), `no artifact "nope.txt"`)
}

type tlog struct{ t *testing.T }

func (w tlog) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func logger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tlog{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func terminal(state string) bool {
	switch state {
	case "pending_approval", "queued", "running":
		return false
	}
	return true
}

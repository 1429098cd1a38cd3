package server_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/apiclient"
	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/config"
	"github.com/jobplane/jobplane/internal/gitsync"
	"github.com/jobplane/jobplane/internal/openapi/openapitest"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/server"
	"github.com/jobplane/jobplane/internal/store/testdb"
)

const obsToken = "observability-admin-token-0123456789"

// tWriter sends log lines to t.Log and keeps them for assertions.
type tWriter struct {
	t     *testing.T
	mu    *sync.Mutex
	lines *[]string
}

func (w tWriter) Write(p []byte) (int, error) {
	l := strings.TrimSpace(string(p))
	w.t.Log(l)
	w.mu.Lock()
	*w.lines = append(*w.lines, l)
	w.mu.Unlock()
	return len(p), nil
}

func (w tWriter) grep(substr ...string) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, l := range *w.lines {
		all := true
		for _, s := range substr {
			all = all && strings.Contains(l, s)
		}
		if all {
			out = append(out, l)
		}
	}
	return out
}

// startObsServer runs a real server (HTTP on loopback, background loops) on a
// fresh database of each kind.
func startObsServer(t *testing.T, db string) (*server.Server, *apiclient.Client, tWriter) {
	t.Helper()
	repo := t.TempDir()
	_, err := gitsync.InitRepo(repo, "main", map[string]string{
		"jobs/greet.yaml":  "name: greet\nrun:\n  command: [\"true\"]\n",
		"jobs/secret.yaml": "name: secret\nrun:\n  command: [\"true\"]\n",
		"policies/p.yaml":  "rules:\n  - id: greeters\n    jobs: [greet]\n    users: [\"*\"]\n",
	}, "init", gitsync.WithTime(t0))
	require.NoError(t, err)
	ctx := context.Background()
	logs := tWriter{t: t, mu: &sync.Mutex{}, lines: &[]string{}}
	srv, err := server.Start(ctx, config.Server{
		Listen: "127.0.0.1:0", DB: db, Definitions: repo, Channels: map[string]string{"prod": "main"},
		DataDir: t.TempDir(), AdminToken: obsToken,
	}, server.Options{Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})), Clock: clock.Real{}})
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Stop(ctx)
	})
	return srv, &apiclient.Client{BaseURL: srv.URL(), Token: obsToken, HTTP: openapitest.Client(t, &http.Client{Timeout: 30 * time.Second})}, logs
}

// TestMetricsAfterARun: after a run succeeds, one is denied and one waits,
// /metrics shows each family with the right labels, and the run's timeline
// and the audit chain tell the same story.
func TestMetricsAfterARun(t *testing.T) {
	t.Parallel()
	dbs := map[string]func(t *testing.T) string{
		"sqlite":   func(t *testing.T) string { return "sqlite:" + filepath.Join(t.TempDir(), "jobplane.db") },
		"postgres": func(t *testing.T) string { return testdb.PostgresDSN(t) },
	}
	for name, db := range dbs {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv, admin, logs := startObsServer(t, db(t))
			ctx := context.Background()

			run, err := admin.CreateRun(ctx, &protocol.RunRequest{Job: "greet", Channel: "prod"})
			require.NoError(t, err)
			_, err = admin.CreateRun(ctx, &protocol.RunRequest{Job: "secret", Channel: "prod"})
			require.ErrorContains(t, err, "denied")

			tok, err := admin.CreateRegistrationToken(ctx, protocol.RegistrationTokenRequest{Pool: "default"})
			require.NoError(t, err)
			pub, priv, err := ed25519.GenerateKey(rand.Reader)
			require.NoError(t, err)
			rc := &apiclient.RunnerClient{BaseURL: srv.URL(), Key: priv, HTTP: openapitest.Client(t, &http.Client{Timeout: 30 * time.Second}), Clock: clock.Real{}}
			reg, err := rc.Register(ctx, tok.Token, protocol.RegisterRequest{Name: "r1", PublicKey: protocol.EncodeKey(pub)})
			require.NoError(t, err)
			rc.RunnerID = reg.RunnerID
			asg, err := rc.Claim(ctx, 0, "")
			require.NoError(t, err)
			require.NotNil(t, asg)
			require.Equal(t, run.ID, asg.RunID)
			_, err = rc.Result(ctx, apiclient.AttemptRef{RunID: asg.RunID, AttemptID: asg.AttemptID, LeaseToken: asg.Lease.Token},
				protocol.ResultRequest{Outcome: "succeeded", Summary: "ok"})
			require.NoError(t, err)
			_, err = admin.CreateRun(ctx, &protocol.RunRequest{Job: "greet", Channel: "prod"}) // left queued
			require.NoError(t, err)

			resp, err := openapitest.Client(t, nil).Get(srv.URL() + "/metrics")
			require.NoError(t, err)
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			require.Equal(t, http.StatusOK, resp.StatusCode)
			text := string(body)
			for _, want := range []string{
				`jobplane_runs{job="greet",state="succeeded"} 1`,
				`jobplane_runs{job="greet",state="queued"} 1`,
				`jobplane_runs{job="secret",state="denied"} 1`,
				`jobplane_attempts{state="succeeded"} 1`,
				`jobplane_attempts{state="queued"} 1`,
				`jobplane_queue_depth{pool="default"} 1`,
				`jobplane_lease_waits 0`,
				`jobplane_policy_decisions_total{outcome="allow",stage="request"} 2`,
				`jobplane_policy_decisions_total{outcome="deny",stage="request"} 1`,
				`jobplane_policy_decisions_total{outcome="allow",stage="dispatch"} 1`,
				`jobplane_claim_latency_seconds_count{pool="default"} 1`,
				`jobplane_http_requests_total{code="201",route="POST /v1/runs"} 2`,
				`jobplane_http_requests_total{code="403",route="POST /v1/runs"} 1`,
				`jobplane_http_requests_total{code="200",route="POST /v1/runner/attempt/result"} 1`,
				`jobplane_store_up 1`,
			} {
				require.Contains(t, text, want+"\n", "metric line missing")
			}
			require.Regexp(t, regexp.MustCompile(`jobplane_runner_heartbeat_age_seconds\{pool="default",runner="`+reg.RunnerID+`",status="active"\} [0-9.e+-]+\n`), text)
			require.NotContains(t, text, "/v1/runs/run_", "routes are patterns, never raw paths")

			// Logs about the run carry its run and attempt IDs.
			require.NotEmpty(t, logs.grep(`msg="control: attempt claimed"`, "run_id="+run.ID, "attempt_id="+asg.AttemptID))
			require.NotEmpty(t, logs.grep(`msg="api: request"`, `route="POST /v1/runner/attempt/result"`, "run_id="+run.ID, "attempt_id="+asg.AttemptID))

			// The timeline: requested, claimed, succeeded, with actors.
			got, err := admin.GetRun(ctx, run.ID)
			require.NoError(t, err)
			var steps []string
			for _, e := range got.Timeline {
				steps = append(steps, e.Action+"→"+e.State+" by "+e.Actor)
				require.False(t, e.At.IsZero())
			}
			require.Equal(t, []string{
				"run.requested→queued by admin",
				"attempt.claimed→running by runner:" + reg.RunnerID,
				"attempt.succeeded→succeeded by runner:" + reg.RunnerID,
			}, steps)

			// Every change so far is audited and, once sealed, verifies.
			sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			_, err = srv.Sealer().SealAll(sctx)
			require.NoError(t, err)
			rep, err := admin.AuditVerify(ctx, "")
			require.NoError(t, err)
			require.True(t, rep.OK, "%+v", rep.Broken)
			require.Zero(t, rep.Unsealed)
			rep2, err := admin.AuditVerify(ctx, fmt.Sprintf("%d:%s", rep.Head.Seq, rep.Head.Hash))
			require.NoError(t, err)
			require.True(t, rep2.OK, "%+v", rep2.Broken)
			require.Equal(t, &rep.Head, rep2.Checkpoint)
		})
	}
}

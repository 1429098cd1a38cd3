package server_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/jobplane/jobplane/internal/apiclient"
	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/config"
	"github.com/jobplane/jobplane/internal/gitsync"
	"github.com/jobplane/jobplane/internal/openapi/openapitest"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/server"
	"github.com/jobplane/jobplane/internal/store/testdb"
	"github.com/jobplane/jobplane/internal/tracing"
)

// TestSpansOnTheClaimPath: with tracing on, a run request, a claim and a
// result each make a server span named after its route, and each of their
// store transactions a span beneath it; the runner's attempt calls, sent
// with the run's trace context, land in the run's trace. On both stores.
func TestSpansOnTheClaimPath(t *testing.T) {
	t.Parallel()
	dbs := map[string]func(t *testing.T) string{
		"sqlite":   func(t *testing.T) string { return "sqlite:" + filepath.Join(t.TempDir(), "jobplane.db") },
		"postgres": func(t *testing.T) string { return testdb.PostgresDSN(t) },
	}
	for name, db := range dbs {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			sr := tracetest.NewSpanRecorder()
			tr := tracing.New(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr)))
			repo := t.TempDir()
			_, err := gitsync.InitRepo(repo, "main", map[string]string{
				"jobs/greet.yaml": "name: greet\nrun:\n  command: [\"true\"]\n",
				"policies/p.yaml": "rules:\n  - id: all\n    jobs: [greet]\n    users: [\"*\"]\n",
			}, "init")
			require.NoError(t, err)
			ctx := context.Background()
			srv, err := server.Start(ctx, config.Server{Listen: "127.0.0.1:0", DB: db(t), Definitions: repo,
				Channels: map[string]string{"prod": "main"}, DataDir: t.TempDir(), AdminToken: obsToken},
				server.Options{Clock: clock.Real{}, Tracing: tr})
			require.NoError(t, err)
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				_ = srv.Stop(ctx)
			})
			hc := openapitest.Client(t, &http.Client{Timeout: 30 * time.Second, Transport: tracing.Transport(nil)})
			admin := &apiclient.Client{BaseURL: srv.URL(), Token: obsToken, HTTP: hc}
			run, err := admin.CreateRun(ctx, &protocol.RunRequest{Job: "greet", Channel: "prod"})
			require.NoError(t, err)
			tok, err := admin.CreateRegistrationToken(ctx, protocol.RegistrationTokenRequest{Pool: "default"})
			require.NoError(t, err)
			pub, priv, err := ed25519.GenerateKey(rand.Reader)
			require.NoError(t, err)
			rc := &apiclient.RunnerClient{BaseURL: srv.URL(), Key: priv, HTTP: hc, Clock: clock.Real{}}
			reg, err := rc.Register(ctx, tok.Token, protocol.RegisterRequest{Name: "r1", PublicKey: protocol.EncodeKey(pub)})
			require.NoError(t, err)
			rc.RunnerID = reg.RunnerID
			asg, err := rc.Claim(ctx, 0, "")
			require.NoError(t, err)
			require.Equal(t, run.ID, asg.RunID)
			actx := tracing.RunContext(ctx, run.ID)
			_, err = rc.Result(actx, apiclient.AttemptRef{RunID: asg.RunID, AttemptID: asg.AttemptID, LeaseToken: asg.Lease.Token},
				protocol.ResultRequest{Outcome: "succeeded", Summary: "ok"})
			require.NoError(t, err)

			byName := map[string][]sdktrace.ReadOnlySpan{}
			byID := map[trace.SpanID]sdktrace.ReadOnlySpan{}
			for _, s := range sr.Ended() {
				byName[s.Name()] = append(byName[s.Name()], s)
				byID[s.SpanContext().SpanID()] = s
			}
			txUnder := func(route string) sdktrace.ReadOnlySpan {
				t.Helper()
				require.Len(t, byName[route], 1, "one span of %s", route)
				req := byName[route][0]
				require.Equal(t, trace.SpanKindServer, req.SpanKind())
				for _, s := range byName["store.tx"] {
					if s.Parent().SpanID() == req.SpanContext().SpanID() {
						return req
					}
				}
				require.Failf(t, "no store.tx span", "under %s", route)
				return nil
			}
			requested := txUnder("POST /v1/runs")
			require.Len(t, requested.Links(), 1, "the request that made the run links to the run's trace")
			require.Equal(t, tracing.RunTraceID(run.ID), requested.Links()[0].SpanContext.TraceID().String())
			claim := txUnder("POST /v1/runner/claim")
			result := txUnder("POST /v1/runner/attempt/result")
			attr := func(s sdktrace.ReadOnlySpan, k string) string {
				for _, kv := range s.Attributes() {
					if string(kv.Key) == k {
						return kv.Value.Emit()
					}
				}
				return ""
			}
			require.Equal(t, reg.RunnerID, attr(claim, "jobplane.runner_id"))
			require.Equal(t, run.ID, attr(result, "jobplane.run_id"))
			require.Equal(t, asg.AttemptID, attr(result, "jobplane.attempt_id"))
			require.Equal(t, tracing.RunTraceID(run.ID), result.SpanContext().TraceID().String(),
				"the result, sent in the run's trace, is in it")
			for _, s := range byName["store.tx"] {
				require.Contains(t, []string{"sqlite", "postgresql"}, attr(s, "db.system.name"))
			}
		})
	}
}

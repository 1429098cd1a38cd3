package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/apiclient"
	"github.com/jobplane/jobplane/internal/tracing"
)

// jaegerBinary is a Jaeger (v2, OTLP receiver and in-memory store) binary
// named by JOBPLANE_TEST_JAEGER, or the test is skipped, unless
// JOBPLANE_TEST_REQUIRE_OTLP=1 makes that a failure. tools/otlp pins the
// version; build it with
//
//	cd tools/otlp && go build -o /somewhere/jaeger github.com/jaegertracing/jaeger/cmd/jaeger
func jaegerBinary(t *testing.T) string {
	t.Helper()
	p := os.Getenv("JOBPLANE_TEST_JAEGER")
	if p == "" {
		if os.Getenv("JOBPLANE_TEST_REQUIRE_OTLP") == "1" {
			t.Fatal("JOBPLANE_TEST_JAEGER names no Jaeger binary (JOBPLANE_TEST_REQUIRE_OTLP=1)")
		}
		t.Skip("set JOBPLANE_TEST_JAEGER to a Jaeger binary (tools/otlp) to export traces to a real OTLP receiver")
	}
	return p
}

// jaegerConfig receives OTLP over HTTP on otlp and serves the query API on
// query, keeping traces in memory; every other port is a free one too.
const jaegerConfig = `service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
extensions:
  jaeger_query:
    storage:
      traces: mem
    http:
      endpoint: %s
    grpc:
      endpoint: %s
  jaeger_storage:
    backends:
      mem:
        memory:
          max_traces: 10000
receivers:
  otlp:
    protocols:
      http:
        endpoint: %s
processors:
  batch:
    timeout: 100ms
exporters:
  jaeger_storage_exporter:
    trace_storage: mem
`

type jaegerTrace struct {
	Data []struct {
		Spans []struct {
			SpanID        string `json:"spanID"`
			OperationName string `json:"operationName"`
			ProcessID     string `json:"processID"`
			References    []struct {
				SpanID string `json:"spanID"`
			} `json:"references"`
		} `json:"spans"`
		Processes map[string]struct {
			ServiceName string `json:"serviceName"`
		} `json:"processes"`
	} `json:"data"`
}

// TestTracesReachAnOTLPReceiver runs a server and a worker that export
// traces to a real Jaeger on loopback, configured only by OTEL_* variables,
// and finds the run's trace there: the worker's attempt span, the server's
// spans of the attempt's requests and their transactions, and the job's
// TRACEPARENT beneath the attempt.
func TestTracesReachAnOTLPReceiver(t *testing.T) {
	t.Parallel()
	bin := jaegerBinary(t)
	otlp, query := freeAddr(t), freeAddr(t)
	cfg := filepath.Join(t.TempDir(), "jaeger.yaml")
	require.NoError(t, os.WriteFile(cfg, fmt.Appendf(nil, jaegerConfig, query, freeAddr(t), otlp), 0o600))
	jaeger := exec.Command(bin, "--config", cfg)
	logf, err := os.Create(filepath.Join(t.TempDir(), "jaeger.log"))
	require.NoError(t, err)
	jaeger.Stdout, jaeger.Stderr = logf, logf
	require.NoError(t, jaeger.Start())
	t.Cleanup(func() {
		_ = jaeger.Process.Kill()
		_ = jaeger.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("----- jaeger -----\n%s", b)
		}
	})
	hc := &http.Client{Timeout: 2 * time.Second}
	eventually(t, 30*time.Second, "jaeger's query API", func() (bool, string) {
		resp, err := hc.Get("http://" + query + "/api/services")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})

	e := newEnv(t, func(dir string) []job {
		return []job{{name: "traced", script: `printf '%s\n' "$TRACEPARENT" >> ` + dir + `/traceparent`}}
	})
	otel := []string{"OTEL_EXPORTER_OTLP_ENDPOINT=http://" + otlp, "OTEL_BSP_SCHEDULE_DELAY=100"}
	addr := freeAddr(t)
	s := &server{t: t, addr: addr, url: "http://" + addr, db: "sqlite:" + filepath.Join(t.TempDir(), "db.sqlite"), defs: e.defs,
		dataDir: t.TempDir(), adminToken: "jpt_e2e_" + randHex(16), env: otel, args: []string{"--log-format", "json"}}
	s.admin = &apiclient.Client{BaseURL: s.url, Token: s.adminToken, HTTP: checkedHTTP(t, 10*time.Second)}
	s.start()
	stateDir := t.TempDir()
	startProc(t, "worker", otel, "worker", "--server", s.url, "--state-dir", stateDir, "--name", "traced-worker",
		"--registration-token", s.registrationToken(), "--log-format", "json")

	out, errOut, code := runCLI(t, s, "run", "traced", "--wait")
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	runID := runIDFrom(t, errOut)
	tps := e.lines("traceparent")
	require.Len(t, tps, 1)
	jobParent := strings.Split(tps[0], "-")
	require.Len(t, jobParent, 4, "TRACEPARENT %q", tps[0])
	traceID := tracing.RunTraceID(runID)
	require.Equal(t, traceID, jobParent[1], "the job is in its run's trace")

	want := map[string]string{ // operation → service
		"attempt traced":                 "jobplane-worker",
		"POST /v1/runner/attempt/result": "jobplane-server",
		"store.tx":                       "jobplane-server",
	}
	var tr jaegerTrace
	eventually(t, 30*time.Second, "the run's trace in jaeger", func() (bool, string) {
		resp, err := hc.Get("http://" + query + "/api/traces/" + traceID)
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		tr = jaegerTrace{}
		if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&tr) != nil || len(tr.Data) != 1 {
			return false, resp.Status
		}
		seen := map[string]string{}
		for _, sp := range tr.Data[0].Spans {
			seen[sp.OperationName] = tr.Data[0].Processes[sp.ProcessID].ServiceName
		}
		for op, svc := range want {
			if seen[op] != svc {
				return false, fmt.Sprintf("spans so far: %v", seen)
			}
		}
		return true, ""
	})
	var attempt string
	for _, sp := range tr.Data[0].Spans {
		if sp.OperationName == "attempt traced" {
			attempt = sp.SpanID
		}
	}
	require.Equal(t, attempt, jobParent[2], "the job's parent is the worker's attempt span")
}

package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/id"
	"github.com/jobplane/jobplane/internal/openapi/openapitest"
	"github.com/jobplane/jobplane/internal/protocol"
)

type testBundle struct {
	srv    *fakeServer
	ts     *httptest.Server
	dir    string // the worker's StateDir
	out    string // where jobs write what the test inspects
	clk    clock.Clock
	cancel context.CancelFunc
	done   chan error
}

type testLogWriter struct{ t *testing.T }

func (w testLogWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func testConfig(t *testing.T, server, dir string, clk clock.Clock) Config {
	return Config{
		Server: server, RegistrationToken: "reg-secret", Pool: "p", Labels: []string{"linux"},
		StateDir: dir, Name: "test-runner", Version: "test", Clock: clk, WaitSeconds: 1,
		Logger: slog.New(slog.NewTextHandler(testLogWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
}

// startWorker runs a worker with short timings until the test ends.
func startWorker(t *testing.T, cfg Config) (context.CancelFunc, chan error) {
	t.Helper()
	_, cancel, done := startWorkerW(t, cfg)
	return cancel, done
}

// startWorkerW is startWorker that also returns the worker.
func startWorkerW(t *testing.T, cfg Config) (*Worker, context.CancelFunc, chan error) {
	t.Helper()
	w, err := New(cfg)
	require.NoError(t, err)
	w.heartbeatEvery = 200 * time.Millisecond
	w.backoffBase = 20 * time.Millisecond
	w.backoffMax = 300 * time.Millisecond
	w.killGrace = 2 * time.Second
	w.tick = 20 * time.Millisecond
	w.flushEvery = 50 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- w.Run(ctx)
		close(done) // later receives do not block
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			t.Error("worker did not stop")
		}
	})
	return w, cancel, done
}

func setup(t *testing.T, clk clock.Clock) *testBundle {
	t.Helper()
	if clk == nil {
		clk = clock.Real{}
	}
	srv := newFakeServer(t, clk)
	ts := httptest.NewServer(openapitest.Handler(t, srv))
	t.Cleanup(ts.Close)
	b := &testBundle{srv: srv, ts: ts, dir: t.TempDir(), out: t.TempDir(), clk: clk}
	return b
}

func (b *testBundle) start(t *testing.T) {
	t.Helper()
	b.cancel, b.done = startWorker(t, testConfig(t, b.ts.URL, b.dir, b.clk))
}

func assignment(out string, command ...string) *protocol.Assignment {
	now := time.Now()
	return &protocol.Assignment{
		RunID: id.New(id.Run, now), AttemptID: id.New(id.Attempt, now), AttemptNumber: 1,
		Lease: protocol.Lease{TTLSeconds: 3},
		Job: protocol.AssignedJob{
			Name: "backfill-account", Channel: "prod", Commit: "0123abcd",
			Command: command, Env: map[string]string{"OUT": out, "JOBPLANE_RUN_ID": "forged"}, TimeoutSeconds: 600,
		},
		Params: json.RawMessage(`{}`),
		Leases: []protocol.FencedKey{},
	}
}

// alive reports whether pid runs (a zombie does not count).
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	return len(fields) > 0 && fields[0] != "Z"
}

func readPid(t *testing.T, path string) int {
	t.Helper()
	var pid int
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(path)
		if err != nil || !strings.HasSuffix(string(b), "\n") {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil
	}, 10*time.Second, 20*time.Millisecond)
	return pid
}

func TestIdentityPersistedAcrossRestarts(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	cancel, done := startWorker(t, testConfig(t, b.ts.URL, b.dir, b.clk))
	b.srv.waitFor(t, "first heartbeat", 10*time.Second, func() bool { return b.srv.heartbeats > 0 })
	cancel()
	require.NoError(t, <-done)

	fi, err := os.Stat(filepath.Join(b.dir, keyFile))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	first, err := loadIdentity(b.dir)
	require.NoError(t, err)

	// The second instance has no registration token: it must not need one.
	cfg := testConfig(t, b.ts.URL, b.dir, b.clk)
	cfg.RegistrationToken = ""
	b.srv.mu.Lock()
	before := b.srv.heartbeats
	b.srv.mu.Unlock()
	startWorker(t, cfg)
	b.srv.waitFor(t, "heartbeat of the restarted worker", 10*time.Second, func() bool { return b.srv.heartbeats > before })
	second, err := loadIdentity(b.dir)
	require.NoError(t, err)
	require.Equal(t, first, second)
	b.srv.mu.Lock()
	defer b.srv.mu.Unlock()
	require.Equal(t, 1, b.srv.registrations)
	require.Empty(t, b.srv.badRequests)
}

func TestRunWithoutIdentityNeedsToken(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t, "http://127.0.0.1:1", t.TempDir(), nil)
	cfg.RegistrationToken = ""
	w, err := New(cfg)
	require.NoError(t, err)
	require.ErrorIs(t, w.Run(context.Background()), errNoRegistrationToken)
}

func TestJobEnvironmentLogsAndFailedResult(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	a := assignment(b.out, "sh", "-c", `env > "$OUT/env.txt"; cp "$JOBPLANE_PARAMS_FILE" "$OUT/params.json"; pwd > "$OUT/pwd"; `+
		`echo out1; echo err1 >&2; echo out2; printf 'no newline'; exit 3`)
	a.Params = json.RawMessage(`{"account":"1001","dry-run":true,"limits":{"a": 1},"evil":"$(touch /tmp/pwned) ; rm -rf /"}`)
	a.RunToken = &protocol.RunToken{Token: "jws.token.sig"}
	a.Leases = []protocol.FencedKey{{Key: "backfill:account:1001", FencingToken: 7}}
	b.srv.enqueue(a)
	b.start(t)
	b.srv.waitFor(t, "result", 15*time.Second, func() bool { return len(b.srv.results[a.AttemptID]) > 0 })

	b.srv.mu.Lock()
	res := b.srv.results[a.AttemptID]
	lines := b.srv.logs[a.AttemptID]
	seqs := b.srv.seqs[a.AttemptID]
	b.srv.mu.Unlock()
	require.Len(t, res, 1)
	require.Equal(t, "failed", res[0].Outcome)
	require.Equal(t, 3, res[0].ExitCode)
	require.Equal(t, "exit status 3", res[0].Summary)
	require.NotEmpty(t, res[0].RequestID)

	for i, s := range seqs {
		require.Equal(t, int64(i+1), s, "seqs = %v", seqs)
	}
	var stdout, stderr []string
	for _, l := range lines {
		switch l.Stream {
		case "stdout":
			stdout = append(stdout, l.Text)
		case "stderr":
			stderr = append(stderr, l.Text)
		}
	}
	require.Equal(t, []string{"out1", "out2", "no newline"}, stdout)
	require.Equal(t, []string{"err1"}, stderr)
	require.Equal(t, "system", lines[0].Stream)
	require.Contains(t, lines[0].Text, "starting attempt 1")
	require.Equal(t, "jobplane: process ended: exit status 3", lines[len(lines)-1].Text)

	envText, err := os.ReadFile(filepath.Join(b.out, "env.txt"))
	require.NoError(t, err)
	env := map[string]string{}
	for _, kv := range strings.Split(strings.TrimSpace(string(envText)), "\n") {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	want := map[string]string{
		"JOBPLANE_API":            b.ts.URL,
		"JOBPLANE_RUN_ID":         a.RunID, // job.env cannot forge it
		"JOBPLANE_ATTEMPT_ID":     a.AttemptID,
		"JOBPLANE_JOB":            "backfill-account",
		"JOBPLANE_CHANNEL":        "prod",
		"JOBPLANE_COMMIT":         "0123abcd",
		"JOBPLANE_RUN_TOKEN":      "jws.token.sig",
		"JOBPLANE_PARAM_ACCOUNT":  "1001",
		"JOBPLANE_PARAM_DRY_RUN":  "true",
		"JOBPLANE_PARAM_LIMITS":   `{"a":1}`,
		"JOBPLANE_PARAM_EVIL":     "$(touch /tmp/pwned) ; rm -rf /",
		"JOBPLANE_FENCING_TOKENS": `{"backfill:account:1001":7}`,
		"OUT":                     b.out,
	}
	for k, v := range want {
		require.Equal(t, v, env[k], "env %s", k)
	}
	require.True(t, strings.HasPrefix(env["JOBPLANE_ARTIFACTS_DIR"], filepath.Join(b.dir, "work", a.AttemptID)))
	for k := range env {
		allowed := strings.HasPrefix(k, "JOBPLANE_") || k == "OUT" || k == "PATH" || k == "HOME" || k == "LANG" || k == "TMPDIR" ||
			k == "TRACEPARENT" || // the run's trace (TestJobGetsTraceparent)
			k == "PWD" || k == "SHLVL" || k == "_" // set by sh itself
		require.True(t, allowed, "unexpected variable %s leaked into the job", k)
	}
	pwd, err := os.ReadFile(filepath.Join(b.out, "pwd"))
	require.NoError(t, err)
	require.Equal(t, filepath.Join(b.dir, "work", a.AttemptID, "workspace"), strings.TrimSpace(string(pwd)))
	params, err := os.ReadFile(filepath.Join(b.out, "params.json"))
	require.NoError(t, err)
	require.JSONEq(t, string(a.Params), string(params))
	require.NoDirExists(t, filepath.Join(b.dir, "work", a.AttemptID), "the work dir is removed after the attempt")
}

func TestSucceededResult(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	a := assignment(b.out, "true")
	b.srv.enqueue(a)
	b.start(t)
	b.srv.waitFor(t, "result", 15*time.Second, func() bool { return len(b.srv.results[a.AttemptID]) > 0 })
	b.srv.mu.Lock()
	defer b.srv.mu.Unlock()
	require.Equal(t, "succeeded", b.srv.results[a.AttemptID][0].Outcome)
	require.Equal(t, 0, b.srv.results[a.AttemptID][0].ExitCode)
	// A short job's output goes with its result: no separate logs call.
	last := b.srv.results[a.AttemptID][0].Logs
	require.NotNil(t, last, "the final log chunk rides on the result")
	require.Equal(t, "jobplane: process ended: exit status 0", last.Lines[len(last.Lines)-1].Text)
	require.Equal(t, slices.Max(b.srv.seqs[a.AttemptID]), last.Seq, "the result's chunk is the last")
}

func TestCancelViaRenewKillsProcessGroup(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	pidFile := filepath.Join(b.out, "pid")
	a := assignment(b.out, "sh", "-c", `sleep 60 & echo $! > "$OUT/pid"; wait`)
	cancelNow := make(chan struct{})
	b.srv.renew = func(string, int) (int, string, bool) {
		select {
		case <-cancelNow:
			return 200, "", true
		default:
			return 200, "", false
		}
	}
	b.srv.enqueue(a)
	b.start(t)
	pid := readPid(t, pidFile)
	require.True(t, alive(pid))
	close(cancelNow)
	b.srv.waitFor(t, "result", 15*time.Second, func() bool { return len(b.srv.results[a.AttemptID]) > 0 })
	require.False(t, alive(pid), "the shell's child must die with the group")

	b.srv.mu.Lock()
	defer b.srv.mu.Unlock()
	res := b.srv.results[a.AttemptID][0]
	require.Equal(t, "failed", res.Outcome)
	require.Equal(t, "cancelled", res.Summary)
	var texts []string
	for _, l := range b.srv.logs[a.AttemptID] {
		if l.Stream == "system" {
			texts = append(texts, l.Text)
		}
	}
	require.Contains(t, texts, "jobplane: stopping job: cancelled")
}

func TestLeaseLostKillsWithoutResult(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	a := assignment(b.out, "sh", "-c", `sleep 60 & echo $! > "$OUT/pid"; wait`)
	expire := make(chan struct{})
	b.srv.renew = func(string, int) (int, string, bool) {
		select {
		case <-expire:
			return 409, protocol.CodeLeaseExpired, false
		default:
			return 200, "", false
		}
	}
	b.srv.enqueue(a)
	b.start(t)
	pid := readPid(t, filepath.Join(b.out, "pid"))
	close(expire)
	require.Eventually(t, func() bool { return !alive(pid) }, 10*time.Second, 20*time.Millisecond)
	// The worker goes back to claiming; by then it has decided about the result.
	b.srv.mu.Lock()
	n := len(b.srv.claimRequests)
	b.srv.mu.Unlock()
	b.srv.waitFor(t, "next claim", 10*time.Second, func() bool { return len(b.srv.claimRequests) > n+1 })
	b.srv.mu.Lock()
	defer b.srv.mu.Unlock()
	require.Empty(t, b.srv.results[a.AttemptID])
	require.Empty(t, b.srv.relinquished)
}

// TestTrustWindowEndsWithoutRenewal: every renew fails transiently; when the
// worker's own clock passes the trust window it kills the job and posts
// nothing (RELIABILITY L10, C7).
func TestTrustWindowEndsWithoutRenewal(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Now())
	b := setup(t, clk)
	b.srv.renew = func(string, int) (int, string, bool) { return 503, protocol.CodeUnavailable, false }
	a := assignment(b.out, "sh", "-c", `sleep 60 & echo $! > "$OUT/pid"; wait`)
	a.Lease.TTLSeconds = 30
	b.srv.enqueue(a)
	b.start(t)
	pid := readPid(t, filepath.Join(b.out, "pid"))

	// Inside the window (30 s − 3 s margin, SIGTERM 2 s before its end) the
	// job runs on while renewals keep failing.
	for range 24 {
		clk.Advance(time.Second)
		time.Sleep(30 * time.Millisecond)
	}
	b.srv.waitFor(t, "failed renewals", 10*time.Second, func() bool { return b.srv.renews[a.AttemptID] >= 3 })
	require.True(t, alive(pid))
	clk.Advance(3 * time.Second) // 27 s: the window has ended
	require.Eventually(t, func() bool { return !alive(pid) }, 10*time.Second, 20*time.Millisecond)
	b.cancel()
	<-b.done
	b.srv.mu.Lock()
	defer b.srv.mu.Unlock()
	require.Empty(t, b.srv.results[a.AttemptID])
	require.Empty(t, b.srv.relinquished, "nothing is sent after the window")
	require.Empty(t, b.srv.badRequests)
}

func TestLostClaimAnswerIsRetriedWithSameRequestID(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.srv.loseClaimAnswers = 2
	a := assignment(b.out, "true")
	b.srv.enqueue(a)
	b.start(t)
	b.srv.waitFor(t, "result", 15*time.Second, func() bool { return len(b.srv.results[a.AttemptID]) > 0 })
	b.srv.waitFor(t, "a claim after the attempt", 15*time.Second, func() bool {
		r := b.srv.claimRequests
		return len(r) > 3 && r[len(r)-1] != r[2]
	})
	b.srv.mu.Lock()
	defer b.srv.mu.Unlock()
	reqs := b.srv.claimRequests
	require.GreaterOrEqual(t, len(reqs), 3)
	require.Equal(t, reqs[0], reqs[1])
	require.Equal(t, reqs[1], reqs[2])
	require.NotEqual(t, reqs[2], reqs[len(reqs)-1], "a new claim gets a new request_id")
	require.Len(t, b.srv.results[a.AttemptID], 1)
}

func TestShutdownRelinquishesRunningAttempt(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	a := assignment(b.out, "sh", "-c", `sleep 60 & echo $! > "$OUT/pid"; wait`)
	b.srv.enqueue(a)
	b.start(t)
	pid := readPid(t, filepath.Join(b.out, "pid"))
	b.cancel()
	select {
	case err := <-b.done:
		require.NoError(t, err)
	case <-time.After(15 * time.Second):
		t.Fatal("worker did not stop")
	}
	require.False(t, alive(pid))
	b.srv.mu.Lock()
	defer b.srv.mu.Unlock()
	require.Equal(t, reasonShutdown, b.srv.relinquished[a.AttemptID])
	require.Empty(t, b.srv.results[a.AttemptID])
}

func TestServerDownAtStart(t *testing.T) {
	t.Parallel()
	// Reserve a port, then leave it closed: connections are refused.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())

	srv := newFakeServer(t, clock.Real{})
	out := t.TempDir()
	a := assignment(out, "true")
	srv.enqueue(a)
	startWorker(t, testConfig(t, "http://"+addr, t.TempDir(), clock.Real{}))
	time.Sleep(700 * time.Millisecond) // several refused registrations

	ts := httptest.NewUnstartedServer(srv)
	ts.Listener.Close()
	ts.Listener, err = net.Listen("tcp", addr)
	require.NoError(t, err)
	ts.Start()
	t.Cleanup(ts.Close)
	srv.waitFor(t, "result after the server came up", 20*time.Second, func() bool { return len(srv.results[a.AttemptID]) > 0 })
	srv.mu.Lock()
	defer srv.mu.Unlock()
	require.Equal(t, 1, srv.registrations)
	require.Equal(t, "succeeded", srv.results[a.AttemptID][0].Outcome)
}

var _ http.Handler = (*fakeServer)(nil)

// A worker with several slots asks for as many attempts as slots are free in
// one claim, runs them at once, and repeats a claim whose answer was lost
// with the same request_id and max.
func TestSlotsClaimInBatches(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.srv.loseClaimAnswers = 1
	var as []*protocol.Assignment
	for i := range 3 {
		a := assignment(b.out, "sh", "-c", `touch "$OUT/started-`+strconv.Itoa(i)+`"; while [ $(ls "$OUT" | grep -c started-) -lt 3 ]; do sleep 0.05; done`)
		// This test is about claims, not leases: a TTL a starved machine
		// cannot outlast between two heartbeats.
		a.Lease.TTLSeconds = 15
		as = append(as, a)
		b.srv.enqueue(a)
	}
	cfg := testConfig(t, b.ts.URL, b.dir, b.clk)
	cfg.Concurrency = 3
	b.cancel, b.done = startWorker(t, cfg)
	// Each job waits until all three started: they only finish if they ran
	// at once.
	b.srv.waitForResults(t, as)
	b.srv.mu.Lock()
	defer b.srv.mu.Unlock()
	require.Equal(t, 3, b.srv.claimMaxes[0], "all slots free: one claim asks for three")
	require.Equal(t, b.srv.claimRequests[0], b.srv.claimRequests[1], "a lost answer is asked again with the same request_id")
	require.Equal(t, 3, b.srv.claimMaxes[1], "and the same max")
	for _, a := range as {
		require.Len(t, b.srv.results[a.AttemptID], 1)
		require.Equal(t, "succeeded", b.srv.results[a.AttemptID][0].Outcome)
	}
}

// The results of attempts that end while a result call is in flight go
// together in one POST /v1/runner/results once it returns; each attempt's
// result is recorded once.
func TestResultsEndingTogetherShareACall(t *testing.T) {
	t.Parallel()
	for _, batchRoute := range []bool{true, false} {
		t.Run(fmt.Sprintf("batch route %v", batchRoute), func(t *testing.T) {
			t.Parallel()
			b := setup(t, nil)
			b.srv.holdFirstResult = make(chan struct{})
			b.srv.noBatchRoute = !batchRoute
			var as []*protocol.Assignment
			for range 3 {
				a := assignment(b.out, "true")
				as = append(as, a)
				b.srv.enqueue(a)
			}
			cfg := testConfig(t, b.ts.URL, b.dir, b.clk)
			cfg.Concurrency = 3
			var w *Worker
			w, b.cancel, b.done = startWorkerW(t, cfg)
			var first int
			b.srv.waitFor(t, "the first result call", 20*time.Second, func() bool {
				if len(b.srv.resultCalls) == 0 {
					return false
				}
				first = len(b.srv.resultCalls[0])
				return true
			})
			// While the first call is held, the other results wait in the
			// worker for it to return.
			deadline := time.Now().Add(20 * time.Second)
			for {
				w.results.mu.Lock()
				queued := len(w.results.queue)
				w.results.mu.Unlock()
				if queued == 3-first {
					break
				}
				require.True(t, time.Now().Before(deadline), "results queued: %d, want %d", queued, 3-first)
				time.Sleep(5 * time.Millisecond)
			}
			close(b.srv.holdFirstResult)
			b.srv.waitForResults(t, as)
			b.srv.mu.Lock()
			defer b.srv.mu.Unlock()
			for _, a := range as {
				require.Len(t, b.srv.results[a.AttemptID], 1)
				require.Equal(t, "succeeded", b.srv.results[a.AttemptID][0].Outcome)
			}
			var sizes []int
			for _, c := range b.srv.resultCalls {
				sizes = append(sizes, len(c))
			}
			if batchRoute {
				require.Len(t, sizes, 2, "one call in flight, then one for the rest: %v", sizes)
				require.Equal(t, 3, sizes[0]+sizes[1])
				require.Greater(t, max(sizes[0], sizes[1]), 1, "results that waited went together")
			} else {
				// An older server: one call per result once the batch was
				// refused with 404.
				require.Equal(t, 3, len(sizes), "%v", sizes)
				require.Equal(t, []int{1, 1, 1}, sizes)
				w.results.mu.Lock()
				require.True(t, w.results.single)
				w.results.mu.Unlock()
			}
		})
	}
}

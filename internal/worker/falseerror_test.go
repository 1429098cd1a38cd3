package worker

import (
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/protocol"
)

// levelRecorder keeps the log lines for assertions and passes them to t.Log.
type levelRecorder struct {
	t     *testing.T
	mu    sync.Mutex
	lines []string
}

func (r *levelRecorder) Write(p []byte) (int, error) {
	r.t.Log(strings.TrimRight(string(p), "\n"))
	r.mu.Lock()
	r.lines = append(r.lines, string(p))
	r.mu.Unlock()
	return len(p), nil
}

func (r *levelRecorder) grep(s string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, l := range r.lines {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return out
}

// A renewal answered "stale" because the result it raced with ended the
// attempt is no lost lease: the worker logs no ERROR for it, and the
// attempt is reported finished.
func TestRenewRacingTheResultIsNoError(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	a := assignment(b.out, "true")
	b.srv.holdFirstResult = make(chan struct{})
	b.srv.renew = func(_ string, _ int) (int, string, bool) {
		if len(b.srv.resultCalls) > 0 { // s.mu is held
			return 409, protocol.CodeAttemptStale, false
		}
		return 200, "", false
	}
	b.srv.enqueue(a)
	rec := &levelRecorder{t: t}
	cfg := testConfig(t, b.ts.URL, b.dir, b.clk)
	cfg.Logger = slog.New(slog.NewTextHandler(rec, &slog.HandlerOptions{Level: slog.LevelDebug}))
	b.cancel, b.done = startWorker(t, cfg)
	// The result is in flight; a renewal comes back stale meanwhile.
	b.srv.waitFor(t, "a stale renewal during the result", 15*time.Second, func() bool {
		return len(b.srv.resultCalls) > 0 && b.srv.renews[a.AttemptID] > 0
	})
	time.Sleep(100 * time.Millisecond) // the worker has read the renewal's answer
	close(b.srv.holdFirstResult)
	b.srv.waitFor(t, "result", 15*time.Second, func() bool { return len(b.srv.results[a.AttemptID]) > 0 })
	require.Eventually(t, func() bool { return len(rec.grep("worker: attempt finished")) > 0 }, 10*time.Second, 20*time.Millisecond)
	require.Empty(t, rec.grep("level=ERROR"), "no ERROR for a renewal that raced the result")
}

// A disabled runner's refused claims are an operator's decision: one WARN,
// no ERROR, however often the worker asks again.
func TestDisabledRunnerClaimsAreNoError(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.srv.disabled = true
	rec := &levelRecorder{t: t}
	cfg := testConfig(t, b.ts.URL, b.dir, b.clk)
	cfg.Logger = slog.New(slog.NewTextHandler(rec, &slog.HandlerOptions{Level: slog.LevelDebug}))
	b.cancel, b.done = startWorker(t, cfg)
	b.srv.waitFor(t, "several refused claims", 15*time.Second, func() bool { return len(b.srv.claimRequests) >= 4 })
	require.Empty(t, rec.grep("level=ERROR"), "a disabled runner is no error")
	require.Len(t, rec.grep("runner is disabled"), 1, "said once")
}

// A user's cancel stops the job at INFO: it is no fault.
func TestCancelIsNoWarning(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	a := assignment(b.out, "sh", "-c", `sleep 60`)
	b.srv.renew = func(string, int) (int, string, bool) { return 200, "", true }
	b.srv.enqueue(a)
	rec := &levelRecorder{t: t}
	cfg := testConfig(t, b.ts.URL, b.dir, b.clk)
	cfg.Logger = slog.New(slog.NewTextHandler(rec, &slog.HandlerOptions{Level: slog.LevelDebug}))
	b.cancel, b.done = startWorker(t, cfg)
	b.srv.waitFor(t, "result", 15*time.Second, func() bool { return len(b.srv.results[a.AttemptID]) > 0 })
	require.NotEmpty(t, rec.grep(`level=INFO msg="worker: stopping job"`))
	require.Empty(t, rec.grep(`level=WARN msg="worker: stopping job"`))
	require.Empty(t, rec.grep("level=ERROR"))
}

package process

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/executor"
)

// A mini worker is this test binary re-executed: it starts one ticking job
// through the process executor and renews its bound every renewEvery, as
// a worker does after each lease renewal, recording each bound it sends.
const (
	miniWorkerEnv  = "JOBPLANE_TEST_MINIWORKER_DIR"
	miniWorkerMode = "JOBPLANE_TEST_MINIWORKER_MODE"
	window         = 1500 * time.Millisecond // TTL minus margin
	renewEvery     = 300 * time.Millisecond
	// expiryAfterBound is how much later than the worker's bound the
	// server's lease expires: max(1 s, TTL/10).
	expiryAfterBound = time.Second
)

// tickerJob writes a Unix-nanosecond timestamp every 0.1 s to ticks, and
// starts a daemonized grandchild (double fork, new session) that does the
// same to gticks; both record their PIDs.
const tickerJob = `echo $$ >> "$D/pids"
( setsid sh -c 'echo $$ >> "$D/pids"; while :; do date +%s%N >> "$D/gticks"; sleep 0.1; done' & )
while :; do date +%s%N >> "$D/ticks"; sleep 0.1; done`

// miniWorker runs the job; mode "renew" renews until killed, "cut" stops
// renewing after a second (cut off from every server: renewals fail),
// "unbounded" gives the job no bound at all (the guard removed).
func miniWorker(dir, mode string) int {
	bounds, err := os.OpenFile(filepath.Join(dir, "bounds"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return 2
	}
	record := func(t time.Time) { fmt.Fprintln(bounds, t.UnixNano()) }
	spec := &executor.Spec{
		Command: []string{"sh", "-c", tickerJob},
		Env:     []string{"PATH=/usr/bin:/bin", "D=" + dir},
		Layout:  executor.Layout{Root: dir, Workspace: dir},
		Output:  func(string, string) {},
	}
	if mode != "unbounded" {
		spec.Until = time.Now().Add(window)
		record(spec.Until)
	}
	j, err := New(Options{}).Start(context.Background(), spec)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	go func() {
		started := time.Now()
		for mode == "renew" || (mode == "cut" && time.Since(started) < time.Second) {
			time.Sleep(renewEvery)
			until := time.Now().Add(window)
			record(until)
			j.Extend(until)
		}
	}()
	j.Wait()
	return 0
}

// readInts reads one integer a line.
func readInts(t *testing.T, path string) []int64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(t, err)
	var out []int64
	for _, l := range strings.Fields(string(b)) {
		n, err := strconv.ParseInt(l, 10, 64)
		if err == nil {
			out = append(out, n)
		}
	}
	return out
}

// alive reports whether pid is a live (not zombie) process.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(b), ')')
	return i > 0 && !strings.HasPrefix(string(b[i+1:]), " Z")
}

// TestJobEndsBeforeLeaseExpiry: whatever happens to the worker (SIGKILL,
// SIGSTOP, cut off from the server so that it renews nothing) the job and
// its daemonized grandchild stop before the lease's expiry as last
// renewed; the unbounded variant (no bound given to the supervisor) shows
// that the same measurement sees a job outlive its lease.
func TestJobEndsBeforeLeaseExpiry(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"sigkill", "sigstop", "cut", "unbounded"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			workerMode := map[string]string{"sigkill": "renew", "sigstop": "renew", "cut": "cut", "unbounded": "unbounded"}[mode]
			cmd := exec.Command("/proc/self/exe", "-test.run=^$")
			cmd.Env = append(os.Environ(), miniWorkerEnv+"="+dir, miniWorkerMode+"="+workerMode)
			cmd.Stderr = os.Stderr
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			require.NoError(t, cmd.Start())
			waited := make(chan error, 1)
			go func() { waited <- cmd.Wait() }()
			t.Cleanup(func() {
				_ = cmd.Process.Signal(syscall.SIGCONT)
				_ = cmd.Process.Kill()
				<-waited
				for _, pid := range readInts(t, filepath.Join(dir, "pids")) {
					_ = syscall.Kill(int(pid), syscall.SIGKILL)
				}
			})
			require.Eventually(t, func() bool {
				return len(readInts(t, filepath.Join(dir, "pids"))) == 2 && len(readInts(t, filepath.Join(dir, "gticks"))) > 0
			}, 10*time.Second, 20*time.Millisecond, "the job and its grandchild started")
			time.Sleep(time.Second) // a few renewals

			var acted time.Time
			switch mode {
			case "sigkill":
				require.NoError(t, cmd.Process.Kill())
				acted = time.Now()
			case "sigstop", "unbounded":
				require.NoError(t, cmd.Process.Signal(syscall.SIGSTOP))
				acted = time.Now()
			case "cut":
				acted = time.Now() // renewals stopped about now
			}
			// Long enough for the bound and the expiry to pass.
			time.Sleep(window + expiryAfterBound + 500*time.Millisecond)
			bounds := readInts(t, filepath.Join(dir, "bounds"))
			pids := readInts(t, filepath.Join(dir, "pids"))
			last := max(slices.Max(readInts(t, filepath.Join(dir, "ticks"))), slices.Max(readInts(t, filepath.Join(dir, "gticks"))))
			if mode == "unbounded" {
				require.Greater(t, last, acted.Add(window+expiryAfterBound).UnixNano(), "without a bound the job outlives the lease")
				return
			}
			require.NotEmpty(t, bounds)
			bound := slices.Max(bounds)
			expiry := bound + int64(expiryAfterBound)
			t.Logf("%s: last tick %s after the last bound, %s before the lease expiry; %s after the worker was hit",
				mode, time.Duration(last-bound), time.Duration(expiry-last), time.Duration(last-acted.UnixNano()))
			require.Less(t, last, expiry, "the job acted after its lease expired")
			if mode == "sigkill" {
				require.Less(t, last, acted.Add(500*time.Millisecond).UnixNano(), "a dead worker's job ends at once")
			}
			for _, pid := range pids {
				require.False(t, alive(int(pid)), "process %d of the job is still running", pid)
			}
		})
	}
}

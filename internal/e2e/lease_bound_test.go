package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/containertest"
	"github.com/jobplane/jobplane/internal/executor/container"
	"github.com/jobplane/jobplane/internal/protocol"
)

// containerTicker writes "j UPTIME" every 0.1 s to ticks in its workspace
// (its working directory), and so does a grandchild it daemonizes (setsid,
// detached from every stream) with "g UPTIME", for about 10 s; each first
// writes "p PID". The time is /proc/uptime: busybox's date has no
// sub-second format, and a container shares the host's boot clock.
const containerTicker = `L='echo "p $$" >> ticks; i=0; while [ $i -lt 100 ]; do read up rest < /proc/uptime; echo "$0 $up" >> ticks; sleep 0.1; i=$((i+1)); done'
setsid sh -c "$L" g </dev/null >/dev/null 2>&1 &
sh -c "$L" j`

// bootTime is the wall-clock instant of the machine's boot, from which
// /proc/uptime counts.
func bootTime(t *testing.T) time.Time {
	t.Helper()
	b, err := os.ReadFile("/proc/uptime")
	now := time.Now()
	require.NoError(t, err)
	up, err := strconv.ParseFloat(strings.Fields(string(b))[0], 64)
	require.NoError(t, err)
	return now.Add(-time.Duration(up * float64(time.Second)))
}

// containerTicks reads a containerTicker file: the wall-clock instants of
// the job's ticks and of its grandchild's, and the PIDs they wrote.
func containerTicks(t *testing.T, path string, boot time.Time) (job, grandchild []time.Time, pids []int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil, nil, nil
	}
	require.NoError(t, err)
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) != 2 {
			continue
		}
		if f[0] == "p" {
			if pid, err := strconv.Atoi(f[1]); err == nil {
				pids = append(pids, pid)
			}
			continue
		}
		up, err := strconv.ParseFloat(f[1], 64)
		if err != nil {
			continue
		}
		at := boot.Add(time.Duration(up * float64(time.Second)))
		switch f[0] {
		case "j":
			job = append(job, at)
		case "g":
			grandchild = append(grandchild, at)
		}
	}
	return job, grandchild, pids
}

// attemptTicks is the ticks file in the workspace of a worker's attempt.
func attemptTicks(stateDir, attemptID string) string {
	return filepath.Join(stateDir, "work", attemptID, "workspace", "ticks")
}

// TestJobEndsBeforeLeaseExpiryE2E: a real server and real `jobplane
// worker` processes, with the process executor and with the container
// executor. Worker A runs a job that ticks every 100 ms, with a daemonized
// grandchild that ticks too; then A is SIGKILLed, SIGSTOPped, or cut off
// from the server (its server URL goes through a proxy that stops passing
// bytes). Every tick of the job and of its grandchild is before the
// lease's expiry as the server last renewed it, their processes (the
// container) are gone by then, and the next attempt starts on worker B.
// Afterwards nothing of jobplane's is left in the engine: a killed
// worker's container is removed by the worker restarted, a stopped or
// cut-off one's by the worker itself.
func TestJobEndsBeforeLeaseExpiryE2E(t *testing.T) {
	t.Parallel()
	boot := bootTime(t)
	// One at a time: each measures real time, which a loaded machine
	// running the others would blur.
	t.Run("process", func(t *testing.T) {
		for _, mode := range []string{"sigkill", "sigstop", "cut"} {
			t.Run(mode, func(t *testing.T) { leaseBoundRound(t, nil, nil, boot, mode) })
		}
	})
	t.Run("container", func(t *testing.T) {
		eng, args := containerWorkerArgs(t)
		for _, mode := range []string{"sigkill", "sigstop", "cut"} {
			t.Run(mode, func(t *testing.T) { leaseBoundRound(t, eng, args, boot, mode) })
		}
	})
}

// leaseBoundRound is one round of TestJobEndsBeforeLeaseExpiryE2E; eng is
// nil for the process executor.
func leaseBoundRound(t *testing.T, eng *containertest.Engine, args []string, boot time.Time, mode string) {
	e := newEnv(t, func(string) []job {
		// lease_ttl 3 s: the worker trusts a renewal for 2 s.
		return []job{{name: "ticker", script: containerTicker, leaseTTL: "3s", maxAttempts: 2, backoff: "1s"}}
	})
	s := startServer(t, backends[0].dsn(t), e)
	px := newFaultProxy(t, s.addr)
	stateA, stateB := t.TempDir(), t.TempDir()
	wa := startWorkerVia(t, px.url(), "worker-a", stateA, s.registrationToken(), args...)
	t.Cleanup(func() { _ = wa.proc.cmd.Process.Signal(syscall.SIGCONT) })

	run := s.createRun("ticker")
	r := s.waitRun(run.ID, 2*time.Minute, "attempt 1 leased", func(r *protocol.Run) bool {
		return len(r.Attempts) == 1 && r.Attempts[0].State == "leased"
	})
	att1 := r.Attempts[0]
	require.Equal(t, wa.runnerID, att1.Runner)
	// A hard link keeps what the job writes readable after its worker
	// removes the attempt's directory.
	ticks1 := filepath.Join(e.dir, "ticks-1")
	t.Cleanup(func() {
		// A job that outlived its lease is not left to the next test.
		_, _, pids := containerTicks(t, ticks1, boot)
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	eventually(t, 2*time.Minute, "attempt 1's job and grandchild ticking", func() (bool, string) {
		if _, err := os.Stat(ticks1); err != nil {
			if err := os.Link(attemptTicks(stateA, att1.ID), ticks1); err != nil {
				return false, err.Error()
			}
		}
		j, g, _ := containerTicks(t, ticks1, boot)
		return len(j) >= 5 && len(g) >= 5, fmt.Sprintf("%d and %d ticks", len(j), len(g))
	})
	ctr := container.ContainerName(wa.runnerID, att1.ID)
	wb := startWorkerVia(t, s.url, "worker-b", stateB, s.registrationToken(), args...)

	switch mode {
	case "sigkill":
		wa.proc.kill()
	case "sigstop":
		require.NoError(t, wa.proc.cmd.Process.Signal(syscall.SIGSTOP))
	case "cut":
		px.partition()
	}
	hit := time.Now()
	// A renewal in flight at the fault lands, or never will.
	time.Sleep(700 * time.Millisecond)
	expiry := *s.getRun(run.ID).Attempts[0].LeaseExpiresAt

	// The next attempt starts on worker B.
	var first2 time.Time
	eventually(t, 2*time.Minute, "attempt 2 ticking on worker B", func() (bool, string) {
		r := s.getRun(run.ID)
		if len(r.Attempts) < 2 {
			return false, runSummary(r)
		}
		j, _, _ := containerTicks(t, attemptTicks(stateB, r.Attempts[1].ID), boot)
		if len(j) == 0 {
			return false, runSummary(r)
		}
		require.Equal(t, wb.runnerID, r.Attempts[1].Runner)
		first2 = j[0]
		return true, ""
	})
	time.Sleep(time.Until(expiry.Add(500 * time.Millisecond)))
	if e := s.getRun(run.ID).Attempts[0].LeaseExpiresAt; e.After(expiry) {
		expiry = *e
	}

	j, g, pids := containerTicks(t, ticks1, boot)
	require.NotEmpty(t, j)
	require.NotEmpty(t, g)
	lastJ, lastG := slices.MaxFunc(j, time.Time.Compare), slices.MaxFunc(g, time.Time.Compare)
	t.Logf("%s: the job's last tick %s after the fault, %s before the lease expiry; the grandchild's %s after, %s before; attempt 2 began %s after the expiry",
		mode, lastJ.Sub(hit).Round(time.Millisecond), expiry.Sub(lastJ).Round(time.Millisecond),
		lastG.Sub(hit).Round(time.Millisecond), expiry.Sub(lastG).Round(time.Millisecond), first2.Sub(expiry).Round(time.Millisecond))
	// Left alone, the job would tick for 10 s: well past the expiry.
	require.True(t, slices.MinFunc(j, time.Time.Compare).Add(9*time.Second).After(expiry.Add(2*time.Second)),
		"the job would have ended by itself before the lease expiry: the check could not fail")
	require.True(t, lastJ.Before(expiry), "the job ticked at %s, after the lease expiry %s", lastJ, expiry)
	require.True(t, lastG.Before(expiry), "the grandchild ticked at %s, after the lease expiry %s", lastG, expiry)
	require.True(t, lastJ.Before(first2) && lastG.Before(first2), "attempt 1 still acted when attempt 2 began")
	if eng == nil {
		require.Len(t, pids, 2, "the job's and the grandchild's PIDs")
		for _, pid := range pids {
			require.False(t, alive(pid), "process %d of attempt 1 runs after the lease expiry", pid)
		}
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if res, err := eng.Client.ContainerInspect(ctx, ctr, client.ContainerInspectOptions{}); err == nil {
			require.False(t, res.Container.State.Running, "attempt 1's container still runs after the lease expiry")
		}
	}

	switch mode {
	case "sigkill":
		// Restarted, worker A removes the container of the attempt it
		// no longer holds.
		wa = startWorkerVia(t, px.url(), "worker-a", stateA, "", args...)
	case "sigstop":
		require.NoError(t, wa.proc.cmd.Process.Signal(syscall.SIGCONT))
	case "cut":
		px.heal()
	}
	r = s.waitState(run.ID, 2*time.Minute, "succeeded", "failed", "cancelled", "timed_out")
	require.Equal(t, "succeeded", r.State, runSummary(r))
	require.Len(t, r.Attempts, 2, runSummary(r))
	require.Equal(t, "expired", r.Attempts[0].State, runSummary(r))
	require.Equal(t, wb.runnerID, r.Attempts[1].Runner)
	if eng == nil {
		return
	}
	eventually(t, time.Minute, "no container of jobplane's left", func() (bool, string) {
		left := append(eng.Containers(t, container.LabelRunner, wa.runnerID), eng.Containers(t, container.LabelRunner, wb.runnerID)...)
		return len(left) == 0, fmt.Sprint(left)
	})
}

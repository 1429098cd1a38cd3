package e2e

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/apiclient"
	"github.com/jobplane/jobplane/internal/protocol"
)

// runIDFrom finds the run ID in the first line `run ID STATE (...)` that
// `jobplane run --wait` prints on stderr.
func runIDFrom(t *testing.T, stderr string) string {
	t.Helper()
	for _, l := range strings.Split(stderr, "\n") {
		if f := strings.Fields(l); len(f) >= 3 && f[0] == "run" {
			return f[1]
		}
	}
	require.FailNowf(t, "no run ID", "stderr of jobplane run:\n%s", stderr)
	return ""
}

// TestHappyPath: CLI → server → worker → job → log → CLI, through processes.
func TestHappyPath(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, func(dir string) []job {
			return []job{
				{name: "hello", script: `echo "hello from e2e"; echo "to stderr" >&2; echo "$JOBPLANE_ATTEMPT_ID" >> ` + dir + `/effects`},
				{name: "broken", script: `echo "about to fail"; exit 3`},
			}
		})
		s := startServer(t, b.dsn(t), e)
		w := startWorker(t, s, "worker-a", t.TempDir(), s.registrationToken())

		start := time.Now()
		out, errOut, code := runCLI(t, s, "run", "hello", "--wait")
		require.Equal(t, 0, code, "jobplane run hello --wait\nstdout:\n%s\nstderr:\n%s", out, errOut)
		require.Contains(t, out, "hello from e2e\n")
		require.Contains(t, out, "! to stderr\n")
		t.Logf("run hello --wait took %s", time.Since(start).Round(time.Millisecond))

		r := s.getRun(runIDFrom(t, errOut))
		require.Equal(t, "succeeded", r.State, runSummary(r))
		require.Len(t, r.Attempts, 1, runSummary(r))
		require.Equal(t, "succeeded", r.Attempts[0].State)
		require.Equal(t, w.runnerID, r.Attempts[0].Runner)
		require.Equal(t, []string{r.Attempts[0].ID}, e.lines("effects"), "the job ran exactly once")

		out, errOut, code = runCLI(t, s, "run", "broken", "--wait")
		require.Equal(t, 1, code, "a failed run makes --wait exit 1\nstdout:\n%s\nstderr:\n%s", out, errOut)
		require.Contains(t, out, "about to fail\n")
		r = s.getRun(runIDFrom(t, errOut))
		require.Equal(t, "failed", r.State, runSummary(r))
		require.Contains(t, errOut, r.ID+" failed")
	})
}

// TestWorkerKilledMidRun is acceptance case C3 through processes: SIGKILL of
// the worker holding a lease (its supervisor then ends its job), expiry, a
// retry elsewhere,
// and a late call of the dead worker refused without effect.
func TestWorkerKilledMidRun(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, func(dir string) []job {
			// The first attempt to start takes the "first" marker and hangs;
			// any later attempt finishes at once.
			// The marker is taken before the effect is written: the test
			// kills the job once it sees the effect, and a kill between the
			// two would leave the marker for attempt 2 to take and hang on.
			script := fmt.Sprintf(`echo $$ >> %[1]s/pids; first=; if mkdir %[1]s/first 2>/dev/null; then first=1; fi; `+
				`echo "$JOBPLANE_ATTEMPT_ID $$" >> %[1]s/effects; `+
				`if [ -n "$first" ]; then echo "first attempt, hanging"; sleep 30; fi; echo "finished $JOBPLANE_ATTEMPT_ID"`, dir)
			// lease_ttl 3s, not the 2 s minimum: at 2 s the worker's own
			// watchdog stops healthy jobs (see TestMinimumLeaseTTL).
			return []job{{name: "crashy", script: script, leaseTTL: "3s", maxAttempts: 2, backoff: "1s"}}
		})
		s := startServer(t, b.dsn(t), e)
		wa := startWorker(t, s, "worker-a", t.TempDir(), s.registrationToken())
		wb := startWorker(t, s, "worker-b", t.TempDir(), s.registrationToken())
		require.NotEqual(t, wa.runnerID, wb.runnerID)

		run := s.createRun("crashy")
		r := s.waitRun(run.ID, 20*time.Second, "attempt 1 leased and its job started", func(r *protocol.Run) bool {
			return len(r.Attempts) == 1 && r.Attempts[0].State == "leased" && r.Attempts[0].Runner != "" && len(e.lines("effects")) == 1
		})
		att1 := r.Attempts[0]
		victim, survivor := wa, wb
		if att1.Runner == wb.runnerID {
			victim, survivor = wb, wa
		}
		require.Equal(t, victim.runnerID, att1.Runner, "attempt 1 is held by one of the two workers")
		f := strings.Fields(e.lines("effects")[0])
		require.Equal(t, att1.ID, f[0], "the job sees its attempt ID")
		pgid, err := strconv.Atoi(f[1])
		require.NoError(t, err)

		// The worker dies; its job's supervisor ends everything the job
		// started at once, long before the lease expires.
		victim.proc.kill()
		killed := time.Now()
		eventually(t, 2*time.Second, "the dead worker's job ended", func() (bool, string) {
			m := groupMembers(pgid)
			return len(m) == 0, fmt.Sprint(m)
		})
		t.Logf("the dead worker's job was gone %s after the kill", time.Since(killed).Round(time.Millisecond))

		r = s.waitState(run.ID, 30*time.Second, "succeeded", "failed", "cancelled", "timed_out", "expired")
		t.Logf("killed worker %s; run ended %s %s later: %s", victim.name, r.State, time.Since(killed).Round(time.Millisecond), runSummary(r))
		require.Equal(t, "succeeded", r.State, runSummary(r))
		require.Len(t, r.Attempts, 2, runSummary(r))
		require.Equal(t, att1.ID, r.Attempts[0].ID)
		require.Equal(t, "expired", r.Attempts[0].State, "attempt 1's lease ran out")
		require.Equal(t, victim.runnerID, r.Attempts[0].Runner)
		require.Equal(t, 2, r.Attempts[1].Number)
		require.Equal(t, "succeeded", r.Attempts[1].State)
		require.Equal(t, survivor.runnerID, r.Attempts[1].Runner, "attempt 2 ran on the other worker")
		effects := e.lines("effects")
		require.Len(t, effects, 2, "one execution per attempt: %v", effects)
		require.True(t, strings.HasPrefix(effects[1], r.Attempts[1].ID+" "), "effects: %v", effects)
		logsBefore := s.allLogs(run.ID)

		// A resurrected copy of the dead worker (its real key and runner ID)
		// speaks for attempt 1. It never learns the lease token, so it
		// presents a made-up one; every attempt-scoped call must be refused
		// with 409 and change nothing.
		rc := runnerClient(t, s, victim.stateDir)
		require.Equal(t, victim.runnerID, rc.RunnerID)
		ref := apiclient.AttemptRef{RunID: run.ID, AttemptID: att1.ID, LeaseToken: "made-up-lease-token-" + randHex(8)}
		stale := func(what string, err error) {
			t.Helper()
			require.Error(t, err, "%s for expired attempt 1 was accepted", what)
			require.Equal(t, 409, apiclient.StatusOf(err), "%s: %v", what, err)
			require.True(t, apiclient.IsCode(err, protocol.CodeAttemptStale) || apiclient.IsCode(err, protocol.CodeLeaseExpired),
				"%s: want attempt_stale or lease_expired, got %v", what, err)
		}
		_, err = rc.Result(s.ctx(), ref, protocol.ResultRequest{Outcome: "failed", ExitCode: 137, Summary: "late", RequestID: "late-" + randHex(8)})
		stale("late result", err)
		_, err = rc.Renew(s.ctx(), ref)
		stale("late renew", err)
		err = rc.Logs(s.ctx(), ref, protocol.LogsRequest{Seq: 99, Lines: []protocol.LogLine{{At: time.Now().UTC(), Stream: "stdout", Text: "late line"}}})
		stale("late logs", err)
		// The runner itself is still a valid identity: its heartbeat works
		// and lists attempt 1 as one to stop.
		hb, err := rc.Heartbeat(s.ctx(), protocol.HeartbeatRequest{Status: "busy", Attempts: []string{att1.ID}})
		require.NoError(t, err)
		require.Contains(t, hb.CancelAttempts, att1.ID)

		after := s.getRun(run.ID)
		require.Equal(t, "succeeded", after.State)
		require.Len(t, after.Attempts, 2)
		for i := range after.Attempts {
			require.Equal(t, r.Attempts[i].State, after.Attempts[i].State)
			require.Equal(t, r.Attempts[i].Runner, after.Attempts[i].Runner)
			require.JSONEq(t, string(r.Attempts[i].Result), string(after.Attempts[i].Result))
		}
		require.Equal(t, logsBefore, s.allLogs(run.ID), "the late logs call added nothing")
	})
}

// TestServerRestartMidRun: the control plane dies and comes back on the
// same port and database while a job runs; the worker rides through it and
// nothing is lost or repeated.
func TestServerRestartMidRun(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
			t.Run(b.name+"/"+sigName(sig), func(t *testing.T) {
				t.Parallel()
				testServerRestart(t, b, sig)
			})
		}
	}
}

func sigName(sig syscall.Signal) string {
	if sig == syscall.SIGKILL {
		return "SIGKILL"
	}
	return "SIGTERM"
}

const chattyLines = 16

func testServerRestart(t *testing.T, b backend, sig syscall.Signal) {
	e := newEnv(t, func(dir string) []job {
		// ~8 s of output, a line every 0.5 s. The 10 s lease leaves the
		// worker a 9 s trust window: an outage of a second or two must not
		// cost the lease.
		script := fmt.Sprintf(`echo $$ >> %s/pids; i=1; while [ $i -le %d ]; do echo "line $i"; i=$((i+1)); sleep 0.5; done`, dir, chattyLines)
		return []job{{name: "chatty", script: script, leaseTTL: "10s"}}
	})
	s := startServer(t, b.dsn(t), e)
	w := startWorker(t, s, "worker-a", t.TempDir(), s.registrationToken())

	run := s.createRun("chatty")
	// Two outages, as in C10: after line 3 and after line 9 are stored.
	for _, mark := range []string{"line 3", "line 9"} {
		eventually(t, 20*time.Second, mark+" in the stored log", func() (bool, string) {
			page, err := s.admin.Logs(s.ctx(), run.ID, 0)
			if err != nil {
				return false, err.Error()
			}
			for _, l := range page.Lines {
				if l.Text == mark {
					return true, ""
				}
			}
			return false, fmt.Sprintf("%d lines", len(page.Lines))
		})

		down := time.Now()
		_ = s.proc.cmd.Process.Signal(sig)
		select {
		case <-s.proc.done:
		case <-time.After(10 * time.Second):
			require.FailNow(t, "server did not exit within 10 s of "+sigName(sig))
		}
		stopped := time.Since(down)
		// Stay down for a second, so the worker meets refused connections
		// for its log shipping (a line every 0.5 s) and must retry.
		time.Sleep(time.Until(down.Add(time.Second)))
		s.start() // same port, same database, same data dir
		outage := time.Since(down)
		t.Logf("after %q: server %s exited in %s, ready again after %s", mark, sigName(sig), stopped.Round(time.Millisecond), outage.Round(time.Millisecond))

		mid := s.getRun(run.ID)
		require.Equal(t, "running", mid.State, "the job must still be running after the restart, else the test proved nothing: %s", runSummary(mid))
	}

	r := s.waitState(run.ID, 30*time.Second, "succeeded", "failed", "cancelled", "timed_out", "expired")
	require.Equal(t, "succeeded", r.State, runSummary(r))
	require.Len(t, r.Attempts, 1, "no retry was needed: %s", runSummary(r))
	require.Equal(t, w.runnerID, r.Attempts[0].Runner)

	require.Contains(t, w.proc.output(), "failed, retrying", "the worker saw the outage and retried")

	logs := s.allLogs(run.ID)
	var stdout, all []string
	seen := map[int64]bool{}
	for _, l := range logs {
		require.False(t, seen[l.ID], "line id %d twice", l.ID)
		seen[l.ID] = true
		require.Equal(t, r.Attempts[0].ID, l.AttemptID)
		all = append(all, l.Stream+": "+l.Text)
		if l.Stream == "stdout" {
			stdout = append(stdout, l.Text)
		}
	}
	want := make([]string, chattyLines)
	for i := range want {
		want[i] = fmt.Sprintf("line %d", i+1)
	}
	require.Equal(t, want, stdout, "every line once, in order; whole log:\n%s", strings.Join(all, "\n"))
	require.True(t, slices.IsSortedFunc(logs, func(a, b protocol.RunLogLine) int { return int(a.ID - b.ID) }), "line ids increase")
	// System lines are not repeated either (a resent log chunk is ignored).
	counts := map[string]int{}
	for _, l := range all {
		counts[l]++
		require.Equal(t, 1, counts[l], "log line repeated: %q; whole log:\n%s", l, strings.Join(all, "\n"))
	}
}

// TestWorkerRestartKeepsIdentity: a worker restarted from its state
// directory, without a registration token, is the same runner.
func TestWorkerRestartKeepsIdentity(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, func(dir string) []job {
			return []job{{name: "hello", script: `echo "hello $JOBPLANE_ATTEMPT_ID"`}}
		})
		s := startServer(t, b.dsn(t), e)
		stateDir := t.TempDir()
		w1 := startWorker(t, s, "worker-a", stateDir, s.registrationToken())

		r := s.waitState(s.createRun("hello").ID, 20*time.Second, "succeeded", "failed")
		require.Equal(t, "succeeded", r.State, runSummary(r))
		require.Equal(t, w1.runnerID, r.Attempts[0].Runner)

		require.NoError(t, w1.proc.stop(t, 15*time.Second), "SIGTERM stops an idle worker cleanly")

		w2 := startWorker(t, s, "worker-a", stateDir, "") // no registration token
		require.Equal(t, w1.runnerID, w2.runnerID)
		r = s.waitState(s.createRun("hello").ID, 20*time.Second, "succeeded", "failed")
		require.Equal(t, "succeeded", r.State, runSummary(r))
		require.Len(t, r.Attempts, 1)
		require.Equal(t, w1.runnerID, r.Attempts[0].Runner, "the restarted worker claims as the same runner")

		list, err := s.admin.ListRunners(s.ctx())
		require.NoError(t, err)
		var ids []string
		for _, rn := range list.Runners {
			ids = append(ids, rn.ID)
		}
		require.Equal(t, []string{w1.runnerID}, ids, "exactly one runner is registered")
		require.Equal(t, "active", list.Runners[0].Status)
	})
}

// TestCancelKillsProcessGroup: `jobplane cancel` stops a running job and
// every process it started.
func TestCancelKillsProcessGroup(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, func(dir string) []job {
			script := fmt.Sprintf(`echo $$ >> %[1]s/pids; sleep 300 & echo $! >> %[1]s/children; sleep 300 & echo $! >> %[1]s/children; echo started; wait`, dir)
			return []job{{name: "forker", script: script, leaseTTL: "3s"}}
		})
		s := startServer(t, b.dsn(t), e)
		startWorker(t, s, "worker-a", t.TempDir(), s.registrationToken())

		run := s.createRun("forker")
		s.waitRun(run.ID, 20*time.Second, "job running with two children", func(r *protocol.Run) bool {
			return r.State == "running" && len(e.lines("children")) == 2
		})
		pids := e.pids()
		require.Len(t, pids, 1)
		pgid := pids[0]
		eventually(t, 5*time.Second, "sh and two sleeps in the job's process group", func() (bool, string) {
			m := groupMembers(pgid)
			return len(m) >= 3, strings.Join(m, " ")
		})

		out, errOut, code := runCLI(t, s, "cancel", run.ID)
		require.Equal(t, 0, code, "jobplane cancel\nstdout:\n%s\nstderr:\n%s", out, errOut)
		cancelled := time.Now()

		r := s.waitState(run.ID, 15*time.Second, "cancelled", "succeeded", "failed")
		require.Equal(t, "cancelled", r.State, runSummary(r))
		took := time.Since(cancelled)
		eventually(t, 5*time.Second, "the job's process group gone", func() (bool, string) {
			m := groupMembers(pgid)
			return len(m) == 0, strings.Join(m, " ")
		})
		t.Logf("cancel → run cancelled in %s, process group gone in %s", took.Round(time.Millisecond), time.Since(cancelled).Round(time.Millisecond))
		require.Less(t, took, 10*time.Second)
		for _, c := range e.lines("children") {
			pid, err := strconv.Atoi(c)
			require.NoError(t, err)
			require.False(t, alive(pid), "child sleep %d still alive", pid)
		}
	})
}

// TestMinimumLeaseTTL: a job whose lease has the smallest TTL the protocol
// allows (2 s) and that renews on time must be left to finish. (It once was
// not: the worker renewed every TTL/3 while its trust window is only
// TTL − 1 s = 1 s, so the watchdog stopped healthy jobs after 0.6 s.)
func TestMinimumLeaseTTL(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(dir string) []job {
		return []job{{name: "short-lease", script: fmt.Sprintf(`echo $$ >> %s/pids; sleep 3; echo done`, dir), leaseTTL: "2s"}}
	})
	s := startServer(t, backends[0].dsn(t), e)
	startWorker(t, s, "worker-a", t.TempDir(), s.registrationToken())
	r := s.waitState(s.createRun("short-lease").ID, 30*time.Second, "succeeded", "failed", "cancelled", "timed_out", "expired")
	require.Equal(t, "succeeded", r.State, runSummary(r))
}

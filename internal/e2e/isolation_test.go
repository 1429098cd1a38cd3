package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/protocol"
)

// TestJobUserKeepsTheRunnerOutOfReach: a job tries to copy its runner's
// key and identity out of the worker's state directory (three levels above
// its workspace). Under `jobplane worker --job-user nobody` the copy fails
// and the run still succeeds; without --job-user it succeeds, and the
// stolen identity signs a heartbeat the server accepts as the runner's,
// which shows what the isolation prevents.
func TestJobUserKeepsTheRunnerOutOfReach(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("--job-user needs a worker running as root")
	}
	for _, isolated := range []bool{true, false} {
		t.Run(fmt.Sprintf("isolated=%t", isolated), func(t *testing.T) {
			t.Parallel()
			loot, err := os.MkdirTemp("", "jobplane-loot-")
			require.NoError(t, err)
			t.Cleanup(func() { os.RemoveAll(loot) })
			require.NoError(t, os.Chmod(loot, 0o777)) // writable by the job user
			e := newEnv(t, func(string) []job {
				script := fmt.Sprintf(`state=$(cd ../../.. && pwd); cp "$state/runner.key" "$state/runner.json" %[1]s/ 2>&1; `+
					`kill -0 $(cat /proc/$PPID/stat | cut -d' ' -f4) 2>&1 && echo SIGNAL-SENT; echo "uid=$(id -u) home=$HOME"`, loot)
				return []job{{name: "thief", script: script}}
			})
			s := startServer(t, backends[0].dsn(t), e)
			state := t.TempDir()
			var extra []string
			if isolated {
				extra = []string{"--job-user", "nobody"}
			}
			w := startWorkerVia(t, s.url, "worker", state, s.registrationToken(), extra...)
			r := s.waitState(s.createRun("thief").ID, 30*time.Second, "succeeded", "failed", "cancelled", "timed_out")
			require.Equal(t, "succeeded", r.State, runSummary(r))
			var log []string // what the job wrote
			for _, l := range s.allLogs(r.ID) {
				if l.Stream != "system" {
					log = append(log, l.Text)
				}
			}
			t.Logf("job output: %q", log)
			_, err = os.Stat(filepath.Join(loot, "runner.key"))
			if isolated {
				require.True(t, os.IsNotExist(err), "an isolated job copied the runner's key")
				require.Contains(t, fmt.Sprint(log), "uid=65534")
				require.NotContains(t, fmt.Sprint(log), "SIGNAL-SENT", "an isolated job signalled its worker")
				require.Contains(t, w.proc.output(), "isolated from the runner's key")
				return
			}
			require.NoError(t, err, "without isolation the job reads the key")
			require.Contains(t, fmt.Sprint(log), "SIGNAL-SENT", "without isolation the job can signal its worker")
			require.Contains(t, w.proc.output(), "NOT ISOLATED")
			rc := runnerClient(t, s, loot)
			_, err = rc.Heartbeat(s.ctx(), protocol.HeartbeatRequest{Status: "idle"})
			require.NoError(t, err, "the stolen key signs as the runner")
		})
	}
}

// TestIsolatedRunWaitsForAJobUserWorker: a run that must be isolated is
// never handed to a worker without --job-user, which states that it is
// not isolated; its waiting_for says what it waits for; a worker with a
// job user states that it is, and runs it. Both show in `jobplane
// runners`.
func TestIsolatedRunWaitsForAJobUserWorker(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("--job-user needs a worker running as root")
	}
	eachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, func(string) []job {
			return []job{{name: "guarded", script: `echo "uid=$(id -u)"`, extra: "isolation: required\n"},
				{name: "plain", script: "true"}}
		})
		s := startServer(t, b.dsn(t), e)
		exposed := startWorker(t, s, "exposed", t.TempDir(), s.registrationToken())
		// The exposed worker is online and claiming: it takes a plain run.
		s.waitState(s.createRun("plain").ID, 30*time.Second, "succeeded")
		guarded := s.createRun("guarded")
		const want = "runner: none of the 1 online runners is eligible (needs pool default, an isolated runner (isolation: required))"
		s.waitRun(guarded.ID, 30*time.Second, "waiting_for "+want, func(r *protocol.Run) bool { return r.WaitingFor == want })
		// Several claims of the exposed worker's later: still queued.
		time.Sleep(2 * time.Second)
		r := s.getRun(guarded.ID)
		require.Equal(t, "queued", r.State, runSummary(r))
		require.Empty(t, r.Attempts[0].Runner, "the run was handed to a worker that is not isolated")

		isolated := startWorkerVia(t, s.url, "isolated", t.TempDir(), s.registrationToken(), "--job-user", "nobody")
		r = s.waitState(guarded.ID, 60*time.Second, "succeeded", "failed", "cancelled", "timed_out")
		require.Equal(t, "succeeded", r.State, runSummary(r))
		require.Contains(t, fmt.Sprint(s.allLogs(r.ID)), "uid=65534")
		require.NotContains(t, exposed.proc.output(), guarded.ID)
		require.Contains(t, isolated.proc.output(), guarded.ID)

		stdout, stderr, code := runCLI(t, s, "runners")
		require.Zero(t, code, stderr)
		lines := map[string]string{}
		for _, l := range strings.Split(stdout, "\n") {
			if f := strings.Fields(l); len(f) > 1 {
				lines[f[1]] = l
			}
		}
		require.Contains(t, lines["exposed"], " not isolated ", stdout)
		require.Contains(t, lines["isolated"], " isolated ", stdout)
		require.NotContains(t, lines["isolated"], "not isolated", stdout)
	})
}

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/containertest"
	"github.com/jobplane/jobplane/internal/executor/container"
	"github.com/jobplane/jobplane/internal/protocol"
)

// containerWorkerArgs starts a Podman service and builds a busybox image
// and the supervisor for t; it returns the engine and the `jobplane worker`
// flags of a container worker that uses them.
func containerWorkerArgs(t *testing.T) (*containertest.Engine, []string) {
	t.Helper()
	eng := containertest.Start(t)
	image := containertest.BusyboxImage(t, "localhost/jobplane-e2e-busybox:"+randHex(4))
	supervisor := containertest.Supervisor(t)
	args := []string{"--executor", "container", "--container-host", eng.Host, "--container-image", image,
		"--container-supervisor", supervisor, "--container-pull", "never"}
	for _, u := range containertest.Ulimits {
		args = append(args, "--container-ulimit", u)
	}
	return eng, args
}

// TestContainerExecutor: a real `jobplane worker --executor container`
// against Podman's Docker API runs a job to success in a container whose
// first process is the supervisor; the job's stdout and stderr reach the
// run's log apart, and no container is left behind.
func TestContainerExecutor(t *testing.T) {
	t.Parallel()
	eng, args := containerWorkerArgs(t)
	e := newEnv(t, func(string) []job {
		return []job{{name: "boxed", script: `echo "pid1=$(cat /proc/1/comm) pwd=$(pwd)"; echo "to stderr" >&2; ` +
			`test -n "$JOBPLANE_RUN_ID" && echo has-run-id; ls / | tr '\n' ' '; echo`}}
	})
	s := startServer(t, backends[0].dsn(t), e)
	w := startWorkerVia(t, s.url, "ctr-worker", t.TempDir(), s.registrationToken(), args...)
	r := s.waitState(s.createRun("boxed").ID, 2*time.Minute, "succeeded", "failed", "cancelled", "timed_out")
	var stdout, stderr []string
	for _, l := range s.allLogs(r.ID) {
		switch l.Stream {
		case "stdout":
			stdout = append(stdout, l.Text)
		case "stderr":
			stderr = append(stderr, l.Text)
		}
	}
	require.Equal(t, "succeeded", r.State, "%s\nstdout %q\nstderr %q\nworker:\n%s", runSummary(r), stdout, stderr, w.proc.output())
	require.Contains(t, stdout, "pid1=jobplane pwd=/jobplane/workspace", "the supervisor is the container's first process")
	require.Contains(t, stdout, "has-run-id")
	require.Equal(t, []string{"to stderr"}, stderr)
	require.Contains(t, w.proc.output(), "container executor: jobs are isolated")
	require.Empty(t, eng.Containers(t, container.LabelRunner, w.runnerID), "no container is left behind")
	t.Log(fmt.Sprint(stdout))
}

// netProbe tries the server's /readyz and counts the job's network
// interfaces.
const netProbe = `h=${JOBPLANE_API#http://}; printf 'GET /readyz HTTP/1.0\r\n\r\n' | nc -w 3 ${h%:*} ${h##*:} | grep -q 200 && echo REACHED; ` +
	`echo "interfaces $(ip link | grep -c '^[0-9]')"`

// TestContainerRunsEnd: with a real container worker, a cancelled run, a
// run past its timeout, a run whose image is missing (at once, with a
// reason that names it, and no retry loop: one start per attempt) and a
// run past its memory limit each end as such; a job with network: none
// has loopback only and does not reach the server; and no container of the
// worker's is left behind.
func TestContainerRunsEnd(t *testing.T) {
	t.Parallel()
	eng, args := containerWorkerArgs(t)
	e := newEnv(t, func(string) []job {
		return []job{
			// A short lease: the worker learns of a cancel at its next renewal.
			{name: "hang", script: `echo started; sleep 60`, leaseTTL: "3s"},
			{name: "slow", script: `echo started; sleep 60`, leaseTTL: "3s", timeout: "15s"},
			{name: "ghost", script: `true`, maxAttempts: 2, backoff: "1s", runExtra: "  image: localhost/jobplane-no-such-image:1\n"},
			{name: "hog", script: `a=$(head -c 400000000 /dev/zero | tr '\0' x); echo "survived ${#a}"`,
				runExtra: "  resources: {cpu: 500m, memory: 64Mi}\n"},
			// JOBPLANE_API is the server's address as the worker knows it
			// (a loopback one here, which no container reaches); the
			// interfaces say what the job could reach.
			{name: "offline", script: netProbe, runExtra: "  network: none\n"},
			{name: "online", script: netProbe},
		}
	})
	s := startServer(t, backends[0].dsn(t), e)
	w := startWorkerVia(t, s.url, "ctr-worker", t.TempDir(), s.registrationToken(), args...)
	started := func(id string) func(*protocol.Run) bool {
		return func(*protocol.Run) bool { return strings.Contains(fmt.Sprint(s.allLogs(id)), "started") }
	}

	hang := s.createRun("hang")
	s.waitRun(hang.ID, 2*time.Minute, "the job started", started(hang.ID))
	_, err := s.admin.CancelRun(s.ctx(), hang.ID)
	require.NoError(t, err)
	cancelled := time.Now()
	r := s.waitState(hang.ID, time.Minute, "succeeded", "failed", "cancelled", "timed_out")
	require.Equal(t, "cancelled", r.State, runSummary(r))
	t.Logf("cancelled: ended %s after the cancel", time.Since(cancelled).Round(time.Millisecond))

	// The worker stops the job before its deadline: the run fails "timed
	// out" when the worker's result lands before the deadline, and is
	// timed_out when the server's deadline passes first (the container's
	// removal takes longer than the grace left).
	slow := s.createRun("slow")
	r = s.waitState(slow.ID, 2*time.Minute, "succeeded", "failed", "cancelled", "timed_out")
	if r.State != "timed_out" {
		require.Equal(t, "failed", r.State, runSummary(r))
		require.Contains(t, string(r.Attempts[0].Result), `"summary":"timed out"`, runSummary(r))
	}
	require.Contains(t, fmt.Sprint(s.allLogs(slow.ID)), "started")
	require.Less(t, r.Attempts[0].EndedAt.Sub(*r.Attempts[0].ClaimedAt), 20*time.Second, runSummary(r))

	ghost := s.createRun("ghost")
	r = s.waitState(ghost.ID, 2*time.Minute, "succeeded", "failed", "cancelled", "timed_out")
	require.Equal(t, "failed", r.State, runSummary(r))
	require.Len(t, r.Attempts, 2, "one start per attempt: %s", runSummary(r))
	for _, a := range r.Attempts {
		require.Contains(t, string(a.Result), "jobplane-no-such-image", runSummary(r))
		require.Contains(t, string(a.Result), "not present", runSummary(r))
	}
	require.Contains(t, fmt.Sprint(s.allLogs(ghost.ID)), "cannot start job: image localhost/jobplane-no-such-image:1 is not present")

	stdout := func(id string) []string {
		var out []string
		for _, l := range s.allLogs(id) {
			if l.Stream == "stdout" {
				out = append(out, l.Text)
			}
		}
		return out
	}
	hog := s.createRun("hog")
	r = s.waitState(hog.ID, 2*time.Minute, "succeeded", "failed", "cancelled", "timed_out")
	require.Equal(t, "failed", r.State, runSummary(r))
	require.Contains(t, string(r.Attempts[0].Result), "out of memory", runSummary(r))
	require.Empty(t, stdout(hog.ID), "the job survived its memory limit")

	probe := func(job string) []string {
		id := s.createRun(job).ID
		s.waitState(id, 2*time.Minute, "succeeded", "failed", "cancelled", "timed_out")
		return stdout(id)
	}
	off := probe("offline")
	require.NotContains(t, off, "REACHED", "a job without a network reached the server")
	require.Equal(t, []string{"interfaces 1"}, off, "loopback only")
	// The broken variant: with the default network the job has more.
	require.NotEqual(t, []string{"interfaces 1"}, probe("online"))

	eventually(t, time.Minute, "no container of the worker's left", func() (bool, string) {
		left := eng.Containers(t, container.LabelRunner, w.runnerID)
		return len(left) == 0, fmt.Sprint(left)
	})
}

// TestContainerKeepsTheRunnerOutOfReach: a job tries to read its runner's
// key and identity (by their host paths, and relative to its workspace as
// the worker lays it out on the host), to list the state directory, and to
// find and signal the worker's process. Under `jobplane worker --executor
// container` each fails and the run succeeds; the same job under the
// process executor without --job-user (the broken variant) prints the key
// and signals the worker. (That a key so read signs requests the server
// takes as the runner's is TestJobUserKeepsTheRunnerOutOfReach's broken
// variant.)
func TestContainerKeepsTheRunnerOutOfReach(t *testing.T) {
	t.Parallel()
	_, args := containerWorkerArgs(t)
	for _, isolated := range []bool{true, false} {
		t.Run(fmt.Sprintf("isolated=%t", isolated), func(t *testing.T) {
			t.Parallel()
			state := t.TempDir()
			e := newEnv(t, func(string) []job {
				script := fmt.Sprintf(`cat %[1]s/runner.key %[1]s/runner.json ../../../runner.key 2>&1; ls %[1]s && echo LISTED-STATE; `+
					`for d in /proc/[0-9]*; do if tr '\0' ' ' < $d/cmdline 2>/dev/null | grep -q ' worke[r] --serve[r] '; then `+
					`kill -0 ${d#/proc/} && echo SIGNAL-SENT; fi; done; echo probed`, state)
				return []job{{name: "thief", script: script}}
			})
			s := startServer(t, backends[0].dsn(t), e)
			var extra []string
			if isolated {
				extra = args
			}
			w := startWorkerVia(t, s.url, "worker", state, s.registrationToken(), extra...)
			r := s.waitState(s.createRun("thief").ID, 2*time.Minute, "succeeded", "failed", "cancelled", "timed_out")
			require.Equal(t, "succeeded", r.State, runSummary(r))
			var log []string
			for _, l := range s.allLogs(r.ID) {
				if l.Stream != "system" {
					log = append(log, l.Text)
				}
			}
			key, err := os.ReadFile(filepath.Join(state, "runner.key"))
			require.NoError(t, err)
			secret := strings.TrimSpace(string(key))
			require.Greater(t, len(secret), 16)
			out := strings.Join(log, "\n")
			require.Contains(t, out, "probed", "%q", log)
			if isolated {
				require.NotContains(t, out, secret, "a job in a container read the runner's key")
				require.NotContains(t, out, "LISTED-STATE")
				require.NotContains(t, out, "SIGNAL-SENT", "a job in a container signalled its worker")
				require.Contains(t, w.proc.output(), "container executor: jobs are isolated")
				return
			}
			require.Contains(t, out, secret, "without isolation the job reads the key")
			require.Contains(t, out, "LISTED-STATE")
			require.Contains(t, out, "SIGNAL-SENT", "without isolation the job signals its worker")
		})
	}
}

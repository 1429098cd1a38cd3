package e2e

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/jobplane/jobplane/internal/executor/kube"
	"github.com/jobplane/jobplane/internal/gitsync"
	"github.com/jobplane/jobplane/internal/kubetest"
	"github.com/jobplane/jobplane/internal/protocol"
)

// TestKubernetesWorker runs a real `jobplane worker --executor kubernetes`
// against a real server and a real Kubernetes control plane, as a user
// bound to the Role of deploy/kubernetes/worker.yaml only:
//
//   - a job reads a file of its source and writes an artifact, which its
//     pod's supervisor fetched and uploaded with the run token; the artifact
//     is then downloadable and named by the result;
//   - the worker is SIGKILLed while a job runs: the job in the pod ends
//     before the attempt's lease expires (the margin is logged), the
//     restarted worker deletes the Job of the attempt it no longer holds,
//     and the run's next attempt starts; cancelling it leaves no Job, pod
//     or Secret behind;
//   - the worker is SIGSTOPped instead: the job ends before the lease
//     expires all the same, and the worker, thawed, removes the attempt's
//     Job and Secret itself.
func TestKubernetesWorker(t *testing.T) {
	c := kubetest.Start(t)
	node := c.StartNode(t, "node-1", 2, 2<<30)
	image := kubetest.BusyboxImage(t, "localhost/jobplane-e2e-kube-busybox:"+randHex(4))
	supervisor, err := kubetest.SupervisorImage(t, "localhost/jobplane-e2e-kube-supervisor:"+randHex(4))
	require.NoError(t, err)
	const ns = "jobs"
	c.WorkerNamespace(t, ns, kubetest.Users[0])
	admin := c.Client(t, "admin")

	code := t.TempDir()
	_, err = gitsync.InitRepo(code, "main", map[string]string{"input.txt": "hello from the source\n"}, "code")
	require.NoError(t, err)
	e := newEnv(t, func(string) []job {
		return []job{
			{name: "filed", script: `cat input.txt; tr a-z A-Z < input.txt > "$JOBPLANE_ARTIFACTS_DIR/out.txt"; echo "params=$(cat "$JOBPLANE_PARAMS_FILE") var=${JOBPLANE_SUPERVISE_PARAMS:-unset}"; ` +
				`echo 0123456789 > "$JOBPLANE_ARTIFACTS_DIR/big.txt"; ln -s /etc/passwd "$JOBPLANE_ARTIFACTS_DIR/link.txt"`,
				extra: "artifacts:\n  - {name: out.txt, max_bytes: 1000}\n  - {name: absent.txt}\n  - {name: big.txt, max_bytes: 5}\n  - {name: link.txt}\nsource: {repo: code}\n"},
			{name: "endless", leaseTTL: "6s", maxAttempts: 2, backoff: "1s",
				script: `echo started; while true; do echo x >> ticks; sleep 0.1; done`},
		}
	})
	s := startServerWith(t, backends[0].dsn(t), e, []string{"--source-repo", "code=" + code}, nil)
	args := []string{"--executor", "kubernetes", "--kubeconfig", c.Kubeconfig(t, kubetest.Users[0]), "--namespace", ns,
		"--kube-image", image, "--kube-supervisor-image", supervisor}
	stateDir := t.TempDir()
	w := startWorkerVia(t, s.url, "kube-worker", stateDir, s.registrationToken(), args...)
	terminal := []string{"succeeded", "failed", "cancelled", "timed_out"}
	top := t // the restarted worker outlives its subtest

	t.Run("source and artifacts", func(t *testing.T) {
		r := s.waitState(s.createRun("filed").ID, 3*time.Minute, terminal...)
		var lines []string
		for _, l := range s.allLogs(r.ID) {
			lines = append(lines, l.Stream+": "+l.Text)
		}
		log := strings.Join(lines, "\n")
		require.Equal(t, "succeeded", r.State, "%s\n%s\nworker:\n%s\n%s", runSummary(r), log, w.proc.output(), c.Logs())
		require.Contains(t, log, "stdout: hello from the source", "the job read its source")
		require.Contains(t, log, "jobplane: source code at ", "the supervisor unpacked the source")
		require.Contains(t, log, "jobplane: artifact out.txt uploaded")
		require.Contains(t, log, "jobplane: artifact big.txt not uploaded: 11 bytes, at most 5 allowed")
		require.Contains(t, log, "jobplane: artifact link.txt not uploaded: not a regular file")
		require.NotContains(t, log, "absent.txt")
		require.Contains(t, log, "stdout: params={} var=unset", "the parameters file is in the pod; its carrier is not in the job's environment")
		rd, err := s.admin.DownloadArtifact(s.ctx(), r.ID, "out.txt")
		require.NoError(t, err)
		b, _ := io.ReadAll(rd)
		rd.Close()
		require.Equal(t, "HELLO FROM THE SOURCE\n", string(b))
		list, err := s.admin.ListArtifacts(s.ctx(), r.ID)
		require.NoError(t, err)
		require.Len(t, list.Artifacts, 1)
		require.Contains(t, string(r.Attempts[0].Result), list.Artifacts[0].ID, "the result names the stored artifact")
		eventually(t, time.Minute, "nothing left in "+ns, func() (bool, string) {
			left := c.Leftovers(t, ns)
			return len(left) == 0, strings.Join(left, " ")
		})
	})

	t.Run("worker SIGKILL: the pod's job ends before the lease expiry; a restarted worker cleans up", func(t *testing.T) {
		run := s.createRun("endless")
		g := &podTicks{last: map[string]time.Time{}, size: map[string]int64{}}
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() { g.watch(node, stop) })
		defer func() { close(stop); wg.Wait() }()
		eventually(t, 3*time.Minute, "the job writes", func() (bool, string) { return len(g.files()) == 1, "" })
		// Renewals happen for more than a lease while the job runs.
		time.Sleep(8 * time.Second)
		r := s.getRun(run.ID)
		require.Len(t, r.Attempts, 1)
		first := r.Attempts[0]
		w.proc.kill()
		killed := time.Now()

		// The lease is no longer renewed: its expiry is final.
		r = s.getRun(run.ID)
		expiry := *r.Attempts[0].LeaseExpiresAt
		time.Sleep(time.Until(expiry) + 3*time.Second)
		f := g.files()[0]
		last := g.lastGrew(f)
		require.True(t, last.Before(expiry), "the job wrote at %v, after the lease expiry %v", last, expiry)
		t.Logf("worker SIGKILLed %v before the lease expiry; the job last wrote %v after the kill, %v before the expiry",
			expiry.Sub(killed).Round(time.Millisecond), last.Sub(killed).Round(time.Millisecond), expiry.Sub(last).Round(time.Millisecond))

		// The Job of the attempt is still there: only its worker deletes it.
		name := kube.ObjectName(w.runnerID, first.ID)
		_, err := admin.BatchV1().Jobs(ns).Get(s.ctx(), name, metav1.GetOptions{})
		require.NoError(t, err, "the Job of the attempt before the restart")

		w2 := startWorkerVia(top, s.url, "kube-worker-2", stateDir, "", args...)
		require.Equal(t, w.runnerID, w2.runnerID)
		w = w2
		eventually(t, time.Minute, "the restarted worker deletes the old attempt's Job and Secret", func() (bool, string) {
			_, jerr := admin.BatchV1().Jobs(ns).Get(s.ctx(), name, metav1.GetOptions{})
			_, serr := admin.CoreV1().Secrets(ns).Get(s.ctx(), name+"-env", metav1.GetOptions{})
			return apierrors.IsNotFound(jerr) && apierrors.IsNotFound(serr), ""
		})
		r = s.waitRun(run.ID, 3*time.Minute, "attempt 2 leased", func(r *protocol.Run) bool {
			return len(r.Attempts) == 2 && r.Attempts[1].State == "leased"
		})
		require.Equal(t, "expired", r.Attempts[0].State, runSummary(r))
		eventually(t, 3*time.Minute, "attempt 2's job writes", func() (bool, string) { return len(g.files()) == 2, "" })
		_, err = s.admin.CancelRun(s.ctx(), run.ID)
		require.NoError(t, err)
		s.waitState(run.ID, time.Minute, "cancelled")
		eventually(t, time.Minute, "nothing left in "+ns, func() (bool, string) {
			left := c.Leftovers(t, ns)
			return len(left) == 0, strings.Join(left, " ")
		})
	})

	t.Run("worker SIGSTOP: the pod's job ends before the lease expiry; the thawed worker removes the Job", func(t *testing.T) {
		// The ticks files of the earlier run's pods are still on the node.
		g := &podTicks{last: map[string]time.Time{}, size: map[string]int64{}, ignore: map[string]bool{}}
		for _, d := range node.EmptyDirs("jobplane") {
			g.ignore[filepath.Join(d, "workspace", "ticks")] = true
		}
		run := s.createRun("endless")
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() { g.watch(node, stop) })
		defer func() { close(stop); wg.Wait() }()
		eventually(t, 3*time.Minute, "the job writes", func() (bool, string) { return len(g.files()) == 1, "" })
		time.Sleep(8 * time.Second)
		first := s.getRun(run.ID).Attempts[0]
		require.NoError(t, w.proc.cmd.Process.Signal(syscall.SIGSTOP))
		stopped := time.Now()
		expiry := *s.getRun(run.ID).Attempts[0].LeaseExpiresAt
		time.Sleep(time.Until(expiry) + 3*time.Second)
		last := g.lastAny()
		require.True(t, last.Before(expiry), "a job wrote at %v, after the lease expiry %v", last, expiry)
		t.Logf("worker SIGSTOPped %v before the lease expiry; the job last wrote %v before the expiry",
			expiry.Sub(stopped).Round(time.Millisecond), expiry.Sub(last).Round(time.Millisecond))
		require.NoError(t, w.proc.cmd.Process.Signal(syscall.SIGCONT))
		name := kube.ObjectName(w.runnerID, first.ID)
		eventually(t, time.Minute, "the thawed worker deletes the attempt's Job and Secret", func() (bool, string) {
			_, jerr := admin.BatchV1().Jobs(ns).Get(s.ctx(), name, metav1.GetOptions{})
			_, serr := admin.CoreV1().Secrets(ns).Get(s.ctx(), name+"-env", metav1.GetOptions{})
			return apierrors.IsNotFound(jerr) && apierrors.IsNotFound(serr), ""
		})
		s.waitRun(run.ID, 3*time.Minute, "attempt 2 leased", func(r *protocol.Run) bool {
			return len(r.Attempts) == 2 && r.Attempts[1].State == "leased"
		})
		_, err := s.admin.CancelRun(s.ctx(), run.ID)
		require.NoError(t, err)
		s.waitState(run.ID, time.Minute, "cancelled")
		eventually(t, time.Minute, "nothing left in "+ns, func() (bool, string) {
			left := c.Leftovers(t, ns)
			return len(left) == 0, strings.Join(left, " ")
		})
	})
}

// podTicks records when each job's ticks file (in the node's emptyDir
// workspaces) last grew.
type podTicks struct {
	mu     sync.Mutex
	last   map[string]time.Time
	size   map[string]int64
	ignore map[string]bool // files of earlier pods
}

func (g *podTicks) watch(node *kubetest.Node, stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case <-time.After(10 * time.Millisecond):
		}
		for _, d := range node.EmptyDirs("jobplane") {
			f := filepath.Join(d, "workspace", "ticks")
			if g.ignore[f] {
				continue
			}
			fi, err := os.Stat(f)
			if err != nil {
				continue
			}
			g.mu.Lock()
			if fi.Size() != g.size[f] {
				g.size[f] = fi.Size()
				g.last[f] = time.Now()
			}
			g.mu.Unlock()
		}
	}
}

func (g *podTicks) files() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []string
	for f := range g.last {
		out = append(out, f)
	}
	return out
}

func (g *podTicks) lastGrew(f string) time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.last[f]
}

// lastAny is when any ticks file last grew.
func (g *podTicks) lastAny() time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	var last time.Time
	for _, l := range g.last {
		if l.After(last) {
			last = l
		}
	}
	return last
}

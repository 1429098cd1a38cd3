package e2e

// Process-level fault tests of run leases (acceptance cases L1/L9 at process
// level, the fault tests): real servers, real workers, real time.

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/apiclient"

	"github.com/jobplane/jobplane/internal/gitsync"
	"github.com/jobplane/jobplane/internal/protocol"
)

// newLeaseEnv is newEnv for jobs that hold lease keys: leases maps a job
// name to its `leases:` YAML list.
func newLeaseEnv(t *testing.T, mkJobs func(dir string) []job, leases map[string]string) *env {
	t.Helper()
	e := &env{dir: t.TempDir(), defs: filepath.Join(t.TempDir(), "definitions")}
	files := map[string]string{
		"groups.yaml":       "groups:\n  operators:\n    members: [admin]\n",
		"policies/all.yaml": "rules:\n  - id: all\n    jobs: [\"*\"]\n    users: [\"*\"]\n",
	}
	for _, j := range mkJobs(e.dir) {
		files["jobs/"+j.name+".yaml"] = j.yaml() + "leases:\n" + leases[j.name]
	}
	_, err := gitsync.InitRepo(e.defs, "main", files, "e2e definitions")
	require.NoError(t, err)
	t.Cleanup(func() {
		for _, pid := range e.pids() {
			_ = syscall.Kill(-pid, syscall.SIGKILL)
		}
	})
	return e
}

// ledgerScript appends "start TOKEN NS" and "end TOKEN NS" around a short
// sleep; O_APPEND lines of this size are written whole.
func ledgerScript(dir, key string) string {
	return fmt.Sprintf(`echo $$ >> %[1]s/pids; t=$(printf '%%s' "$JOBPLANE_FENCING_TOKENS" | sed 's/.*"%[2]s":\([0-9]*\).*/\1/'); `+
		`echo "start $t $(date +%%s%%N)" >> %[1]s/ledger; sleep 0.2; echo "end $t $(date +%%s%%N)" >> %[1]s/ledger`, dir, key)
}

// checkLedger: holds never overlap (every start is followed by the end of
// the same token before the next start) and tokens strictly increase.
func checkLedger(t *testing.T, lines []string, want int) {
	t.Helper()
	require.Len(t, lines, 2*want, "ledger: %v", lines)
	var last int64
	for i := 0; i < len(lines); i += 2 {
		s, e := strings.Fields(lines[i]), strings.Fields(lines[i+1])
		require.Equal(t, "start", s[0], "line %d: %v", i, lines)
		require.Equal(t, "end", e[0], "two holders at once at line %d: %v", i+1, lines)
		require.Equal(t, s[1], e[1], "interleaved holders at line %d: %v", i+1, lines)
		tok, err := strconv.ParseInt(s[1], 10, 64)
		require.NoError(t, err, "token in %q", lines[i])
		require.Greater(t, tok, last, "tokens must increase: %v", lines)
		last = tok
	}
}

// TestLeaseWorkerKilledWhileHolding: a worker holding a key is SIGKILLed;
// the run queued behind the key is claimed by the other worker once the
// lease expired, with a higher fencing token.
func TestLeaseWorkerKilledWhileHolding(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		e := newLeaseEnv(t, func(dir string) []job {
			// The marker before the effect, as in TestWorkerKilledMidRun.
			script := fmt.Sprintf(`echo $$ >> %[1]s/pids; first=; if mkdir %[1]s/first 2>/dev/null; then first=1; fi; `+
				`echo "$JOBPLANE_RUN_ID $$ $JOBPLANE_FENCING_TOKENS" >> %[1]s/effects; `+
				`if [ -n "$first" ]; then sleep 60; fi`, dir)
			// 3 s rather than the 2 s minimum: at 2 s the worker's watchdog
			// may stop healthy jobs (see TestMinimumLeaseTTL).
			return []job{{name: "locked", script: script, leaseTTL: "3s"}}
		}, map[string]string{"locked": "  - key: shared-resource\n"})
		s := startServer(t, b.dsn(t), e)
		wa := startWorker(t, s, "worker-a", t.TempDir(), s.registrationToken())
		wb := startWorker(t, s, "worker-b", t.TempDir(), s.registrationToken())

		run1 := s.createRun("locked")
		r1 := s.waitRun(run1.ID, 20*time.Second, "run 1 holding the key", func(r *protocol.Run) bool {
			return len(r.Attempts) == 1 && r.Attempts[0].State == "leased" && len(e.lines("effects")) == 1
		})
		run2 := s.createRun("locked")
		time.Sleep(time.Second)
		require.Len(t, e.lines("effects"), 1, "run 2 must wait for the key")
		victim, survivor := wa, wb
		if r1.Attempts[0].Runner == wb.runnerID {
			victim, survivor = wb, wa
		}
		f := strings.Fields(e.lines("effects")[0])
		pgid, err := strconv.Atoi(f[1])
		require.NoError(t, err)
		victim.proc.kill()
		// The job's supervisor ends the job with its worker; a job still
		// there is killed here so that only the lease decides what follows.
		if err := syscall.Kill(-pgid, syscall.SIGKILL); !errors.Is(err, syscall.ESRCH) {
			require.NoError(t, err)
		}
		killed := time.Now()

		r2 := s.waitState(run2.ID, 40*time.Second, "succeeded", "failed", "cancelled", "timed_out")
		t.Logf("run 2 %s %s after the kill", r2.State, time.Since(killed).Round(time.Millisecond))
		require.Equal(t, "succeeded", r2.State, runSummary(r2))
		require.Equal(t, survivor.runnerID, r2.Attempts[len(r2.Attempts)-1].Runner)
		r1 = s.getRun(run1.ID)
		require.Equal(t, "expired", r1.Attempts[0].State, runSummary(r1))

		effects := e.lines("effects")
		require.Len(t, effects, 2, "%v", effects)
		tok := func(line string) int64 {
			var m map[string]int64
			require.NoError(t, json.Unmarshal([]byte(strings.Fields(line)[2]), &m), line)
			return m["shared-resource"]
		}
		require.True(t, strings.HasPrefix(effects[1], run2.ID+" "))
		require.Greater(t, tok(effects[1]), tok(effects[0]), "the next holder's fencing token is higher: %v", effects)
	})
}

// replica starts a second server process on the same database, data
// directory (sealing keys) and admin token as s.
func replica(t *testing.T, s *server) *server {
	t.Helper()
	addr := freeAddr(t)
	r := &server{t: t, addr: addr, url: "http://" + addr, db: s.db, defs: s.defs, dataDir: s.dataDir, adminToken: s.adminToken}
	r.admin = &apiclient.Client{BaseURL: r.url, Token: r.adminToken, HTTP: checkedHTTP(t, 10*time.Second)}
	r.start()
	return r
}

// TestLeaseTwoReplicasOnePostgres: two server processes on one PostgreSQL
// database, two workers on each, many runs of a single-key job requested on
// both: no two runs ever hold the key at once and tokens increase.
func TestLeaseTwoReplicasOnePostgres(t *testing.T) {
	t.Parallel()
	dsn := backends[1].dsn(t)
	e := newLeaseEnv(t, func(dir string) []job {
		return []job{{name: "serial", script: ledgerScript(dir, "one-at-a-time")}}
	}, map[string]string{"serial": "  - key: one-at-a-time\n"})
	sa := startServer(t, dsn, e)
	sb := replica(t, sa)
	for i, s := range []*server{sa, sa, sb, sb} {
		startWorker(t, s, fmt.Sprintf("worker-%d", i), t.TempDir(), s.registrationToken())
	}
	const runs = 12
	var ids []string
	for i := range runs {
		ids = append(ids, []*server{sa, sb}[i%2].createRun("serial").ID)
	}
	for i, id := range ids {
		r := []*server{sa, sb}[i%2].waitState(id, 90*time.Second, "succeeded", "failed", "cancelled", "timed_out")
		require.Equal(t, "succeeded", r.State, runSummary(r))
	}
	checkLedger(t, e.lines("ledger"), runs)
}

// TestLeasePostgresStopped (JOBPLANE_LONG=1 only: it stops the machine's
// shared PostgreSQL, which would break every other test running): a server
// and two workers run single-key jobs; PostgreSQL is stopped for 5 s mid-run;
// the key is never held twice and the server recovers by itself.
func TestLeasePostgresStopped(t *testing.T) {
	if os.Getenv("JOBPLANE_LONG") != "1" {
		t.Skip("stops the shared PostgreSQL; run by hand with JOBPLANE_LONG=1")
	}
	dsn := backends[1].dsn(t)
	e := newLeaseEnv(t, func(dir string) []job {
		return []job{{name: "serial", script: ledgerScript(dir, "one-at-a-time"), leaseTTL: "5s", maxAttempts: 3, backoff: "1s"}}
	}, map[string]string{"serial": "  - key: one-at-a-time\n"})
	s := startServer(t, dsn, e)
	for i := range 2 {
		startWorker(t, s, fmt.Sprintf("worker-%d", i), t.TempDir(), s.registrationToken())
	}
	const runs = 16
	var ids []string
	for range runs {
		ids = append(ids, s.createRun("serial").ID)
	}
	time.Sleep(time.Second)
	out, _ := exec.Command("ls", "/etc/postgresql").Output()
	ver := strings.TrimSpace(string(out))
	pg := func(action string) {
		b, err := exec.Command("pg_ctlcluster", "--skip-systemctl-redirect", ver, pgCluster(), action).CombinedOutput()
		require.NoError(t, err, "pg_ctlcluster %s: %s", action, b)
	}
	pg("stop")
	stopped := true
	t.Cleanup(func() {
		if stopped {
			pg("start")
		}
	})
	time.Sleep(5 * time.Second)
	pg("start")
	stopped = false
	s.waitReady(60 * time.Second)
	for _, id := range ids {
		s.waitState(id, 120*time.Second, "succeeded", "failed", "cancelled", "timed_out")
	}
	require.False(t, s.proc.exited(), "the server recovered by itself")
	lines := e.lines("ledger")
	// A run whose worker lost the lease while the database was down may end
	// without its "end" line only if it was killed; check the complete pairs.
	var whole []string
	for i := 0; i+1 < len(lines); i++ {
		if strings.HasPrefix(lines[i], "start ") && strings.HasPrefix(lines[i+1], "end ") {
			whole = append(whole, lines[i], lines[i+1])
			i++
		} else {
			require.Failf(t, "overlap or cut hold", "line %d: %v", i, lines)
		}
	}
	checkLedger(t, whole, len(whole)/2)
	t.Logf("%d holds across the outage", len(whole)/2)
}

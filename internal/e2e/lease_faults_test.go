package e2e

// Process-level lease faults of RELIABILITY.md: L4 (a holder paused past
// its TTL), with real servers, workers and jobs, and real time.

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// ledgerEvents parses the fenced counter's ledger into per-token outcomes.
type ledgerEvents struct {
	reads  map[int64]int64 // token → value read
	acks   map[int64]int64 // token → value written
	fenced map[int64]bool
}

func parseLedger(t *testing.T, lines []string) ledgerEvents {
	t.Helper()
	ev := ledgerEvents{reads: map[int64]int64{}, acks: map[int64]int64{}, fenced: map[int64]bool{}}
	num := func(s string) int64 {
		n, err := strconv.ParseInt(s, 10, 64)
		require.NoError(t, err, "ledger %v", lines)
		return n
	}
	for _, l := range lines {
		f := strings.Fields(l)
		switch f[0] {
		case "read":
			ev.reads[num(f[1])] = num(f[2])
		case "ack":
			ev.acks[num(f[1])] = num(f[2])
		case "fenced":
			ev.fenced[num(f[1])] = true
		}
	}
	return ev
}

func counterValue(t *testing.T, dir string) int64 {
	t.Helper()
	db, err := openCounter(dir)
	require.NoError(t, err)
	defer db.Close()
	var v int64
	require.NoError(t, db.QueryRow(`SELECT value FROM counter WHERE id = 1`).Scan(&v))
	return v
}

// TestL4_HolderPausedPastTTL is the GC-pause scenario: the worker holding
// a key and its job are SIGSTOPped between the job's read and write of a
// counter for 3×TTL. The key expires, the next run takes it with a higher
// fencing token and increments the counter; then the paused job resumes
// and writes. Fenced, that stale write is refused and the counter equals
// the acknowledged increments; the resumed worker learns it lost the lease
// and the run does not succeed. Unfenced (the N variant), the same schedule
// must lose an update, which shows the check can fail.
func TestL4_HolderPausedPastTTL(t *testing.T) {
	t.Parallel()
	t.Run("fenced", func(t *testing.T) {
		t.Parallel()
		eachBackend(t, func(t *testing.T, b backend) { pausedHolderRound(t, b, "fenced") })
	})
	// The N variant does not depend on the store.
	t.Run("unfenced", func(t *testing.T) {
		t.Parallel()
		pausedHolderRound(t, backends[0], "unfenced")
	})
}

func pausedHolderRound(t *testing.T, b backend, mode string) {
	const ttl = 3 * time.Second
	self, err := os.Executable()
	require.NoError(t, err)
	e := newLeaseEnv(t, func(dir string) []job {
		script := fmt.Sprintf(`echo $$ >> %[1]s/pids; exec env E2E_HELPER=fenced-incr E2E_DIR=%[1]s E2E_KEY=counter E2E_MODE=%[2]s %[3]s`, dir, mode, self)
		return []job{{name: "incr", script: script, leaseTTL: "3s"}}
	}, map[string]string{"incr": "  - key: counter\n"})
	s := startServer(t, b.dsn(t), e)
	wa := startWorker(t, s, "worker-a", t.TempDir(), s.registrationToken())
	wb := startWorker(t, s, "worker-b", t.TempDir(), s.registrationToken())

	// A first, undisturbed increment.
	r0 := s.waitState(s.createRun("incr").ID, 30*time.Second, "succeeded", "failed", "cancelled", "timed_out")
	require.Equal(t, "succeeded", r0.State, runSummary(r0))

	run1 := s.createRun("incr")
	var tok1 int64
	eventually(t, 30*time.Second, "run 1 read the counter", func() (bool, string) {
		ev := parseLedger(t, e.lines("ledger"))
		for tok := range ev.reads {
			if _, done := ev.acks[tok]; !done && !ev.fenced[tok] {
				tok1 = tok
				return true, ""
			}
		}
		return false, fmt.Sprint(e.lines("ledger"))
	})
	r1 := s.getRun(run1.ID)
	require.Len(t, r1.Attempts, 1)
	holder := wa
	if r1.Attempts[0].Runner == wb.runnerID {
		holder = wb
	}
	pids := e.pids()
	jobPgid := pids[len(pids)-1]
	// The job first, so that it cannot write before its worker stops.
	require.NoError(t, syscall.Kill(-jobPgid, syscall.SIGSTOP))
	require.NoError(t, holder.proc.cmd.Process.Signal(syscall.SIGSTOP))
	paused := time.Now()
	t.Cleanup(func() {
		_ = holder.proc.cmd.Process.Signal(syscall.SIGCONT)
		_ = syscall.Kill(-jobPgid, syscall.SIGCONT)
	})

	run2 := s.createRun("incr")
	var tok2 int64
	eventually(t, 40*time.Second, "run 2 incremented the counter", func() (bool, string) {
		ev := parseLedger(t, e.lines("ledger"))
		for tok := range ev.acks {
			if tok > tok1 {
				tok2 = tok
				return true, ""
			}
		}
		return false, fmt.Sprint(e.lines("ledger"))
	})
	t.Logf("run 2 took the key with token %d (paused holder: %d) %s after the pause", tok2, tok1, time.Since(paused).Round(time.Millisecond))
	require.Greater(t, tok2, tok1)
	time.Sleep(time.Until(paused.Add(3 * ttl)))

	// The job wakes first and attempts its write; then its worker.
	require.NoError(t, syscall.Kill(-jobPgid, syscall.SIGCONT))
	eventually(t, 20*time.Second, "the paused job finished its write", func() (bool, string) {
		ev := parseLedger(t, e.lines("ledger"))
		_, acked := ev.acks[tok1]
		return acked || ev.fenced[tok1], fmt.Sprint(e.lines("ledger"))
	})
	require.NoError(t, holder.proc.cmd.Process.Signal(syscall.SIGCONT))

	r2 := s.waitState(run2.ID, 30*time.Second, "succeeded", "failed", "cancelled", "timed_out")
	require.Equal(t, "succeeded", r2.State, runSummary(r2))
	r1 = s.waitState(run1.ID, 30*time.Second, "succeeded", "failed", "cancelled", "timed_out")
	require.NotEqual(t, "succeeded", r1.State, "the paused holder's run must not succeed: %s", runSummary(r1))
	require.Equal(t, "expired", r1.Attempts[0].State, runSummary(r1))

	// The resumed worker serves again (it re-claims after losing the lease).
	r3 := s.waitState(s.createRun("incr").ID, 30*time.Second, "succeeded", "failed", "cancelled", "timed_out")
	require.Equal(t, "succeeded", r3.State, runSummary(r3))

	ev := parseLedger(t, e.lines("ledger"))
	got := counterValue(t, e.dir)
	t.Logf("%s: counter %d, %d acknowledged increments; ledger %v", mode, got, len(ev.acks), e.lines("ledger"))
	if mode == "fenced" {
		require.True(t, ev.fenced[tok1], "the paused holder's write must be refused: %v", e.lines("ledger"))
		require.Equal(t, int64(len(ev.acks)), got, "counter = acknowledged increments (no lost update)")
	} else {
		require.Less(t, got, int64(len(ev.acks)), "without the fence the paused holder must lose an update")
	}
}

package e2e

// Process-level lease faults: L4 (a holder paused past
// its TTL), with real servers, workers and jobs, and real time.

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
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

	"github.com/jobplane/jobplane/internal/apiclient"
	"github.com/jobplane/jobplane/internal/protocol"
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
	// The whole machine pauses: the job first, so that it cannot write
	// before its worker stops, then the job's supervisor (which would
	// otherwise end the job at the lease bound) and the worker.
	supervisor := parentOf(jobPgid)
	require.NotZero(t, supervisor, "the job's supervisor")
	require.NoError(t, syscall.Kill(-jobPgid, syscall.SIGSTOP))
	require.NoError(t, syscall.Kill(supervisor, syscall.SIGSTOP))
	require.NoError(t, holder.proc.cmd.Process.Signal(syscall.SIGSTOP))
	paused := time.Now()
	t.Cleanup(func() {
		_ = holder.proc.cmd.Process.Signal(syscall.SIGCONT)
		_ = syscall.Kill(supervisor, syscall.SIGCONT)
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
	require.NoError(t, syscall.Kill(supervisor, syscall.SIGCONT))
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

// tickerScript appends "tick TOKEN NS" every 0.1 s for about 8 s, from its
// own process group, or, escaped, from a process outside the job's tree
// (escapeService starts it when the job asks), which neither its worker
// nor its supervisor can stop.
func tickerScript(dir, key string, escaped bool) string {
	loop := fmt.Sprintf(`echo $$ >> %[1]s/pids; t=$(printf '%%s' "$JOBPLANE_FENCING_TOKENS" | sed 's/.*"%[2]s":\([0-9]*\).*/\1/'); `+
		`i=0; while [ $i -lt 80 ]; do echo "tick $t $(date +%%s%%N)" >> %[1]s/ledger; sleep 0.1; i=$((i+1)); done`, dir, key)
	if !escaped {
		return loop
	}
	file := filepath.Join(dir, "ticker.sh")
	if err := os.WriteFile(file, []byte(loop+"\n"), 0o644); err != nil {
		panic(err) // a temp dir of the test
	}
	return fmt.Sprintf(`echo $$ >> %[1]s/pids; printf '%%s' "$JOBPLANE_FENCING_TOKENS" > %[1]s/escape.tmp; mv %[1]s/escape.tmp %[1]s/escape.$$; sleep 30`, dir)
}

// escapeService stands for anything outside a job's process tree that acts
// on its behalf (a daemon it asked, a cron entry): for each escape.PID
// request a job writes to dir, it starts dir/ticker.sh with the fencing
// tokens the job wrote, in its own process group, killed at cleanup.
func escapeService(t *testing.T, dir string) {
	done := make(chan struct{})
	var started []*exec.Cmd
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		seen := map[string]bool{}
		for {
			select {
			case <-done:
				return
			case <-time.After(50 * time.Millisecond):
			}
			reqs, _ := filepath.Glob(filepath.Join(dir, "escape.[0-9]*"))
			for _, req := range reqs {
				if seen[req] {
					continue
				}
				seen[req] = true
				tokens, err := os.ReadFile(req)
				if err != nil {
					continue
				}
				cmd := exec.Command("sh", filepath.Join(dir, "ticker.sh"))
				cmd.Env = append(os.Environ(), "JOBPLANE_FENCING_TOKENS="+string(tokens))
				cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
				if cmd.Start() == nil {
					started = append(started, cmd)
				}
			}
		}
	}()
	t.Cleanup(func() {
		close(done)
		<-stopped
		for _, cmd := range started {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			_ = cmd.Wait()
		}
	})
}

// ticks groups tick times (Unix ns) by fencing token.
func ticks(t *testing.T, lines []string) map[int64][]int64 {
	t.Helper()
	out := map[int64][]int64{}
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) != 3 || f[0] != "tick" {
			continue
		}
		tok, err1 := strconv.ParseInt(f[1], 10, 64)
		at, err2 := strconv.ParseInt(f[2], 10, 64)
		require.NoError(t, errors.Join(err1, err2), "ledger line %q", l)
		out[tok] = append(out[tok], at)
	}
	return out
}

// overlap reports the first pair of holders whose effects interleave: every
// effect of a token must come before every effect of a higher token.
func overlap(byToken map[int64][]int64) error {
	toks := slices.Sorted(maps.Keys(byToken))
	for i := 1; i < len(toks); i++ {
		last, first := slices.Max(byToken[toks[i-1]]), slices.Min(byToken[toks[i]])
		if last >= first {
			return fmt.Errorf("token %d acted %s after token %d started", toks[i-1], time.Duration(last-first), toks[i])
		}
	}
	return nil
}

// TestL10_PartitionedHolderSelfFences: the worker holding a key loses its
// network to the control plane (a proxy drops everything for 3×TTL). It
// must stop its job at its own deadline, before the control plane lets the
// lease expire and hands the key to a worker on the other side, so the two
// holders' effects never interleave; after the heal the old attempt's
// calls are refused. The N variant is a job that escapes its worker's stop
// (a new session): the same check must see the interleaving.
func TestL10_PartitionedHolderSelfFences(t *testing.T) {
	t.Parallel()
	t.Run("fenced", func(t *testing.T) {
		t.Parallel()
		eachBackend(t, func(t *testing.T, b backend) { partitionRound(t, b, false) })
	})
	t.Run("escaped", func(t *testing.T) {
		t.Parallel()
		partitionRound(t, backends[0], true)
	})
}

func partitionRound(t *testing.T, b backend, escaped bool) {
	const ttl = 3 * time.Second
	e := newLeaseEnv(t, func(dir string) []job {
		return []job{{name: "ticker", script: tickerScript(dir, "partitioned", escaped), leaseTTL: "3s"}}
	}, map[string]string{"ticker": "  - key: partitioned\n"})
	if escaped {
		escapeService(t, e.dir)
	}
	s := startServer(t, b.dsn(t), e)
	px := newFaultProxy(t, s.addr)
	wa := startWorkerVia(t, px.url(), "worker-a", t.TempDir(), s.registrationToken())

	run1 := s.createRun("ticker")
	var tok1 int64
	eventually(t, 30*time.Second, "run 1 ticking on worker A", func() (bool, string) {
		for tok, at := range ticks(t, e.lines("ledger")) {
			if len(at) >= 3 {
				tok1 = tok
				return true, ""
			}
		}
		return false, fmt.Sprint(e.lines("ledger"))
	})
	startWorker(t, s, "worker-b", t.TempDir(), s.registrationToken())
	run2 := s.createRun("ticker")
	px.partition()
	parted := time.Now()

	var tok2 int64
	eventually(t, 30*time.Second, "run 2 ticking on worker B", func() (bool, string) {
		for tok := range ticks(t, e.lines("ledger")) {
			if tok > tok1 {
				tok2 = tok
				return true, ""
			}
		}
		return false, ""
	})
	t.Logf("token %d took over from %d %s after the partition", tok2, tok1, time.Since(parted).Round(time.Millisecond))
	if escaped {
		time.Sleep(time.Second)
		require.Error(t, overlap(ticks(t, e.lines("ledger"))), "an escaped job keeps acting: the check must see it")
		return
	}
	time.Sleep(time.Until(parted.Add(3 * ttl)))
	px.heal()

	r2 := s.waitState(run2.ID, 40*time.Second, "succeeded", "failed", "cancelled", "timed_out")
	require.Equal(t, "succeeded", r2.State, runSummary(r2))
	r1 := s.waitState(run1.ID, 30*time.Second, "succeeded", "failed", "cancelled", "timed_out")
	require.NotEqual(t, "succeeded", r1.State, runSummary(r1))
	require.Equal(t, "expired", r1.Attempts[0].State, runSummary(r1))

	byTok := ticks(t, e.lines("ledger"))
	require.NoError(t, overlap(byTok))
	// Self-fenced at the worker's deadline: no effect later than one TTL
	// after the last renewal could have been sent (the partition).
	last := time.Unix(0, slices.Max(byTok[tok1]))
	require.Less(t, last.Sub(parted), ttl, "worker A's job acted %s into the partition", last.Sub(parted))
	// Worker A stops its job for its own deadline: at the window's end
	// ("lease lost"), or already at the SIGTERM shortly before it, after
	// which the job ends in its grace and nothing is left to kill.
	out := wa.proc.output()
	require.True(t, strings.Contains(out, "lease lost") || strings.Contains(out, `reason="lease not renewed in time"`),
		"worker A stopped its job for its own deadline:\n%s", out)

	// After the heal, the old attempt's calls are refused and change nothing.
	rc := runnerClient(t, s, wa.stateDir)
	ref := apiclient.AttemptRef{RunID: run1.ID, AttemptID: r1.Attempts[0].ID, LeaseToken: "stale-" + randHex(8)}
	_, err := rc.Renew(s.ctx(), ref)
	require.True(t, apiclient.IsCode(err, protocol.CodeAttemptStale) || apiclient.IsCode(err, protocol.CodeLeaseExpired), "late renew: %v", err)
	_, err = rc.Result(s.ctx(), ref, protocol.ResultRequest{Outcome: "succeeded", Summary: "late", RequestID: "late-" + randHex(8)})
	require.True(t, apiclient.IsCode(err, protocol.CodeAttemptStale) || apiclient.IsCode(err, protocol.CodeLeaseExpired), "late result: %v", err)
	require.Equal(t, r1.State, s.getRun(run1.ID).State)

	// Worker A is back in service.
	r3 := s.waitState(s.createRun("ticker").ID, 40*time.Second, "succeeded", "failed", "cancelled", "timed_out")
	require.Equal(t, "succeeded", r3.State, runSummary(r3))
}

// leaseHolders reads GET /v1/leases/{key}'s holders.
func leaseHolders(t *testing.T, s *server, key string) []leaseHolder {
	t.Helper()
	raw, err := s.admin.Lease(s.ctx(), key)
	require.NoError(t, err)
	var v struct {
		Holders []leaseHolder `json:"holders"`
	}
	require.NoError(t, json.Unmarshal(raw, &v), "%s", raw)
	return v.Holders
}

type leaseHolder struct {
	RunID        string     `json:"run_id"`
	AttemptID    string     `json:"attempt_id"`
	FencingToken int64      `json:"fencing_token"`
	ExpiresAt    *time.Time `json:"expires_at"`
}

// TestL9_DatabaseCrashWhileHeld: a key is held, its holder is paused (so
// nothing renews), and the database crashes and comes back. The committed
// lease survives unchanged: same holder, same token, same expiry (no grace
// period is granted at recovery, unlike etcd's refresh on leader change); it
// expires on its old schedule, the run queued behind the key takes it with a
// higher token, and the old holder, resumed, is refused and stops. By
// default the crash is a SIGKILL of the server process (for SQLite that is
// the database's crash; PostgreSQL then sees its client vanish); with
// JOBPLANE_LONG=1 the PostgreSQL variant restarts the database itself with
// `pg_ctlcluster restart -m immediate` under a running server, which must
// recover by itself.
func TestL9_DatabaseCrashWhileHeld(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		crash := func(s *server) {
			s.proc.kill()
			s.start()
		}
		if b.name == "postgres" && longRun() {
			crash = func(s *server) {
				out, err := exec.Command("ls", "/etc/postgresql").Output()
				require.NoError(t, err)
				ver := strings.TrimSpace(string(out))
				b, err := exec.Command("pg_ctlcluster", "--skip-systemctl-redirect", ver, pgCluster(), "restart", "-m", "immediate").CombinedOutput()
				require.NoError(t, err, "pg_ctlcluster restart: %s", b)
				s.waitReady(60 * time.Second)
			}
		}
		crashWhileHeld(t, b, crash)
	})
}

func longRun() bool { return os.Getenv("JOBPLANE_LONG") == "1" }

// pgCluster is the Debian cluster the database-fault tests stop and restart:
// JOBPLANE_TEST_PG_CLUSTER, so that they can run against a private cluster
// (with JOBPLANE_TEST_POSTGRES pointing at it) without disturbing anything
// else using the machine's server; "main" by default.
func pgCluster() string {
	if c := os.Getenv("JOBPLANE_TEST_PG_CLUSTER"); c != "" {
		return c
	}
	return "main"
}

func crashWhileHeld(t *testing.T, b backend, crash func(*server)) {
	const key = "crash-held"
	e := newLeaseEnv(t, func(dir string) []job {
		return []job{{name: "holder", script: tickerScript(dir, key, false), leaseTTL: "10s"}}
	}, map[string]string{"holder": "  - key: " + key + "\n"})
	s := startServer(t, b.dsn(t), e)
	wa := startWorker(t, s, "worker-a", t.TempDir(), s.registrationToken())

	// A released hold first: the crash must not bring it back.
	r0 := s.createRun("holder")
	var tok0 int64
	eventually(t, 30*time.Second, "run 0 ticking", func() (bool, string) {
		for tok := range ticks(t, e.lines("ledger")) {
			tok0 = tok
			return true, ""
		}
		return false, ""
	})
	_, err := s.admin.CancelRun(s.ctx(), r0.ID)
	require.NoError(t, err)
	s.waitState(r0.ID, 30*time.Second, "cancelled")

	run1 := s.createRun("holder")
	var tok1 int64
	eventually(t, 30*time.Second, "run 1 ticking", func() (bool, string) {
		for tok := range ticks(t, e.lines("ledger")) {
			if tok > tok0 {
				tok1 = tok
				return true, ""
			}
		}
		return false, ""
	})
	pids := e.pids()
	jobPgid := pids[len(pids)-1]
	require.NoError(t, syscall.Kill(-jobPgid, syscall.SIGSTOP))
	require.NoError(t, wa.proc.cmd.Process.Signal(syscall.SIGSTOP))
	t.Cleanup(func() {
		_ = wa.proc.cmd.Process.Signal(syscall.SIGCONT)
		_ = syscall.Kill(-jobPgid, syscall.SIGCONT)
	})
	time.Sleep(500 * time.Millisecond) // a renewal in flight lands first
	before := leaseHolders(t, s, key)
	require.Len(t, before, 1)
	require.Equal(t, run1.ID, before[0].RunID)
	require.Equal(t, tok1, before[0].FencingToken)
	run2 := s.createRun("holder")
	wb := startWorker(t, s, "worker-b", t.TempDir(), s.registrationToken())

	crash(s)
	after := leaseHolders(t, s, key)
	if time.Now().Before(*before[0].ExpiresAt) {
		require.Len(t, after, 1, "the committed lease survives the crash")
		require.Equal(t, before[0].AttemptID, after[0].AttemptID)
		require.Equal(t, tok1, after[0].FencingToken)
		require.True(t, before[0].ExpiresAt.Equal(*after[0].ExpiresAt), "the crash must not extend the lease: %s then %s", before[0].ExpiresAt, after[0].ExpiresAt)
	} else {
		t.Logf("the lease expired (%s) before the server was back; skipping the survival check", before[0].ExpiresAt)
	}

	// It expires on its old schedule, and the queued run takes the key.
	r2 := s.waitRun(run2.ID, 60*time.Second, "run 2 holding the key", func(r *protocol.Run) bool {
		return len(r.Attempts) > 0 && r.Attempts[0].State == "leased"
	})
	took := time.Now()
	require.False(t, took.Before(*before[0].ExpiresAt), "run 2 took the key at %s, before the old expiry %s", took, before[0].ExpiresAt)
	require.Equal(t, wb.runnerID, r2.Attempts[0].Runner)
	now := leaseHolders(t, s, key)
	require.Len(t, now, 1)
	require.Greater(t, now[0].FencingToken, tok1)

	// The old worker resumes (its job stays stopped, so that a late effect
	// of the job itself, which only a fence could refuse, does not muddle
	// the check): it finds its trust window over, kills the job and posts
	// nothing that counts.
	require.NoError(t, wa.proc.cmd.Process.Signal(syscall.SIGCONT))
	r1 := s.waitState(run1.ID, 30*time.Second, "succeeded", "failed", "cancelled", "timed_out")
	require.NotEqual(t, "succeeded", r1.State, runSummary(r1))
	require.Equal(t, "expired", r1.Attempts[0].State, runSummary(r1))
	eventually(t, 20*time.Second, "the old holder's job stopped", func() (bool, string) {
		return len(groupMembers(jobPgid)) == 0, fmt.Sprint(groupMembers(jobPgid))
	})
	r2 = s.waitState(run2.ID, 60*time.Second, "succeeded", "failed", "cancelled", "timed_out")
	require.Equal(t, "succeeded", r2.State, runSummary(r2))
	require.NoError(t, overlap(ticks(t, e.lines("ledger"))))
}

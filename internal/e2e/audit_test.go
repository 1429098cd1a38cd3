package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/apiclient"
	"github.com/jobplane/jobplane/internal/protocol"
)

// TestAU1DeathBetweenAuditAndCommit: the server dies (as under SIGKILL)
// after a mutation's audit event is written and before its transaction
// commits (audit.afterInsertBeforeCommit=exit). After a restart neither the
// run nor its event exists, and the chain verifies. Then the operator's
// view: `jobplane audit` (text and JSON lines), `audit verify` with and
// without a checkpoint, and the timeline in `runs show`.
func TestAU1DeathBetweenAuditAndCommit(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, func(dir string) []job { return []job{{name: "hello", script: "true"}} })
		s := startServer(t, b.dsn(t), e)
		first, err := s.admin.CreateRun(s.ctx(), &protocol.RunRequest{Job: "hello", Channel: "prod"})
		require.NoError(t, err)
		require.NoError(t, s.proc.stop(t, 20*time.Second))

		// Restart with the failpoint: start-up writes nothing (admin and
		// catalog are already recorded), the first mutation kills it.
		s.starts++
		s.proc = startProc(t, fmt.Sprintf("server-%d", s.starts), []string{"JOBPLANE_ADMIN_TOKEN=" + s.adminToken,
			"JOBPLANE_FAILPOINTS=audit.afterInsertBeforeCommit=exit"},
			"server", "--listen", s.addr, "--db", s.db, "--definitions", s.defs,
			"--channel", "prod=main", "--data-dir", s.dataDir, "--log-level", "debug")
		s.waitReady(30 * time.Second)
		_, err = s.admin.CreateRun(s.ctx(), &protocol.RunRequest{Job: "hello", Channel: "prod", Reason: "never committed"})
		require.Error(t, err, "the server died before answering")
		select {
		case <-s.proc.done:
		case <-time.After(20 * time.Second):
			t.Fatal("the server did not exit at the failpoint")
		}
		require.ErrorContains(t, s.proc.err, "exit status 99")

		s.start()
		runs, err := s.admin.ListRuns(s.ctx(), apiclient.ListRunsParams{})
		require.NoError(t, err)
		require.Len(t, runs.Runs, 1, "the mutation whose audit event was written rolled back with it")
		require.Equal(t, first.ID, runs.Runs[0].ID)

		out, errOut, code := runCLI(t, s, "audit", "--json")
		require.Equal(t, 0, code, errOut)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		var requested int
		for _, l := range lines {
			var ev protocol.AuditEvent
			require.NoError(t, json.Unmarshal([]byte(l), &ev), "a JSON line: %s", l)
			require.NotZero(t, ev.Seq)
			if ev.Action == "run.requested" {
				requested++
				require.Equal(t, first.ID, ev.Subject)
			}
		}
		require.Equal(t, 1, requested, "no event of the rolled-back request")

		out, errOut, code = runCLI(t, s, "audit", "--run", first.ID)
		require.Equal(t, 0, code, errOut)
		require.Contains(t, out, "run.requested")
		require.Contains(t, out, first.ID)

		// Verify, once the sealer (every second) has caught up.
		var cp string
		eventually(t, 20*time.Second, "audit sealed", func() (bool, string) {
			out, errOut, code := runCLI(t, s, "audit", "verify")
			if code != 0 {
				return false, out + errOut
			}
			m := regexp.MustCompile(`(?m)^checkpoint: ([0-9]+:[0-9a-f]{64})$`).FindStringSubmatch(out)
			if m == nil || !strings.Contains(out, " 0 waiting") {
				return false, out
			}
			cp = m[1]
			return true, ""
		})
		out, errOut, code = runCLI(t, s, "audit", "verify", "--checkpoint", cp)
		require.Equal(t, 0, code, out+errOut)
		require.Contains(t, out, "checkpoint "+cp+" found in the chain")
		out, _, code = runCLI(t, s, "audit", "verify", "--checkpoint", "999999:"+strings.Repeat("ab", 32))
		require.Equal(t, 1, code, "a checkpoint past the chain's end fails verification")
		require.Contains(t, out, "BROKEN at event 999999")

		// The checkpoint file routine: the first run writes the head, the
		// next verifies against it and appends the (same or newer) head.
		cpFile := filepath.Join(t.TempDir(), "audit.checkpoints")
		for range 2 {
			out, errOut, code = runCLI(t, s, "audit", "verify", "--checkpoint-file", cpFile)
			require.Equal(t, 0, code, out+errOut)
		}
		raw, err := os.ReadFile(cpFile)
		require.NoError(t, err)
		saved := strings.Fields(string(raw))
		require.Len(t, saved, 2)
		require.Contains(t, out, "checkpoint "+saved[0]+" found in the chain")
		require.NoError(t, os.WriteFile(cpFile, []byte("garbage\n"), 0o600))
		_, errOut, code = runCLI(t, s, "audit", "verify", "--checkpoint-file", cpFile)
		require.Equal(t, 1, code)
		require.Contains(t, errOut, "last line")

		out, errOut, code = runCLI(t, s, "runs", "show", first.ID)
		require.Equal(t, 0, code, errOut)
		require.Regexp(t, `(?m)^timeline\n  \S+\s+queued\s+run.requested\s+by admin`, out)
	})
}

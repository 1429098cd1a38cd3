package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestWorkerFailover: two server replicas on one PostgreSQL and a worker
// given both. The replica the worker talks to is killed while a job on a
// 3 s lease runs for longer than the lease: the worker renews through the
// survivor, so the job is neither stopped nor run again, its result is
// recorded, and the next run is claimed through the survivor.
func TestWorkerFailover(t *testing.T) {
	t.Parallel()
	dsn := backends[1].dsn(t)
	e := newEnv(t, func(dir string) []job {
		return []job{{name: "long", leaseTTL: "3s", script: fmt.Sprintf(
			`echo $$ >> %[1]s/pids; echo "start $JOBPLANE_RUN_ID" >> %[1]s/effects; sleep 8; echo "end $JOBPLANE_RUN_ID" >> %[1]s/effects`, dir)}}
	})
	sa := startServer(t, dsn, e)
	sb := replica(t, sa)
	// Both replicas in one flag and one more repeated: the worker sees a, b, a.
	w := startWorkerVia(t, sa.url+","+sb.url, "worker", t.TempDir(), sa.registrationToken(), "--server", sa.url)

	run := sa.createRun("long")
	eventually(t, 30*time.Second, "the job started", func() (bool, string) {
		l := e.lines("effects")
		return len(l) == 1, strings.Join(l, "|")
	})
	sa.proc.kill()
	r := sb.waitState(run.ID, 60*time.Second, "succeeded", "failed", "cancelled", "timed_out")
	require.Equal(t, "succeeded", r.State, runSummary(r))
	require.Len(t, r.Attempts, 1, "the job was not run again: %s", runSummary(r))
	require.Equal(t, []string{"start " + run.ID, "end " + run.ID}, e.lines("effects"))

	next := sb.createRun("long")
	r = sb.waitState(next.ID, 60*time.Second, "succeeded", "failed", "cancelled", "timed_out")
	require.Equal(t, "succeeded", r.State, runSummary(r))
	require.Len(t, r.Attempts, 1, runSummary(r))
	require.Equal(t, w.runnerID, r.Attempts[0].Runner)
	out := w.proc.output()
	require.NotContains(t, out, "killing job", "the job was never stopped for a lost lease")
	require.Contains(t, out, "failing over", "the worker said it moved to the survivor")
}

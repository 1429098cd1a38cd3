package control

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
	"github.com/jobplane/jobplane/internal/store/testdb"
)

// TestAU1ExpiryIsAuditedWithHolder: the reaper's transition (an internal
// one, no route) is audited like a runner's: actor, reason, and the holder
// whose lease ran out; the run's timeline shows every state with its actor.
func TestAU1ExpiryIsAuditedWithHolder(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st, jobSpec(5*time.Second, time.Hour, 1))
		run := e.request()
		rn := e.runner("r1")
		asg := e.claim(e.a, rn, "claim-1")
		e.clock.Advance(6 * time.Second)
		n, err := e.b.Reap(e.ctx())
		require.NoError(t, err)
		require.Equal(t, 1, n)

		evs, err := st.AuditList(e.ctx(), &store.AuditListParams{Tenant: testTenant, RunID: run.ID, Limit: 100})
		require.NoError(t, err)
		last := evs[len(evs)-1]
		require.Equal(t, "attempt.expired", last.Action)
		require.Equal(t, "system:reaper", last.Actor)
		var d struct {
			Reason   string            `json:"reason"`
			RunState string            `json:"run_state"`
			Holder   map[string]string `json:"holder"`
		}
		require.NoError(t, json.Unmarshal(last.Details, &d))
		require.Equal(t, "lease expired", d.Reason)
		require.Equal(t, "failed", d.RunState)
		require.Equal(t, map[string]string{
			"registration": rn.ID, "incarnation": "claim-1", "lease": protocol.SHA256Hex([]byte(asg.Lease.Token))[:16],
		}, d.Holder)

		v, err := e.a.GetRun(e.ctx(), e.actor, run.ID)
		require.NoError(t, err)
		var got []string
		for _, te := range v.Timeline {
			got = append(got, te.Action+" "+te.State+" "+te.Actor)
		}
		require.Equal(t, []string{
			"run.requested queued alice",
			"attempt.claimed running runner:" + rn.ID,
			"attempt.expired failed system:reaper",
		}, got)
		require.Equal(t, "lease expired", v.Timeline[2].Reason)
		require.Equal(t, asg.AttemptID, v.Timeline[2].Attempt)
	})
}

package control

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/lease"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
	"github.com/jobplane/jobplane/internal/store/testdb"
)

// TestBlockedClaimMarksEveryWaiter: a claim that finds a key full on an
// attempt its release had woken marks every queued attempt waiting for
// that key as waiting again, in whatever pool, not only the one it
// claimed; and each run then runs once, one after the other.
func TestBlockedClaimMarksEveryWaiter(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		t.Parallel()
		tmpl := lease.Template{Key: "herd"}
		e := newLeaseEnv(t, st,
			leaseJob("ha", "pool-ha", time.Hour, tmpl),
			leaseJob("hb", "pool-hb", time.Hour, tmpl))
		ra, rb := e.runnerIn("pool-ha", "herd-a"), e.runnerIn("pool-hb", "herd-b")
		_, err := e.requestJob(e.a, "ha")
		require.NoError(t, err)
		holder := e.claim(e.a, ra, "")
		require.Equal(t, int64(1), tokenOf(holder, "herd"))
		var waiting []*store.Run
		for _, job := range []string{"ha", "ha", "hb"} {
			r, err := e.requestJob(e.a, job)
			require.NoError(t, err)
			waiting = append(waiting, r)
		}
		// Each is claimed once and marked, then a release wakes them all;
		// the next claim hands the key on.
		for _, rn := range []*store.Runner{ra, ra, rb} {
			asg, err := e.a.Claim(e.ctx(), call(rn, nil), &protocol.ClaimRequest{})
			require.NoError(t, err)
			require.Nil(t, asg)
		}
		list, err := st.LeaseWaiters(e.ctx(), testTenant, "herd")
		require.NoError(t, err)
		require.Len(t, list, 3)
		_, err = e.a.Result(e.ctx(), call(ra, holder), succeeded())
		require.NoError(t, err)
		list, err = st.LeaseWaiters(e.ctx(), testTenant, "herd")
		require.NoError(t, err)
		require.Empty(t, list)
		holder = e.claim(e.a, ra, "")
		waiting = slices.DeleteFunc(waiting, func(r *store.Run) bool { return r.ID == holder.RunID })
		require.Len(t, waiting, 2)

		// The runner of pool-ha meets the key full on a woken waiter; the
		// woken waiters of pool-hb are marked with it.
		asg, err := e.a.Claim(e.ctx(), call(ra, nil), &protocol.ClaimRequest{})
		require.NoError(t, err)
		require.Nil(t, asg)
		list, err = st.LeaseWaiters(e.ctx(), testTenant, "herd")
		require.NoError(t, err)
		require.Len(t, list, 2)
		for _, r := range waiting {
			got, err := st.RunGetByID(e.ctx(), r.ID, false)
			require.NoError(t, err)
			require.Equal(t, "lease herd", got.WaitingFor)
		}

		// Released, they run one at a time, each once.
		_, err = e.a.Result(e.ctx(), call(ra, holder), succeeded())
		require.NoError(t, err)
		ran := map[string]bool{}
		for range 8 {
			for _, rn := range []*store.Runner{ra, rb} {
				asg, err := e.a.Claim(e.ctx(), call(rn, nil), &protocol.ClaimRequest{})
				require.NoError(t, err)
				if asg == nil {
					continue
				}
				require.False(t, ran[asg.RunID], "run %s claimed twice", asg.RunID)
				ran[asg.RunID] = true
				_, err = e.a.Result(e.ctx(), call(rn, asg), succeeded())
				require.NoError(t, err)
			}
		}
		for _, r := range waiting {
			require.True(t, ran[r.ID], "run %s never ran", r.ID)
		}
	})
}

// TestStrandedWaiterIsWoken: an attempt left waiting for a key nobody
// holds (a release skips a waiter whose row another transaction has
// locked) is made claimable by the sweep, and only then; the sweep leaves
// the waiters of a held key alone.
func TestStrandedWaiterIsWoken(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		t.Parallel()
		e := newLeaseEnv(t, st, leaseJob("sw", "pool-sw", time.Hour, lease.Template{Key: "strand"}))
		rn := e.runnerIn("pool-sw", "strand-a")
		_, err := e.requestJob(e.a, "sw")
		require.NoError(t, err)
		holder := e.claim(e.a, rn, "")
		waiter, err := e.requestJob(e.a, "sw")
		require.NoError(t, err)
		asg, err := e.a.Claim(e.ctx(), call(rn, nil), &protocol.ClaimRequest{})
		require.NoError(t, err)
		require.Nil(t, asg, "the key is held")
		n, err := e.a.Leases().WakeStrandedWaiters(e.ctx())
		require.NoError(t, err)
		require.Zero(t, n, "the key is held: its waiter stays")

		_, err = e.a.Result(e.ctx(), call(rn, holder), succeeded())
		require.NoError(t, err)
		// As if the release had found the waiter's row locked.
		list, err := st.AttemptListByRun(e.ctx(), waiter.ID)
		require.NoError(t, err)
		require.Len(t, list, 1)
		a := list[0]
		a.BlockedOn = "strand"
		require.NoError(t, st.AttemptUpdate(e.ctx(), a))
		asg, err = e.a.Claim(e.ctx(), call(rn, nil), &protocol.ClaimRequest{})
		require.NoError(t, err)
		require.Nil(t, asg, "stranded")

		n, err = e.a.Leases().WakeStrandedWaiters(e.ctx())
		require.NoError(t, err)
		require.Equal(t, 1, n)
		got := e.claim(e.a, rn, "")
		require.Equal(t, waiter.ID, got.RunID)
		require.Equal(t, int64(2), tokenOf(got, "strand"))
	})
}

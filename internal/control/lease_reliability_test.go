package control

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/failpoint"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
	"github.com/jobplane/jobplane/internal/store/testdb"
)

// Failpoints are process-wide, so the tests that set them (C4/C11, C6) do
// not call t.Parallel: Go runs every sequential top-level test before it
// releases the parallel ones, so no other test's Claim, Result or Reap can
// trip them.

// TestC3_ReplayAfterReassignment: attempt 1's lease runs out, the reaper
// expires it, attempt 2 goes to another runner; attempt 1's renew, logs and
// result replayed with its old credentials are refused with 409 and change
// nothing.
func TestC3_ReplayAfterReassignment(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		t.Parallel()
		e := newEnv(t, st, jobSpec(2*time.Second, time.Hour, 3))
		old, next := e.runner("c3-old"), e.runner("c3-new")
		run := e.request()
		asg1 := e.claim(e.a, old, "c3-claim")
		_, err := e.a.Renew(e.ctx(), call(old, asg1))
		require.NoError(t, err)

		// The worker is SIGKILLed: no more renewals. Its lease runs out.
		e.clock.Advance(3 * time.Second)
		n, err := e.b.Reap(e.ctx())
		require.NoError(t, err)
		require.Equal(t, 1, n)
		asg2 := e.claim(e.b, next, "c3-claim")
		require.Equal(t, 2, asg2.AttemptNumber)

		// The resurrected copy replays everything it had, on both planes.
		for _, svc := range []*Service{e.a, e.b} {
			_, err = svc.Renew(e.ctx(), call(old, asg1))
			requireStaleOrExpired(t, err)
			err = svc.AppendLogs(e.ctx(), call(old, asg1), &protocol.LogsRequest{Seq: 7, Lines: []protocol.LogLine{{Stream: "stdout", Text: "late"}}})
			requireStaleOrExpired(t, err)
			for _, outcome := range []string{"succeeded", "failed"} {
				_, err = svc.Result(e.ctx(), call(old, asg1), &protocol.ResultRequest{Outcome: outcome, Summary: "late"})
				requireStaleOrExpired(t, err)
			}
			err = svc.Relinquish(e.ctx(), call(old, asg1), &protocol.RelinquishRequest{Reason: "late"})
			requireStaleOrExpired(t, err)
			// Its claim request ID gets nothing back either.
			asg, err := svc.Claim(e.ctx(), call(old, nil), &protocol.ClaimRequest{RequestID: "c3-claim"})
			require.NoError(t, err)
			require.Nil(t, asg)
			// Attempt 1's token with attempt 2's IDs is not attempt 2's lease.
			forged := *asg2
			forged.Lease.Token = asg1.Lease.Token
			_, err = svc.Renew(e.ctx(), call(next, &forged))
			require.ErrorIs(t, err, protocol.ErrAttemptStale)
		}

		// Nothing changed: attempt 2 leased to the new runner, run running.
		atts := e.attempts(run.ID)
		require.Len(t, atts, 2)
		require.Equal(t, store.AttemptExpired, atts[0].State)
		require.Empty(t, atts[0].Result)
		require.Equal(t, store.AttemptLeased, atts[1].State)
		require.Equal(t, next.ID, atts[1].RunnerID)
		r := e.run(run.ID)
		require.Equal(t, store.RunRunning, r.State)
		require.Equal(t, 1, r.CountedAttempts)
		lines, err := st.LogList(e.ctx(), &store.LogListParams{RunID: run.ID, Limit: 100})
		require.NoError(t, err)
		require.Empty(t, lines)
		// Attempt 2 is unaffected and completes.
		_, err = e.a.Renew(e.ctx(), call(next, asg2))
		require.NoError(t, err)
		resp, err := e.a.Result(e.ctx(), call(next, asg2), succeeded())
		require.NoError(t, err)
		require.Equal(t, string(store.RunSucceeded), resp.RunState)
		require.Equal(t, 1, e.auditCount(run.ID, "attempt.expired"))
		require.Equal(t, 1, e.auditCount(run.ID, "attempt.succeeded"))
	})
}

func requireStaleOrExpired(t *testing.T, err error) {
	t.Helper()
	require.Error(t, err)
	require.True(t, errors.Is(err, protocol.ErrLeaseExpired) || errors.Is(err, protocol.ErrAttemptStale), "want 409 lease_expired or attempt_stale, got %v", err)
	var pe *protocol.Error
	require.ErrorAs(t, err, &pe)
	require.Equal(t, 409, pe.Status)
}

// world renders everything a stale rescuer could damage about a run: its
// attempts, its state and retry count, and its audit trail. "Affects
// nothing" is checked as world before == world after.
func world(e *env, runID string) string {
	e.t.Helper()
	var b strings.Builder
	r := e.run(runID)
	fmt.Fprintf(&b, "run %s counted=%d;", r.State, r.CountedAttempts)
	for _, a := range e.attempts(runID) {
		fmt.Fprintf(&b, " attempt %d %s runner=%s;", a.Number, a.State, a.RunnerID)
	}
	evs, err := e.store.AuditList(e.ctx(), &store.AuditListParams{Tenant: testTenant, RunID: runID, Limit: 1000})
	require.NoError(e.t, err)
	for _, ev := range evs {
		fmt.Fprintf(&b, " %s", ev.Action)
	}
	return b.String()
}

// TestC4_RescuerStaleSnapshot (also C11, same shape): control plane A's
// reaper lists an expired attempt and is paused right after its SELECT
// (rescue.afterSelect), as a SIGSTOPped node would be. Control plane B reaps
// the attempt, attempt 2 is claimed and succeeds. When A resumes, its stale
// snapshot affects nothing: no second expiry, no third attempt, the finished
// run stays finished. The N variant runs the same interleaving with a reaper
// that acts on the snapshot by ID alone and shows the checker catches it.
func TestC4_RescuerStaleSnapshot(t *testing.T) {
	testdb.Each(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st, jobSpec(2*time.Second, time.Hour, 3))
		first, second := e.runner("c4-a"), e.runner("c4-b")
		run := e.request()
		asg1 := e.claim(e.a, first, "")
		e.clock.Advance(3 * time.Second)

		b := newBlocker()
		disable := failpoint.Enable("rescue.afterSelect", b.fn)
		defer disable()
		defer func() { // never leave the reaper parked, even on failure
			select {
			case <-b.release:
			default:
				close(b.release)
			}
		}()
		type reapResult struct {
			n   int
			err error
		}
		paused := make(chan reapResult, 1)
		go func() {
			n, err := e.a.Reap(context.Background())
			paused <- reapResult{n, err}
		}()
		waitFor(t, b.reached, "reaper A to list the expired attempt")

		// B moves the world on while A sleeps on its snapshot.
		n, err := e.b.Reap(e.ctx())
		require.NoError(t, err)
		require.Equal(t, 1, n)
		asg2 := e.claim(e.b, second, "")
		require.Equal(t, 2, asg2.AttemptNumber)
		_, err = e.b.Result(e.ctx(), call(second, asg2), succeeded())
		require.NoError(t, err)
		// Attempt 1's holder cannot sneak a result in either.
		_, err = e.b.Result(e.ctx(), call(first, asg1), succeeded())
		requireStaleOrExpired(t, err)
		before := world(e, run.ID)
		require.Contains(t, before, "run succeeded counted=1; attempt 1 expired")

		close(b.release)
		got := <-paused
		require.NoError(t, got.err)
		require.Equal(t, 0, got.n, "the resumed reaper must affect 0 rows")
		require.Equal(t, before, world(e, run.ID))
		require.Equal(t, 1, e.auditCount(run.ID, "attempt.expired"))

		// N: the guard removed. A reaper that trusts its snapshot, on the
		// same interleaving, is stopped here only by UNIQUE (run_id, number)
		// (it tries to create attempt 2 again); so the variant runs on a job
		// without retries, where nothing else catches it: it expires the
		// attempt a second time and counts it twice.
		t.Run("N_reap_by_id_only", func(t *testing.T) {
			err := brokenReap(e.a, []*store.Attempt{{ID: asg1.AttemptID}})
			require.ErrorIs(t, err, store.ErrAlreadyExists, "second guard: attempt number 2 exists")
			require.Equal(t, before, world(e, run.ID))

			n1 := newEnv(t, st, jobSpec(2*time.Second, time.Hour, 1))
			rn := n1.runner("c4-n")
			run1 := n1.request()
			asg := n1.claim(n1.a, rn, "")
			n1.clock.Advance(3 * time.Second)
			snap := []*store.Attempt{{ID: asg.AttemptID}} // listed, then paused
			n, err := n1.b.Reap(n1.ctx())
			require.NoError(t, err)
			require.Equal(t, 1, n)
			before := world(n1, run1.ID)
			require.NoError(t, brokenReap(n1.a, snap))
			after := world(n1, run1.ID)
			require.NotEqual(t, before, after, "the checker must catch a rescue by ID only")
			t.Logf("C4 N variant caught:\n before %s\n after  %s", before, after)
		})
	})
}

// brokenReap is Reap without the re-check under the lock (River #1302): it
// expires whatever its snapshot listed.
func brokenReap(s *Service, snapshot []*store.Attempt) error {
	ctx := context.Background()
	for _, snap := range snapshot {
		err := s.store.InTx(ctx, func(tx store.Tx) error {
			a, err := tx.AttemptGetByID(ctx, snap.ID, true)
			if err != nil {
				return err
			}
			now, err := tx.Now(ctx, s.clock.NowOrNil())
			if err != nil {
				return err
			}
			r, err := tx.RunGetByID(ctx, a.RunID, true)
			if err != nil {
				return err
			}
			return s.endAttempt(ctx, tx, writeNow{tx}, r, a, store.AttemptExpired, nil, now, "system:reaper", "lease expired")
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// TestC6_ClaimCommitFaults: a claim that fails before COMMIT leaves the
// attempt queued with no lease; a claim whose COMMIT succeeded but whose
// answer was lost is returned again, with a working rotated token, to a retry
// with the same request_id; and a lost claim that is never retried is
// re-dispatched once its lease TTL has passed.
func TestC6_ClaimCommitFaults(t *testing.T) {
	testdb.Each(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st, jobSpec(5*time.Second, time.Hour, 3))
		rn, other := e.runner("c6"), e.runner("c6-other")

		t.Run("beforeCommit", func(t *testing.T) {
			run := e.request()
			disable := failpoint.Enable("claim.beforeCommit", func() error { return failpoint.ErrInjected })
			asg, err := e.a.Claim(e.ctx(), call(rn, nil), &protocol.ClaimRequest{RequestID: "c6-before"})
			disable()
			require.ErrorIs(t, err, failpoint.ErrInjected)
			require.Nil(t, asg)
			atts := e.attempts(run.ID)
			require.Len(t, atts, 1)
			require.Equal(t, store.AttemptQueued, atts[0].State, "rolled back: still queued")
			require.Empty(t, atts[0].RunnerID)
			require.Empty(t, atts[0].LeaseDigest)
			require.Nil(t, atts[0].LeaseExpiresAt, "no running-without-lease row")
			require.Equal(t, store.RunQueued, e.run(run.ID).State)
			require.Equal(t, 0, e.auditCount(run.ID, "attempt.claimed"))
			leased, err := st.AttemptListLeasedByRunner(e.ctx(), rn.ID)
			require.NoError(t, err)
			require.Empty(t, leased)
			// The retry with the same request ID claims it normally.
			asg = e.claim(e.b, rn, "c6-before")
			require.Equal(t, atts[0].ID, asg.AttemptID)
			_, err = e.b.Result(e.ctx(), call(rn, asg), succeeded())
			require.NoError(t, err)
		})

		t.Run("afterCommitBeforeReply", func(t *testing.T) {
			run := e.request()
			disable := failpoint.Enable("claim.afterCommitBeforeReply", func() error { return failpoint.ErrInjected })
			asg, err := e.a.Claim(e.ctx(), call(rn, nil), &protocol.ClaimRequest{RequestID: "c6-after"})
			disable()
			require.Error(t, err)
			require.Nil(t, asg, "the answer was lost")
			atts := e.attempts(run.ID)
			require.Len(t, atts, 1)
			require.Equal(t, store.AttemptLeased, atts[0].State, "the claim committed")
			require.Equal(t, rn.ID, atts[0].RunnerID)
			require.Equal(t, 1, e.auditCount(run.ID, "attempt.claimed"))

			// Retry with the same request ID, on the other control plane.
			asg = e.claim(e.b, rn, "c6-after")
			require.Equal(t, atts[0].ID, asg.AttemptID)
			require.Equal(t, run.ID, asg.RunID)
			require.Equal(t, 1, asg.AttemptNumber)
			again := e.claim(e.a, rn, "c6-after")
			require.Equal(t, asg.AttemptID, again.AttemptID)
			require.NotEqual(t, asg.Lease.Token, again.Lease.Token, "the token is rotated")
			_, err = e.a.Renew(e.ctx(), call(rn, asg))
			require.ErrorIs(t, err, protocol.ErrAttemptStale, "the earlier token stops working")
			_, err = e.a.Renew(e.ctx(), call(rn, again))
			require.NoError(t, err, "the rotated token works")
			// Another runner replaying the request ID gets nothing of it.
			got, err := e.a.Claim(e.ctx(), call(other, nil), &protocol.ClaimRequest{RequestID: "c6-after"})
			require.NoError(t, err)
			require.Nil(t, got)
			require.Len(t, e.attempts(run.ID), 1)
			require.Equal(t, 1, e.auditCount(run.ID, "attempt.claimed"))
			_, err = e.b.Result(e.ctx(), call(rn, again), succeeded())
			require.NoError(t, err)
		})

		t.Run("lostAndNeverRetried", func(t *testing.T) {
			run := e.request()
			disable := failpoint.Enable("claim.afterCommitBeforeReply", func() error { return failpoint.ErrInjected })
			_, err := e.a.Claim(e.ctx(), call(rn, nil), &protocol.ClaimRequest{RequestID: "c6-lost"})
			disable()
			require.Error(t, err)
			// Not yet: the lease is alive.
			n, err := e.b.Reap(e.ctx())
			require.NoError(t, err)
			require.Equal(t, 0, n)
			e.clock.Advance(5 * time.Second) // exactly the TTL: expired (expiry <= now)
			n, err = e.b.Reap(e.ctx())
			require.NoError(t, err)
			require.Equal(t, 1, n)
			asg := e.claim(e.a, other, "")
			require.Equal(t, run.ID, asg.RunID)
			require.Equal(t, 2, asg.AttemptNumber)
			// The lost claim's retry, too late, gets nothing.
			got, err := e.a.Claim(e.ctx(), call(rn, nil), &protocol.ClaimRequest{RequestID: "c6-lost"})
			require.NoError(t, err)
			require.Nil(t, got)
		})
	})
}

// TestC10_HealthyLeaseNeverRescued: TTL 2 s, timeout 1 h, renewed every
// second of fake time for 10×TTL, alternating between two control planes (a
// restart of either changes nothing: the lease lives in the database), with
// a reaper pass after every step: never rescued. Then it stops renewing and
// is reaped at its expiry.
func TestC10_HealthyLeaseNeverRescued(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		t.Parallel()
		e := newEnv(t, st, jobSpec(2*time.Second, time.Hour, 3))
		rn := e.runner("c10")
		run := e.request()
		asg := e.claim(e.a, rn, "")
		planes := []*Service{e.a, e.b}
		for step := 1; step <= 20; step++ {
			e.clock.Advance(time.Second)
			if step%7 == 0 { // a control plane restarts: a new instance
				planes[step%2] = e.newService(st)
			}
			resp, err := planes[step%2].Renew(e.ctx(), call(rn, asg))
			require.NoError(t, err, "renew at step %d", step)
			require.Equal(t, e.clock.Now().Add(2*time.Second), resp.ExpiresAt)
			for _, p := range planes {
				n, err := p.Reap(e.ctx())
				require.NoError(t, err)
				require.Equal(t, 0, n, "rescued a heartbeating attempt at step %d", step)
			}
		}
		atts := e.attempts(run.ID)
		require.Len(t, atts, 1)
		require.Equal(t, store.AttemptLeased, atts[0].State)
		require.Equal(t, 0, e.auditCount(run.ID, "attempt.expired"))

		// The sanity half: silence for one TTL and it is rescued.
		e.clock.Advance(2 * time.Second)
		n, err := e.b.Reap(e.ctx())
		require.NoError(t, err)
		require.Equal(t, 1, n)
		require.Len(t, e.attempts(run.ID), 2)
	})
}

// TestC10_ExpiredBehindManyLive: 10,000 leased, unexpired attempts that were
// claimed (and sort by ID) before one expired attempt; the reaper's batch is
// 100. One Reap call still finds and expires the expired one, because the
// list filters by expiry instead of paging through every leased row.
func TestC10_ExpiredBehindManyLive(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		t.Parallel()
		st := b.st
		spec := jobSpec(time.Minute, time.Hour, 3)
		e := newEnv(t, st, spec, withReapBatch(100))
		rn := e.runner("c10-holder")
		const live = 10000
		claimed := testEpoch.Add(-time.Minute)
		lease := func(expires time.Time) func(a *store.Attempt, r *store.Run) {
			return func(a *store.Attempt, r *store.Run) {
				a.State, a.RunnerID, a.LeaseDigest = store.AttemptLeased, rn.ID, protocol.SHA256Hex([]byte(a.ID))
				a.ClaimedAt, a.HeartbeatAt = &claimed, &claimed
				a.LeaseExpiresAt, a.Deadline = &expires, ptr(claimed.Add(time.Hour))
				r.State = store.RunRunning
			}
		}
		b.cloneRuns(t, spec, live, lease(testEpoch.Add(time.Minute)))
		// The expired one sorts after every live one by ID and claim order.
		expiredAtt, expiredRun := b.cloneRuns(t, spec, 1, func(a *store.Attempt, r *store.Run) {
			lease(testEpoch.Add(-time.Second))(a, r)
			late := claimed.Add(time.Second)
			a.ClaimedAt, a.HeartbeatAt = &late, &late
			r.ID, a.ID = "run_ZZZZ"+r.ID[len("run_"):], "att_ZZZZ"+a.ID[len("att_"):]
			a.RunID = r.ID
		})
		require.Equal(t, live+1, b.count(t, `SELECT count(*) FROM attempts WHERE state = 'leased'`))

		n, err := e.a.Reap(e.ctx())
		require.NoError(t, err)
		require.Equal(t, 1, n)
		a, err := st.AttemptGetByID(e.ctx(), expiredAtt[0], false)
		require.NoError(t, err)
		require.Equal(t, store.AttemptExpired, a.State)
		require.Len(t, e.attempts(expiredRun[0]), 2, "the run got its next attempt")
		require.Equal(t, live, b.count(t, `SELECT count(*) FROM attempts WHERE state = 'leased'`), "no live lease was touched")

		// And with more expired rows than one batch, each pass takes at
		// most a batch and nothing is skipped.
		more, _ := b.cloneRuns(t, spec, 250, lease(testEpoch.Add(-time.Second)))
		total := 0
		for pass := 0; pass < 3; pass++ {
			n, err := e.b.Reap(e.ctx())
			require.NoError(t, err)
			require.LessOrEqual(t, n, 100)
			total += n
		}
		require.Equal(t, len(more), total)
		n, err = e.b.Reap(e.ctx())
		require.NoError(t, err)
		require.Equal(t, 0, n)
		require.Equal(t, live, b.count(t, `SELECT count(*) FROM attempts WHERE state = 'leased'`))
	})
}

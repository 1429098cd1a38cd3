package control

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
	"github.com/jobplane/jobplane/internal/store/testdb"
)

// c1Size is the number of queued attempts C1 drains. The default keeps the
// package under its time budget under -race: the drain runs at a few hundred
// claim+result pairs per second on a 2-core box (see the report in the
// test log), so 20,000 takes minutes. ACCEPT_CLAIMS=N sets the size;
// JOBPLANE_LONG=1 runs the 20,000.
func c1Size(t *testing.T, backend string) int {
	if v := os.Getenv("ACCEPT_CLAIMS"); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err)
		return n
	}
	if os.Getenv("JOBPLANE_LONG") == "1" {
		return 20000
	}
	if backend == "sqlite" {
		return 1000
	}
	return 2000
}

// TestC1_DrainExactlyOnce: N queued attempts, 32 claimers split across two
// control planes on one store, each looping claim(wait 0) → result. Every
// attempt is claimed exactly once, none is lost, and the only "error" is an
// empty queue.
func TestC1_DrainExactlyOnce(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		t.Parallel()
		testC1(t, b)
	})
}

func testC1(t *testing.T, b backend) {
	backend, st := b.name, b.st
	n := c1Size(t, backend)
	spec := jobSpec(time.Hour, 2*time.Hour, 1)
	e := newEnv(t, st, spec)
	seedStart := time.Now()
	seededAttempts, seededRuns := b.cloneRuns(t, spec, n, nil)
	t.Logf("C1 %s: seeded %d queued attempts in %s", backend, n, time.Since(seedStart).Round(time.Millisecond))

	const claimers = 32
	runners := make([]*store.Runner, claimers)
	for i := range runners {
		runners[i] = e.runner(fmt.Sprintf("c1-%d", i))
	}
	type claimRec struct{ attempt, run, runner string }
	var (
		mu        sync.Mutex
		history   []claimRec
		latencies []time.Duration
		errs      []error
		wg        sync.WaitGroup
	)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	for i := range claimers {
		svc := e.a
		if i%2 == 1 {
			svc = e.b // the second control plane
		}
		rn := runners[i]
		wg.Go(func() {
			var mine []claimRec
			var lat []time.Duration
			defer func() {
				mu.Lock()
				history = append(history, mine...)
				latencies = append(latencies, lat...)
				mu.Unlock()
			}()
			for ctx.Err() == nil {
				t0 := time.Now()
				asg, err := svc.Claim(ctx, call(rn, nil), &protocol.ClaimRequest{})
				lat = append(lat, time.Since(t0))
				if err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("claim: %w", err))
					mu.Unlock()
					return
				}
				if asg == nil {
					return // queue empty: the only acceptable "error"
				}
				mine = append(mine, claimRec{asg.AttemptID, asg.RunID, rn.ID})
				if asg.AttemptNumber != 1 {
					mu.Lock()
					errs = append(errs, fmt.Errorf("attempt %s has number %d", asg.AttemptID, asg.AttemptNumber))
					mu.Unlock()
				}
				if _, err := svc.Result(ctx, call(rn, asg), succeeded()); err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("result of %s: %w", asg.AttemptID, err))
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	require.Empty(t, errs, "no errors other than an empty queue")

	slices.Sort(latencies)
	p := func(q float64) time.Duration {
		return latencies[int(q*float64(len(latencies)-1))].Round(time.Microsecond)
	}
	t.Logf("C1 %s: %d attempts drained by %d claimers on 2 control planes in %s: %.0f claim+result/s, claim latency p50 %s p99 %s",
		backend, len(history), claimers, elapsed.Round(time.Millisecond), float64(len(history))/elapsed.Seconds(), p(0.5), p(0.99))

	// History: every seeded attempt claimed exactly once.
	want := make(map[string]string, n) // attempt → run
	for i, a := range seededAttempts {
		want[a] = seededRuns[i]
	}
	seen := make(map[string]claimRec, n)
	for _, c := range history {
		prev, dup := seen[c.attempt]
		require.False(t, dup, "attempt %s claimed twice (by %s and %s)", c.attempt, prev.runner, c.runner)
		seen[c.attempt] = c
		run, ok := want[c.attempt]
		require.True(t, ok, "claimed attempt %s was never seeded", c.attempt)
		require.Equal(t, run, c.run)
	}
	require.Len(t, seen, n, "lost attempts: seeded %d, claimed %d", n, len(seen))

	// SQL invariants: claimed = inserted, one attempt per run (no retry was
	// ever created), nothing left queued, leased or running, and exactly
	// one claim and one success audited per attempt.
	require.Equal(t, n, b.count(t, `SELECT count(*) FROM attempts`))
	require.Equal(t, 0, b.count(t, `SELECT count(*) FROM attempts WHERE state <> 'succeeded' OR number <> 1`))
	require.Equal(t, 0, b.count(t, `SELECT count(*) FROM (SELECT run_id FROM attempts GROUP BY run_id HAVING count(*) > 1) x`))
	require.Equal(t, 0, b.count(t, `SELECT count(*) FROM runs WHERE state <> 'succeeded'`))
	for _, action := range []string{"attempt.claimed", "attempt.succeeded"} {
		require.Equal(t, n, b.count(t, `SELECT count(*) FROM audit_events WHERE action = '`+action+`'`), action)
	}
	require.Equal(t, 0, b.count(t, `SELECT count(*) FROM audit_events WHERE action NOT IN ('attempt.claimed', 'attempt.succeeded')`))
	require.Equal(t, 0, b.count(t, `SELECT count(*) FROM (SELECT subject FROM audit_events WHERE action = 'attempt.claimed' GROUP BY subject HAVING count(*) > 1) x`),
		"a run claimed twice")

	// Sample of rows: leased to the runner that saw the assignment.
	for i := 0; i < n; i += max(1, n/100) {
		atts := e.attempts(seededRuns[i])
		require.Len(t, atts, 1)
		require.Equal(t, store.AttemptSucceeded, atts[0].State)
		require.Equal(t, seen[atts[0].ID].runner, atts[0].RunnerID)
	}
}

// TestC8_ConcurrentClaimsOfOneAttempt: 50 concurrent claims (10 runners, 5
// duplicate requests each, on two control planes) while exactly one attempt
// is queued yield exactly one assignment; a second live attempt of a run is
// refused by the store's partial unique index.
func TestC8_ConcurrentClaimsOfOneAttempt(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		t.Parallel()
		e := newEnv(t, st, jobSpec(time.Minute, time.Hour, 3))
		runners := make([]*store.Runner, 10)
		for i := range runners {
			runners[i] = e.runner(fmt.Sprintf("c8-%d", i))
		}
		run := e.request()

		var (
			mu   sync.Mutex
			got  []*protocol.Assignment
			errs []error
			wg   sync.WaitGroup
		)
		startGate := make(chan struct{})
		for i := range 50 {
			svc := e.a
			if i%2 == 1 {
				svc = e.b
			}
			rn := runners[i%len(runners)]
			wg.Go(func() {
				<-startGate
				asg, err := svc.Claim(context.Background(), call(rn, nil), &protocol.ClaimRequest{RequestID: "dup-" + strconv.Itoa(i%5)})
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, err)
				}
				if asg != nil {
					got = append(got, asg)
				}
			})
		}
		close(startGate)
		wg.Wait()
		require.Empty(t, errs)
		require.NotEmpty(t, got, "one claim must win")
		// A repeated request_id of the winning runner may get the same
		// assignment back (with a rotated token, as the protocol says); nobody else
		// may get anything.
		winner := got[0]
		tokens := 0
		for _, asg := range got {
			require.Equal(t, winner.AttemptID, asg.AttemptID, "two attempts assigned")
			tokens++
		}
		atts := e.attempts(run.ID)
		require.Len(t, atts, 1)
		require.Equal(t, store.AttemptLeased, atts[0].State)
		require.Equal(t, winner.AttemptID, atts[0].ID)
		var holder *store.Runner
		for _, r := range runners {
			if r.ID == atts[0].RunnerID {
				holder = r
			}
		}
		require.NotNil(t, holder)
		// Exactly one of the handed-out lease tokens is live.
		live := 0
		for _, asg := range got {
			if _, err := e.a.Renew(context.Background(), call(holder, asg)); err == nil {
				live++
			} else {
				require.ErrorIs(t, err, protocol.ErrAttemptStale)
			}
		}
		require.Equal(t, 1, live, "live lease tokens among %d answers", tokens)
		t.Logf("C8: 50 concurrent claims, %d answers (same attempt, duplicates of the winner's request_id)", len(got))
		require.Equal(t, 1, e.auditCount(run.ID, "attempt.claimed"))

		// The partial unique index: a second queued or leased attempt of
		// the same run is refused whatever the caller does.
		spec := e.spec
		for _, state := range []store.AttemptState{store.AttemptQueued, store.AttemptLeased} {
			extra := newAttempt(e.run(run.ID), spec, 2, e.clock.Now(), e.clock.Now())
			extra.State = state
			err := st.AttemptCreate(context.Background(), extra)
			require.ErrorIs(t, err, store.ErrAlreadyExists, "second %s attempt", state)
		}
		require.Len(t, e.attempts(run.ID), 1)

		// And while attempt 1 is still only queued (another run).
		run2 := e.request()
		extra := newAttempt(e.run(run2.ID), spec, 2, e.clock.Now(), e.clock.Now())
		require.ErrorIs(t, st.AttemptCreate(context.Background(), extra), store.ErrAlreadyExists)
	})
}

// TestC9_LostCommitOfResult: the store commits a result and then reports the
// COMMIT outcome as unknown. The service answers "retry" (503), never a false
// success or failure; the retry with the same body returns the original
// answer; exactly one terminal result and one attempt.succeeded event exist.
func TestC9_LostCommitOfResult(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		t.Parallel()
		for _, committed := range []bool{true, false} {
			t.Run("committed="+strconv.FormatBool(committed), func(t *testing.T) {
				e := newEnv(t, st, jobSpec(time.Minute, time.Hour, 3))
				flaky := &commitUnknownStore{Store: st, commit: committed}
				svc := e.newService(flaky)
				rn := e.runner("c9")
				run := e.request()
				asg := e.claim(svc, rn, "claim-1")

				req := succeeded()
				req.RequestID = "result-1"
				flaky.armed.Store(true)
				resp, err := svc.Result(context.Background(), call(rn, asg), req)
				require.ErrorIs(t, err, protocol.ErrRetry)
				require.Nil(t, resp, "no answer when the outcome is unknown")
				var pe *protocol.Error
				require.ErrorAs(t, err, &pe)
				require.Equal(t, 503, pe.Status)

				// The retry, on the other control plane, with the same body.
				resp, err = e.b.Result(context.Background(), call(rn, asg), req)
				require.NoError(t, err)
				require.Equal(t, string(store.RunSucceeded), resp.RunState)
				// And once more: still the same answer.
				resp, err = svc.Result(context.Background(), call(rn, asg), req)
				require.NoError(t, err)
				require.Equal(t, string(store.RunSucceeded), resp.RunState)
				// A different result is a conflict, not a second outcome.
				_, err = svc.Result(context.Background(), call(rn, asg), &protocol.ResultRequest{Outcome: "failed", ExitCode: 1, Summary: "boom"})
				require.ErrorIs(t, err, protocol.ErrResultConflict)

				atts := e.attempts(run.ID)
				require.Len(t, atts, 1)
				require.Equal(t, store.AttemptSucceeded, atts[0].State)
				require.Equal(t, store.RunSucceeded, e.run(run.ID).State)
				require.Equal(t, 1, e.auditCount(run.ID, "attempt.succeeded"))
				require.Equal(t, 0, e.auditCount(run.ID, "attempt.failed"))
			})
		}
	})
}

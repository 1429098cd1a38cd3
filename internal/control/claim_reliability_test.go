package control

import (
	"context"
	"encoding/json"
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

// c1Size is the number of queued attempts C1 drains: ACCEPT_CLAIMS overrides.
// SQLite serializes every writer behind one lock and is several times slower
// under -race, so it drains fewer.
func c1Size(t *testing.T, backend string) int {
	if v := os.Getenv("ACCEPT_CLAIMS"); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err)
		return n
	}
	if backend == "sqlite" {
		return 5000
	}
	return 20000
}

// TestC1_DrainExactlyOnce: N queued attempts, 32 claimers split across two
// control planes on one store, each looping claim(wait 0) → result. Every
// attempt is claimed exactly once, none is lost, and the only "error" is an
// empty queue.
func TestC1_DrainExactlyOnce(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			var st store.Store
			if backend == "sqlite" {
				st = testdb.SQLite(t)
			} else {
				st = testdb.Postgres(t)
			}
			testC1(t, backend, st)
		})
	}
}

func testC1(t *testing.T, backend string, st store.Store) {
	n := c1Size(t, backend)
	spec := jobSpec(time.Hour, 2*time.Hour, 1)
	e := newEnv(t, st, spec)
	seedStart := time.Now()
	seeded := seedRuns(t, st, spec, n, nil)
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
	p := func(q float64) time.Duration { return latencies[int(q*float64(len(latencies)-1))].Round(time.Microsecond) }
	t.Logf("C1 %s: %d attempts drained by %d claimers on 2 control planes in %s: %.0f claim+result/s, claim latency p50 %s p99 %s",
		backend, len(history), claimers, elapsed.Round(time.Millisecond), float64(len(history))/elapsed.Seconds(), p(0.5), p(0.99))

	// History: every seeded attempt claimed exactly once.
	want := make(map[string]string, n) // attempt → run
	for _, a := range seeded {
		want[a.ID] = a.RunID
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

	// Store: no run left queued or running, every run succeeded.
	for _, state := range []store.RunState{store.RunQueued, store.RunRunning, store.RunFailed} {
		rs, err := st.RunList(context.Background(), &store.RunListParams{Tenant: testTenant, State: string(state), Limit: 10})
		require.NoError(t, err)
		require.Empty(t, rs, "runs left %s", state)
	}
	succeededRuns, before := 0, ""
	for {
		rs, err := st.RunList(context.Background(), &store.RunListParams{Tenant: testTenant, State: string(store.RunSucceeded), Before: before, Limit: 5000})
		require.NoError(t, err)
		if len(rs) == 0 {
			break
		}
		succeededRuns += len(rs)
		before = rs[len(rs)-1].ID
	}
	require.Equal(t, n, succeededRuns)

	// Audit (in the same transactions as the mutations): exactly one claim
	// and one success per attempt, all of attempt number 1, no expiry.
	claimedEv, succeededEv := map[string]int{}, map[string]int{}
	for _, ev := range auditAll(t, st) {
		var d struct {
			Attempt string `json:"attempt"`
			Number  int    `json:"number"`
		}
		require.NoError(t, json.Unmarshal(ev.Details, &d))
		switch ev.Action {
		case "attempt.claimed":
			claimedEv[d.Attempt]++
			require.Equal(t, 1, d.Number)
		case "attempt.succeeded":
			succeededEv[d.Attempt]++
		default:
			t.Fatalf("unexpected audit event %s", ev.Action)
		}
	}
	require.Len(t, claimedEv, n)
	require.Len(t, succeededEv, n)
	for a, c := range claimedEv {
		require.Equal(t, 1, c, "attempt.claimed events of %s", a)
		require.Equal(t, 1, succeededEv[a], "attempt.succeeded events of %s", a)
	}

	// Sample of rows: one attempt per run, leased to the runner that saw it.
	for i := 0; i < len(seeded); i += max(1, len(seeded)/100) {
		atts := e.attempts(seeded[i].RunID)
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
		// assignment back (with a rotated token, PROTOCOL.md); nobody else
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

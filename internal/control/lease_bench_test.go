package control

// Claim cost with runs queued behind a held key (docs/benchmarks.md,
// "Claims with runs blocked behind a lease"): one claim + result of a free
// job, with 0 and with 10,000 attempts blocked on one held key; and what
// the release of that key costs the claims after it.

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/id"
	"github.com/jobplane/jobplane/internal/lease"
	"github.com/jobplane/jobplane/internal/principal"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
	"github.com/jobplane/jobplane/internal/store/testdb"
)

// heldKeyBench is a service with jobs "held" (key bench-held) and "free",
// one runner, and one run of "held" holding the key (asg).
func heldKeyBench(b *testing.B, st store.Store) (svc *Service, actor principal.Actor, rn *store.Runner, held Spec, asg *protocol.Assignment) {
	ctx := context.Background()
	held = leaseJob("held", testPool, time.Hour, lease.Template{Key: "bench-held"})
	free := leaseJob("free", testPool, time.Hour)
	defs := &multiDefs{jobs: map[string]Spec{"held": held, "free": free}}
	fc := clock.NewFake(testEpoch)
	svc, err := New(Config{Store: st, Clock: fc, Definitions: defs})
	require.NoError(b, err)
	actor = principal.Actor{TenantID: testTenant, Name: "alice", Kind: "user", Admin: true}
	now := fc.Now()
	rn = &store.Runner{ID: id.New(id.Runner, now), Tenant: testTenant, Pool: testPool, Name: "bench", Labels: []string{},
		PublicKey: protocol.EncodeKey(make([]byte, 32)), KeyFingerprint: "0000000000000000", Status: store.RunnerActive,
		AllowedRepos: []string{}, LastSeenAt: &now, CreatedAt: now}
	require.NoError(b, st.RunnerCreate(ctx, rn))
	_, _, err = svc.RequestRun(ctx, actor, &protocol.RunRequest{Job: "held", Channel: "prod"})
	require.NoError(b, err)
	asg, err = svc.Claim(ctx, call(rn, nil), &protocol.ClaimRequest{})
	require.NoError(b, err)
	require.Len(b, asg.Leases, 1)
	return svc, actor, rn, held, asg
}

func benchClaim(b *testing.B, st store.Store, blocked int) {
	ctx := context.Background()
	svc, actor, rn, held, _ := heldKeyBench(b, st)
	// blocked attempts wait for it, inserted directly in big transactions.
	specJSON, err := json.Marshal(held)
	require.NoError(b, err)
	for start := 0; start < blocked; start += 2000 {
		require.NoError(b, st.InTx(ctx, func(tx store.Tx) error {
			for i := start; i < min(start+2000, blocked); i++ {
				at := testEpoch.Add(-time.Hour + time.Duration(i)*time.Millisecond)
				r := &store.Run{ID: id.New(id.Run, at), Tenant: testTenant, Job: "held", Channel: "prod", Ref: "main", Commit: testCommit,
					Params: json.RawMessage(`{}`), Actor: "seed", Source: json.RawMessage(`{}`), State: store.RunQueued,
					Decision: json.RawMessage(`{"allowed":true}`), Grants: json.RawMessage(`{}`),
					LeaseKeys: json.RawMessage(`[{"key":"bench-held","limit":1,"on_conflict":"queue"}]`),
					Spec:      specJSON, MaxAttempts: 1, CreatedAt: at, UpdatedAt: at, WaitingFor: "lease bench-held"}
				a := newAttempt(r, held, 1, at, at)
				a.BlockedOn = "bench-held"
				if err := tx.RunCreate(ctx, r); err != nil {
					return err
				}
				if err := tx.AttemptCreate(ctx, a); err != nil {
					return err
				}
			}
			return nil
		}))
	}
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		_, _, err := svc.RequestRun(ctx, actor, &protocol.RunRequest{Job: "free", Channel: "prod"})
		require.NoError(b, err)
		b.StartTimer()
		got, err := svc.Claim(ctx, call(rn, nil), &protocol.ClaimRequest{})
		require.NoError(b, err)
		require.NotNil(b, got)
		_, err = svc.Result(ctx, call(rn, got), succeeded())
		require.NoError(b, err)
	}
}

func benchBoth(b *testing.B, blocked int) {
	for name, open := range map[string]func(testing.TB) store.Store{"sqlite": testdb.SQLite, "postgres": testdb.Postgres} {
		b.Run(name, func(b *testing.B) { benchClaim(b, open(b), blocked) })
	}
}

// BenchmarkClaimWith0Blocked is the baseline: nothing waits for the key.
func BenchmarkClaimWith0Blocked(b *testing.B) { benchBoth(b, 0) }

// BenchmarkClaimWith10kBlocked: 10,000 attempts wait behind the held key.
func BenchmarkClaimWith10kBlocked(b *testing.B) { benchBoth(b, 10000) }

// BenchmarkReleaseWith10kWaiters (run with -benchtime 1x): the holder of a
// key 10,000 attempts wait for ends; reported are the release, the claim
// that hands the key on, and the next claim of an unrelated free run.
func BenchmarkReleaseWith10kWaiters(b *testing.B) {
	for name, open := range map[string]func(testing.TB) store.Store{"sqlite": testdb.SQLite, "postgres": testdb.Postgres} {
		b.Run(name, func(b *testing.B) {
			ctx := context.Background()
			svc, actor, rn, _, asg := heldKeyBench(b, open(b))
			for range 10000 / 100 {
				var reqs []protocol.RunRequest
				for range 100 {
					reqs = append(reqs, protocol.RunRequest{Job: "held", Channel: "prod"})
				}
				_, err := svc.RequestRuns(ctx, actor, reqs)
				require.NoError(b, err)
			}
			// Each waiter is claimed once and marked as waiting.
			for {
				got, err := svc.Claim(ctx, call(rn, nil), &protocol.ClaimRequest{})
				require.NoError(b, err)
				if got == nil {
					break
				}
			}
			b.ResetTimer()
			t0 := time.Now()
			_, err := svc.Result(ctx, call(rn, asg), succeeded())
			require.NoError(b, err)
			t1 := time.Now()
			next, err := svc.Claim(ctx, call(rn, nil), &protocol.ClaimRequest{})
			require.NoError(b, err)
			require.NotNil(b, next)
			t2 := time.Now()
			_, _, err = svc.RequestRun(ctx, actor, &protocol.RunRequest{Job: "free", Channel: "prod"})
			require.NoError(b, err)
			t3 := time.Now()
			calls := 0
			for {
				calls++
				got, err := svc.Claim(ctx, call(rn, nil), &protocol.ClaimRequest{})
				require.NoError(b, err)
				if got != nil && got.Job.Name == "free" {
					break
				}
			}
			t4 := time.Now()
			b.ReportMetric(float64(t1.Sub(t0).Milliseconds()), "release-ms")
			b.ReportMetric(float64(t2.Sub(t1).Milliseconds()), "handon-ms")
			b.ReportMetric(float64(t4.Sub(t3).Milliseconds()), "free-claim-ms")
			b.ReportMetric(float64(calls), "free-claim-calls")
		})
	}
}

package control

// Run lease acceptance cases (L1, L2, L3, L6/L7, L8, L11)
// on the control service. L4, L5, L9 and L10 are process-level or worker
// cases (internal/e2e/leases_test.go covers the worker SIGKILL and the two
// replicas; the rest is listed as left out in the report).

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/failpoint"
	"github.com/jobplane/jobplane/internal/lease"
	"github.com/jobplane/jobplane/internal/principal"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
	"github.com/jobplane/jobplane/internal/store/postgres"
	"github.com/jobplane/jobplane/internal/store/testdb"
)

// exclusion is an in-memory witness of mutual exclusion: a holder enters
// after its claim committed and leaves before its result is sent, so two
// holders inside at once means the key was granted twice.
type exclusion struct {
	mu    sync.Mutex
	in    map[string]int
	limit map[string]int
	bad   []string
}

func newExclusion(limits map[string]int) *exclusion {
	return &exclusion{in: map[string]int{}, limit: limits}
}

func (x *exclusion) enter(keys ...string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, k := range keys {
		x.in[k]++
		if x.in[k] > x.limit[k] {
			x.bad = append(x.bad, fmt.Sprintf("%s held %d times at once", k, x.in[k]))
		}
	}
}

func (x *exclusion) leave(keys ...string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, k := range keys {
		x.in[k]--
	}
}

// TestL1_ConcurrentAcquirers: 64 goroutines on two control planes request,
// claim, renew and release one key; never two holders at once (witness and
// SQL after every grant), tokens strictly increasing per key in grant order.
func TestL1_ConcurrentAcquirers(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		t.Parallel()
		e := newLeaseEnv(t, b.st, leaseJob("l1", "pool-l1", 30*time.Second, lease.Template{Key: "l1-key"}))
		x := newExclusion(map[string]int{"l1-key": 1})
		const goroutines = 64
		rounds := 2
		if b.name == "sqlite" {
			rounds = 1 // 64 writers on one SQLite file are slow under -race
		}
		if longRun() {
			rounds = 60
		}
		var grants atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, goroutines)
		for g := range goroutines {
			rn := e.runnerIn("pool-l1", fmt.Sprintf("l1-%d", g))
			svc := []*Service{e.a, e.b}[g%2]
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs <- func() error {
					for range rounds {
						if _, err := e.requestJob(svc, "l1"); err != nil {
							return err
						}
						asg, err := svc.Claim(e.ctx(), call(rn, nil), &protocol.ClaimRequest{})
						if err != nil || asg == nil {
							if err != nil {
								return err
							}
							continue
						}
						x.enter("l1-key")
						grants.Add(1)
						var live int
						err = b.raw.QueryRow(`SELECT count(*) FROM leases l JOIN attempts a ON a.id = l.attempt_id
							WHERE l.key = 'l1-key' AND a.state = 'leased'`).Scan(&live)
						if err != nil {
							return err
						}
						if live > 1 {
							return fmt.Errorf("%d live holds of l1-key", live)
						}
						if _, err := svc.Renew(e.ctx(), call(rn, asg)); err != nil {
							return err
						}
						x.leave("l1-key")
						if _, err := []*Service{e.a, e.b}[g%2^1].Result(e.ctx(), call(rn, asg), succeeded()); err != nil {
							return err
						}
					}
					return nil
				}()
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		require.Empty(t, x.bad)
		require.NotZero(t, grants.Load())
		t.Logf("%s: %d grants", b.name, grants.Load())
		checkLeaseInvariants(t, b)
	})
}

// TestL2_RefusedLeaseOperations: renew by a non-holder, renew and release
// after expiry are refused and change nothing; a double release is
// idempotent; re-acquiring after expiry gives a new, larger token.
func TestL2_RefusedLeaseOperations(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		t.Parallel()
		e := newLeaseEnv(t, st, leaseJob("l2", "pool-l2", 3*time.Second, lease.Template{Key: "l2-key"}))
		holder, other := e.runnerIn("pool-l2", "l2-holder"), e.runnerIn("pool-l2", "l2-other")
		_, err := e.requestJob(e.a, "l2")
		require.NoError(t, err)
		asg := e.claim(e.a, holder, "")
		tok1 := tokenOf(asg, "l2-key")
		require.Positive(t, tok1)

		// Non-holder: another runner presenting the holder's assignment.
		_, err = e.b.Renew(e.ctx(), call(other, asg))
		require.ErrorIs(t, err, protocol.ErrAttemptStale)
		forged := *asg
		forged.Lease.Token = "not-the-token"
		_, err = e.b.Renew(e.ctx(), call(holder, &forged))
		require.ErrorIs(t, err, protocol.ErrAttemptStale)
		_, err = e.b.Result(e.ctx(), call(other, asg), succeeded())
		require.ErrorIs(t, err, protocol.ErrAttemptStale)
		ok, _, err := e.a.Leases().Verify(e.ctx(), testTenant, "l2-key", tok1)
		require.NoError(t, err)
		require.True(t, ok, "the holder is untouched")

		// After expiry: renew and release refused (before and after the reap).
		e.clock.Advance(3 * time.Second)
		_, err = e.a.Renew(e.ctx(), call(holder, asg))
		require.ErrorIs(t, err, protocol.ErrLeaseExpired)
		_, err = e.a.Result(e.ctx(), call(holder, asg), succeeded())
		require.ErrorIs(t, err, protocol.ErrLeaseExpired)
		ok, _, err = e.a.Leases().Verify(e.ctx(), testTenant, "l2-key", tok1)
		require.NoError(t, err)
		require.False(t, ok, "an expired hold is not current")
		n, err := e.b.Reap(e.ctx())
		require.NoError(t, err)
		require.Equal(t, 1, n)
		_, err = e.a.Renew(e.ctx(), call(holder, asg))
		require.ErrorIs(t, err, protocol.ErrLeaseExpired)

		// Re-acquire: a new, larger token.
		_, err = e.requestJob(e.a, "l2")
		require.NoError(t, err)
		asg2 := e.claim(e.b, holder, "")
		tok2 := tokenOf(asg2, "l2-key")
		require.Greater(t, tok2, tok1)

		// Double release: the same result again is acknowledged, nothing more.
		_, err = e.a.Result(e.ctx(), call(holder, asg2), succeeded())
		require.NoError(t, err)
		_, err = e.b.Result(e.ctx(), call(holder, asg2), succeeded())
		require.NoError(t, err, "release is idempotent")
		require.Equal(t, 1, e.auditCount(asg2.RunID, "lease.released"))
		holds, err := st.LeaseList(e.ctx(), testTenant, "l2-key")
		require.NoError(t, err)
		require.Empty(t, holds)
		_, err = e.a.Renew(e.ctx(), call(holder, asg2))
		require.ErrorIs(t, err, protocol.ErrAttemptStale, "renew after release")
		ks, err := st.LeaseKeyGet(e.ctx(), testTenant, "l2-key")
		require.NoError(t, err)
		require.Equal(t, tok2, ks.LastFencingToken, "refusals drew no token")
	})
}

// TestRenewAfterTakeoverIsRefused: a hold whose lease ran out is taken by
// another acquirer; a renewal of the old attempt stamped with an earlier
// time (a clock that went back, or a stale reading in the application) must
// still be refused, because its hold is gone. Found by the L1 checker: an
// attempt renewed without its key.
func TestRenewAfterTakeoverIsRefused(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		t.Parallel()
		e := newLeaseEnv(t, st, leaseJob("tk", "pool-tk", 3*time.Second, lease.Template{Key: "tk-key"}))
		old, next := e.runnerIn("pool-tk", "tk-old"), e.runnerIn("pool-tk", "tk-next")
		_, err := e.requestJob(e.a, "tk")
		require.NoError(t, err)
		asg := e.claim(e.a, old, "")
		_, err = e.requestJob(e.a, "tk")
		require.NoError(t, err)

		// A plane whose clock lags behind by two seconds.
		lagging := clock.NewFake(e.clock.Now())
		slow, err := New(Config{Store: st, Clock: lagging, Definitions: e.a.defs})
		require.NoError(t, err)
		e.clock.Advance(3 * time.Second)
		lagging.Advance(time.Second)
		asg2 := e.claim(e.b, next, "")
		require.Greater(t, tokenOf(asg2, "tk-key"), tokenOf(asg, "tk-key"))

		_, err = slow.Renew(e.ctx(), call(old, asg))
		require.ErrorIs(t, err, protocol.ErrLeaseExpired, "the old attempt's hold was taken over")
		_, err = e.b.Renew(e.ctx(), call(next, asg2))
		require.NoError(t, err)
	})
}

// TestL3_CommitFaults: a claim failing before COMMIT leaves no hold and
// draws no token; a claim whose answer was lost after COMMIT is answered
// again, with the same hold, to a retry with the same request_id; a late
// release of an expired holder never touches the newer holder's hold.
// Failpoints are process-wide: no t.Parallel (see lease_reliability_test.go).
func TestL3_CommitFaults(t *testing.T) {
	testdb.Each(t, func(t *testing.T, st store.Store) {
		e := newLeaseEnv(t, st, leaseJob("l3", "pool-l3", 3*time.Second, lease.Template{Key: "l3-key"}))
		rn, other := e.runnerIn("pool-l3", "l3"), e.runnerIn("pool-l3", "l3-other")

		_, err := e.requestJob(e.a, "l3")
		require.NoError(t, err)
		disable := failpoint.Enable("claim.beforeCommit", func() error { return failpoint.ErrInjected })
		asg, err := e.a.Claim(e.ctx(), call(rn, nil), &protocol.ClaimRequest{RequestID: "l3-before"})
		disable()
		require.ErrorIs(t, err, failpoint.ErrInjected)
		require.Nil(t, asg)
		holds, err := st.LeaseList(e.ctx(), testTenant, "l3-key")
		require.NoError(t, err)
		require.Empty(t, holds, "no grant before COMMIT")
		if ks, err := st.LeaseKeyGet(e.ctx(), testTenant, "l3-key"); err == nil {
			require.Zero(t, ks.LastFencingToken, "no token drawn")
		}

		disable = failpoint.Enable("claim.afterCommitBeforeReply", func() error { return failpoint.ErrInjected })
		asg, err = e.a.Claim(e.ctx(), call(rn, nil), &protocol.ClaimRequest{RequestID: "l3-after"})
		disable()
		require.Error(t, err)
		require.Nil(t, asg)
		holds, err = st.LeaseList(e.ctx(), testTenant, "l3-key")
		require.NoError(t, err)
		require.Len(t, holds, 1, "granted at COMMIT")
		first := e.claim(e.b, rn, "l3-after")
		require.Equal(t, holds[0].AttemptID, first.AttemptID)
		require.Equal(t, []protocol.FencedKey{{Key: "l3-key", FencingToken: holds[0].FencingToken}}, first.Leases, "the same hold")
		again := e.claim(e.a, rn, "l3-after")
		require.Equal(t, first.Leases, again.Leases)

		// The holder expires; another runner takes the key; the old holder's
		// late result (or renew) is refused and the new hold stays.
		e.clock.Advance(3 * time.Second)
		n, err := e.a.Reap(e.ctx())
		require.NoError(t, err)
		require.Equal(t, 1, n)
		_, err = e.requestJob(e.a, "l3")
		require.NoError(t, err)
		newer := e.claim(e.b, other, "")
		require.Greater(t, tokenOf(newer, "l3-key"), tokenOf(again, "l3-key"))
		for _, svc := range []*Service{e.a, e.b} {
			_, err = svc.Result(e.ctx(), call(rn, again), succeeded())
			require.ErrorIs(t, err, protocol.ErrLeaseExpired)
			_, err = svc.Renew(e.ctx(), call(rn, again))
			require.ErrorIs(t, err, protocol.ErrLeaseExpired)
		}
		holds, err = st.LeaseList(e.ctx(), testTenant, "l3-key")
		require.NoError(t, err)
		require.Len(t, holds, 1)
		require.Equal(t, newer.AttemptID, holds[0].AttemptID)
		ok, _, err := e.a.Leases().Verify(e.ctx(), testTenant, "l3-key", tokenOf(newer, "l3-key"))
		require.NoError(t, err)
		require.True(t, ok)
	})
}

// TestL6_L7_AcquirerBlockedOnKeyRow (PostgreSQL, real clock): an acquirer
// that waits on the key's row lock for twice the TTL still gets an expiry
// of at least (lock release + TTL) and a token larger than every earlier one.
func TestL6_L7_AcquirerBlockedOnKeyRow(t *testing.T) {
	t.Parallel()
	dsn := testdb.PostgresDSN(t)
	st, err := postgres.Open(context.Background(), dsn)
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	raw, err := sql.Open("pgx", dsn)
	require.NoError(t, err)
	t.Cleanup(func() { _ = raw.Close() })

	const ttl = time.Second
	spec := leaseJob("l6", "pool-l6", ttl, lease.Template{Key: "l6-key"})
	defs := &multiDefs{jobs: map[string]Spec{"l6": spec}}
	e := &env{t: t, store: st, clock: clock.NewFake(testEpoch), spec: spec,
		actor: principal.Actor{TenantID: testTenant, Name: "alice", Kind: "user", Admin: true}}
	svc, err := New(Config{Store: st, Clock: clock.Real{}, Definitions: defs})
	require.NoError(t, err)
	rn := e.runnerIn("pool-l6", "l6")

	// Earlier holders: three grants and releases.
	var last int64
	for range 3 {
		_, err := e.requestJob(svc, "l6")
		require.NoError(t, err)
		asg := e.claim(svc, rn, "")
		last = tokenOf(asg, "l6-key")
		_, err = svc.Result(e.ctx(), call(rn, asg), succeeded())
		require.NoError(t, err)
	}
	_, err = e.requestJob(svc, "l6")
	require.NoError(t, err)

	tx, err := raw.Begin()
	require.NoError(t, err)
	_, err = tx.Exec(`SELECT 1 FROM lease_keys WHERE key = 'l6-key' FOR UPDATE`)
	require.NoError(t, err)
	type res struct {
		asg *protocol.Assignment
		err error
	}
	ch := make(chan res, 1)
	go func() {
		asg, err := svc.Claim(context.Background(), call(rn, nil), &protocol.ClaimRequest{})
		ch <- res{asg, err}
	}()
	time.Sleep(2 * ttl)
	var released time.Time
	require.NoError(t, tx.QueryRow(`SELECT clock_timestamp()`).Scan(&released))
	require.NoError(t, tx.Rollback())
	var r res
	select {
	case r = <-ch:
	case <-time.After(30 * time.Second):
		t.Fatal("the blocked claim did not finish")
	}
	require.NoError(t, r.err)
	require.NotNil(t, r.asg)
	require.Greater(t, tokenOf(r.asg, "l6-key"), last, "L7: token drawn under the lock")
	const eps = 50 * time.Millisecond
	require.False(t, r.asg.Lease.ExpiresAt.Before(released.Add(ttl-eps)),
		"L6: expires_at %s is before lock release %s + TTL: the grant was stale on arrival", r.asg.Lease.ExpiresAt, released)
	var stored time.Time
	require.NoError(t, raw.QueryRow(`SELECT lease_expires_at FROM attempts WHERE id = $1`, r.asg.AttemptID).Scan(&stored))
	require.False(t, stored.Before(released.Add(ttl-eps)), "L6: stored expiry %s, lock released at %s", stored, released)
	ok, _, err := svc.Leases().Verify(e.ctx(), testTenant, "l6-key", tokenOf(r.asg, "l6-key"))
	require.NoError(t, err)
	require.True(t, ok, "the grant is current when it arrives")
}

// TestL8_RestartedRunnerIsNotTheHolder: a runner restarted with the same
// identity (same registration) but without the old lease token cannot
// renew or complete; it gets the key again only by a new acquisition, with
// a new token, after the old hold expired.
func TestL8_RestartedRunnerIsNotTheHolder(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		t.Parallel()
		e := newLeaseEnv(t, st, leaseJob("l8", "pool-l8", 3*time.Second, lease.Template{Key: "l8-key"}))
		rn := e.runnerIn("pool-l8", "l8")
		_, err := e.requestJob(e.a, "l8")
		require.NoError(t, err)
		asg := e.claim(e.a, rn, "l8-claim")
		tok := tokenOf(asg, "l8-key")

		// The new incarnation knows the run and attempt (it could list them)
		// but not the lease token.
		for _, lt := range []string{"", "guessed-token"} {
			ref := *asg
			ref.Lease.Token = lt
			_, err = e.b.Renew(e.ctx(), call(rn, &ref))
			require.ErrorIs(t, err, protocol.ErrAttemptStale)
			_, err = e.b.Result(e.ctx(), call(rn, &ref), succeeded())
			require.ErrorIs(t, err, protocol.ErrAttemptStale)
			err = e.b.Relinquish(e.ctx(), call(rn, &ref), &protocol.RelinquishRequest{Reason: "restart"})
			require.ErrorIs(t, err, protocol.ErrAttemptStale)
		}
		// A fresh claim (new request ID) does not hand it the held key.
		_, err = e.requestJob(e.a, "l8")
		require.NoError(t, err)
		got, err := e.b.Claim(e.ctx(), call(rn, nil), &protocol.ClaimRequest{RequestID: "l8-new"})
		require.NoError(t, err)
		require.Nil(t, got, "the key is still held by the old incarnation's attempt")

		e.clock.Advance(3 * time.Second)
		_, err = e.a.Reap(e.ctx())
		require.NoError(t, err)
		got = e.claim(e.b, rn, "l8-new2")
		require.Greater(t, tokenOf(got, "l8-key"), tok, "re-acquired with a new token")
		_, err = e.a.Renew(e.ctx(), call(rn, asg))
		require.ErrorIs(t, err, protocol.ErrLeaseExpired, "the old token stays dead")
	})
}

// TestL11_OverlappingGroups: groups {a,b,c}, {c,a}, {b} acquired by 16
// goroutines through two planes: all or nothing (no partial group in any
// snapshot of the holds), no deadlock or other error reaches a client,
// mutual exclusion per key, tokens monotonic per key.
func TestL11_OverlappingGroups(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		t.Parallel()
		groups := map[string][]string{"g-abc": {"ka", "kb", "kc"}, "g-ca": {"kc", "ka"}, "g-b": {"kb"}}
		var jobs []Spec
		for name, keys := range groups {
			var ts []lease.Template
			for _, k := range keys {
				ts = append(ts, lease.Template{Key: k})
			}
			jobs = append(jobs, leaseJob(name, "pool-l11", 30*time.Second, ts...))
		}
		e := newLeaseEnv(t, b.st, jobs...)
		x := newExclusion(map[string]int{"ka": 1, "kb": 1, "kc": 1})
		names := []string{"g-abc", "g-ca", "g-b"}
		rounds := 4
		if longRun() {
			rounds = 100
		}
		stop := make(chan struct{})
		var partial atomic.Value
		var snaps atomic.Int64
		go func() { // snapshots of the holds: never a partial group
			for {
				select {
				case <-stop:
					return
				default:
				}
				holds, err := b.st.LeaseList(context.Background(), testTenant, "k")
				if err != nil {
					continue
				}
				snaps.Add(1)
				byAttempt := map[string][]string{}
				runOf := map[string]string{}
				for _, h := range holds {
					byAttempt[h.AttemptID] = append(byAttempt[h.AttemptID], h.Key)
					runOf[h.AttemptID] = h.RunID
				}
				for a, keys := range byAttempt {
					r, err := b.st.RunGetByID(context.Background(), runOf[a], false)
					if err != nil {
						continue
					}
					want := slices.Clone(groups[r.Job])
					slices.Sort(want)
					slices.Sort(keys)
					if !slices.Equal(want, keys) {
						partial.Store(fmt.Sprintf("attempt %s of %s holds %v", a, r.Job, keys))
					}
				}
				time.Sleep(time.Millisecond)
			}
		}()
		var wg sync.WaitGroup
		errs := make(chan error, 16)
		var grants atomic.Int64
		for g := range 16 {
			rn := e.runnerIn("pool-l11", fmt.Sprintf("l11-%d", g))
			svc := []*Service{e.a, e.b}[g%2]
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(g), 11))
				errs <- func() error {
					for range rounds {
						if _, err := e.requestJob(svc, names[rng.IntN(3)]); err != nil {
							return err
						}
						asg, err := svc.Claim(e.ctx(), call(rn, nil), &protocol.ClaimRequest{})
						if err != nil {
							return fmt.Errorf("claim: %w", err)
						}
						if asg == nil {
							continue
						}
						r, err := b.st.RunGetByID(e.ctx(), asg.RunID, false)
						if err != nil {
							return err
						}
						var got []string
						for _, f := range asg.Leases {
							got = append(got, f.Key)
						}
						want := slices.Clone(groups[r.Job])
						slices.Sort(want)
						slices.Sort(got)
						if !slices.Equal(want, got) {
							return fmt.Errorf("%s granted %v", r.Job, got)
						}
						x.enter(got...)
						grants.Add(1)
						time.Sleep(time.Duration(rng.IntN(2)) * time.Millisecond)
						x.leave(got...)
						if _, err := svc.Result(e.ctx(), call(rn, asg), succeeded()); err != nil {
							return fmt.Errorf("result: %w", err)
						}
					}
					return nil
				}()
			}()
		}
		wg.Wait()
		close(stop)
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		require.Nil(t, partial.Load(), "a partial group was visible")
		require.Empty(t, x.bad)
		require.NotZero(t, grants.Load())
		t.Logf("%s: %d group grants, %d snapshots", b.name, grants.Load(), snaps.Load())
		checkLeaseInvariants(t, b)
	})
}

package groupcommit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
	"github.com/jobplane/jobplane/internal/store/testdb"
)

// gatedStore holds every InTx until release is closed, so that a test can
// queue several calls behind one group transaction, and counts transactions.
type gatedStore struct {
	store.Store
	mu      sync.Mutex
	txs     int
	entered chan struct{}
	release chan struct{}
}

func (g *gatedStore) InTx(ctx context.Context, fn func(tx store.Tx) error) error {
	g.mu.Lock()
	g.txs++
	first := g.txs == 1
	g.mu.Unlock()
	if first {
		close(g.entered)
		<-g.release
	}
	return g.Store.InTx(ctx, fn)
}

// gatedCommitter is a one-worker committer over st held by a gatedStore,
// and an expiry time for the nonces the tests insert.
func gatedCommitter(st store.Store) (*gatedStore, *committer, time.Time) {
	g := &gatedStore{Store: st, entered: make(chan struct{}), release: make(chan struct{})}
	c := newCommitter(g, 0, 0, protocol.IsRefusal)
	c.workers = 1
	return g, c, time.Now().Add(time.Hour).UTC().Truncate(time.Second)
}

// runQueued starts calls[0], which g holds in its transaction, then queues
// the others behind it one at a time (so that the queue's order is the
// calls' order), calls held with the errors so far, releases g and returns
// every call's error.
func runQueued(t *testing.T, c *committer, g *gatedStore, calls []func() error, held func(errs []error)) []error {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, len(calls))
	wg.Go(func() { errs[0] = calls[0]() })
	<-g.entered
	for i := 1; i < len(calls); i++ {
		wg.Go(func() { errs[i] = calls[i]() })
		require.Eventually(t, func() bool {
			c.mu.Lock()
			defer c.mu.Unlock()
			return len(c.queue) == i
		}, 10*time.Second, time.Millisecond)
	}
	if held != nil {
		held(errs)
	}
	close(g.release)
	wg.Wait()
	return errs
}

// TestGroupCommit checks the committer's contract on both stores: calls
// waiting together share one transaction; a failing call gets its own error
// while the others commit; nobody is answered before the commit.
func TestGroupCommit(t *testing.T) {
	testdb.Each(t, func(t *testing.T, st store.Store) {
		ctx := context.Background()
		g, c, exp := gatedCommitter(st)

		// The first call occupies the only worker; the next five queue.
		calls := make([]func() error, 6)
		for i := range calls {
			nonce := fmt.Sprintf("n%d", i)
			if i == 3 {
				nonce = "n1" // a replay of call 1's nonce: refused
			}
			calls[i] = func() error {
				return c.do(ctx, nil, func(tx store.Tx) error { return tx.NonceInsert(ctx, "rnr_gc", nonce, exp) })
			}
		}
		errs := runQueued(t, c, g, calls, func(errs []error) {
			for i := 1; i < 6; i++ {
				require.Nil(t, errs[i], "call %d was answered before its transaction ran", i)
			}
		})

		for i, err := range errs {
			if i == 3 {
				require.ErrorIs(t, err, store.ErrAlreadyExists)
				continue
			}
			require.NoError(t, err, "call %d", i)
		}
		// Every nonce but the replay was recorded: inserting again is refused.
		for _, n := range []string{"n0", "n1", "n2", "n4", "n5"} {
			err := st.InTx(ctx, func(tx store.Tx) error { return tx.NonceInsert(ctx, "rnr_gc", n, exp) })
			require.ErrorIs(t, err, store.ErrAlreadyExists, "nonce %s was not committed", n)
		}
		stats := c.stats
		require.Equal(t, int64(5), stats.Bodies, "committed calls")
		// 1 (the first call) + 1 group of 5 that failed at call 3 and was
		// split: calls 1–2 together, call 3's error, calls 4–5 together.
		require.Equal(t, int64(3), stats.Transactions, "calls 1,2 and 4,5 should each share a transaction")
	})
}

// TestGroupCommitNonces: a group's nonces go in one statement ahead of its
// bodies; a replay in the same group is refused, and a failing body neither
// loses the nonces nor records them twice.
func TestGroupCommitNonces(t *testing.T) {
	testdb.Each(t, func(t *testing.T, st store.Store) {
		ctx := context.Background()
		g, c, exp := gatedCommitter(st)
		nonce := func(n string) func() error {
			return func() error { return c.doNonce(ctx, store.Nonce{RunnerID: "rnr_gn", Nonce: n, ExpiresAt: exp}) }
		}
		boom := errors.New("body refused")
		calls := []func() error{
			nonce("first"), // occupies the worker
			nonce("a"),
			func() error {
				return c.do(ctx, nil, func(tx store.Tx) error { return tx.NonceInsert(ctx, "rnr_gn", "b", exp) })
			},
			func() error { return c.do(ctx, nil, func(store.Tx) error { return boom }) },
			nonce("a"), // a replay of call 1, in the same group
			nonce("c"),
			func() error {
				return c.do(ctx, nil, func(tx store.Tx) error { return tx.NonceInsert(ctx, "rnr_gn", "d", exp) })
			},
		}
		errs := runQueued(t, c, g, calls, nil)
		require.NoError(t, errs[0])
		require.NoError(t, errs[1])
		require.NoError(t, errs[2])
		require.ErrorIs(t, errs[3], boom)
		require.ErrorIs(t, errs[4], store.ErrAlreadyExists, "the replay in the same group")
		require.NoError(t, errs[5])
		require.NoError(t, errs[6])
		for _, n := range []string{"first", "a", "b", "c", "d"} {
			err := st.InTx(ctx, func(tx store.Tx) error { return tx.NonceInsert(ctx, "rnr_gn", n, exp) })
			require.ErrorIs(t, err, store.ErrAlreadyExists, "nonce %s was not committed", n)
		}
	})
}

// TestGroupCommitRefusalRunsAgain: a body refused because of what an
// earlier body of its group wrote is not answered with that refusal when
// the earlier body, run again after the group was rolled back, writes
// something else (here nothing): the refused body runs again alone and
// its answer rests on what was committed.
func TestGroupCommitRefusalRunsAgain(t *testing.T) {
	testdb.Each(t, func(t *testing.T, st store.Store) {
		ctx := context.Background()
		g, c, exp := gatedCommitter(st)
		tn, err := st.TenantEnsure(ctx, "refusal", nil)
		require.NoError(t, err)
		var runs atomic.Int32
		calls := []func() error{
			func() error { return c.doNonce(ctx, store.Nonce{RunnerID: "rnr_ra", Nonce: "first", ExpiresAt: exp}) },
			// The first time it runs it registers a runner; run again, it
			// finds the world changed and does not. (Not a lease key: a
			// body that takes one ends its group where rows are locked.)
			func() error {
				return c.do(ctx, nil, func(tx store.Tx) error {
					if runs.Add(1) == 1 {
						return tx.RunnerCreate(ctx, &store.Runner{ID: "rnr_phantom", Tenant: tn.ID, Pool: "p", Name: "phantom",
							Labels: []string{}, PublicKey: "k", Status: store.RunnerActive, AllowedRepos: []string{}, CreatedAt: time.Now()})
					}
					return nil
				})
			},
			func() error {
				return c.do(ctx, nil, func(tx store.Tx) error {
					if _, err := tx.RunnerGetByID(ctx, "rnr_phantom", false); err == nil {
						return fmt.Errorf("runner name taken: %w", protocol.ErrAlreadyExists)
					} else if !errors.Is(err, store.ErrNotFound) {
						return err
					}
					return nil
				})
			},
		}
		errs := runQueued(t, c, g, calls, nil)
		require.NoError(t, errs[0])
		require.NoError(t, errs[1])
		require.NoError(t, errs[2], "refused on the strength of a write that was never committed")
		require.Equal(t, int32(2), runs.Load(), "the first body ran in the group, then again without the refused one")
		_, err = st.RunnerGetByID(store.WithSystem(ctx, "test"), "rnr_phantom", false)
		require.ErrorIs(t, err, store.ErrNotFound)
	})
}

// TestGroupCommitPendingNonces: a body whose call's nonce is still pending
// (InTxNonce) has it inserted with the group's nonces; a
// body whose nonce is known — committed before, or taken by an earlier body
// of the same group — does not run and is refused as a replay; a body that
// fails leaves its nonce unrecorded.
func TestGroupCommitPendingNonces(t *testing.T) {
	testdb.Each(t, func(t *testing.T, st store.Store) {
		ctx := context.Background()
		g, c, exp := gatedCommitter(st)
		require.NoError(t, st.InTx(ctx, func(tx store.Tx) error { return tx.NonceInsert(ctx, "rnr_pn", "known", exp) }))
		pending := func(n string) *store.PendingNonce {
			return store.NewPendingNonce(store.Nonce{RunnerID: "rnr_pn", Nonce: n, ExpiresAt: exp})
		}
		ps := []*store.PendingNonce{nil, pending("x"), pending("x"), pending("known"), nil, pending("z")}
		boom := errors.New("body refused")
		effect := func(i int) func() error {
			return func() error {
				return c.do(ctx, ps[i], func(tx store.Tx) error {
					if i == 5 {
						return boom
					}
					return tx.NonceInsert(ctx, "rnr_pn", fmt.Sprintf("effect-%d", i), exp)
				})
			}
		}
		calls := []func() error{
			func() error { return c.doNonce(ctx, store.Nonce{RunnerID: "rnr_pn", Nonce: "first", ExpiresAt: exp}) },
			effect(1), effect(2), effect(3), effect(4), effect(5),
		}
		errs := runQueued(t, c, g, calls, nil)
		require.NoError(t, errs[0])
		require.NoError(t, errs[1])
		require.ErrorIs(t, errs[2], store.ErrReplay, "the same nonce, earlier in the group")
		require.ErrorIs(t, errs[3], store.ErrReplay, "a nonce committed before")
		require.NoError(t, errs[4])
		require.ErrorIs(t, errs[5], boom)
		require.True(t, ps[1].Recorded())
		require.False(t, ps[2].Recorded())
		require.False(t, ps[3].Recorded())
		require.False(t, ps[5].Recorded())
		known := func(n string) bool {
			err := st.InTx(ctx, func(tx store.Tx) error { return tx.NonceInsert(ctx, "rnr_pn", n, exp) })
			if err == nil {
				return false
			}
			require.ErrorIs(t, err, store.ErrAlreadyExists)
			return true
		}
		for n, want := range map[string]bool{"x": true, "effect-1": true, "effect-2": false, "effect-3": false, "effect-4": true, "z": false} {
			require.Equal(t, want, known(n), n)
		}

		// Without grouping (commit batch 1) the nonce goes in the call's
		// own transaction, before its body.
		c1 := newCommitter(st, 1, 0, protocol.IsRefusal)
		ran := 0
		body := func(tx store.Tx) error { ran++; return nil }
		p := pending("solo")
		require.NoError(t, c1.do(ctx, p, body))
		require.True(t, p.Recorded())
		require.ErrorIs(t, c1.do(ctx, pending("solo"), body), store.ErrReplay)
		require.Equal(t, 1, ran)
	})
}

// TestGroupCommitUpdateNotFound: an update that finds no row fails the
// body that made it, not the group: the bodies around it commit.
func TestGroupCommitUpdateNotFound(t *testing.T) {
	testdb.Each(t, func(t *testing.T, st store.Store) {
		ctx := context.Background()
		g, c, exp := gatedCommitter(st)
		effect := func(n string) func() error {
			return func() error {
				return c.do(ctx, nil, func(tx store.Tx) error { return tx.NonceInsert(ctx, "rnr_lw", n, exp) })
			}
		}
		calls := []func() error{
			effect("first"), effect("before"),
			func() error {
				return c.do(ctx, nil, func(tx store.Tx) error {
					return tx.RunUpdate(ctx, &store.Run{ID: "run_missing", State: store.RunFailed})
				})
			},
			effect("after"),
		}
		errs := runQueued(t, c, g, calls, nil)
		require.NoError(t, errs[0])
		require.NoError(t, errs[1])
		require.ErrorIs(t, errs[2], store.ErrNotFound)
		require.NoError(t, errs[3])
		for _, n := range []string{"first", "before", "after"} {
			err := st.InTx(ctx, func(tx store.Tx) error { return tx.NonceInsert(ctx, "rnr_lw", n, exp) })
			require.ErrorIs(t, err, store.ErrAlreadyExists, "%s was not committed", n)
		}
	})
}

// TestGroupCommitFailedCommit: when the group's transaction itself fails,
// every call of the group gets the error.
func TestGroupCommitFailedCommit(t *testing.T) {
	ctx := context.Background()
	st := testdb.SQLite(t)
	boom := errors.New("commit failed")
	f := &failingStore{Store: st, err: boom}
	c := newCommitter(f, 0, 0, protocol.IsRefusal)
	ops := []*commitOp{
		{ctx: ctx, fn: func(store.Tx) error { return nil }, done: make(chan struct{})},
		{ctx: ctx, fn: func(store.Tx) error { return nil }, done: make(chan struct{})},
	}
	c.group(ops, &slot{c: c})
	for _, o := range ops {
		<-o.done
		require.ErrorIs(t, o.err, boom)
	}
}

// TestGroupCommitContentionSplits: a group that kept deadlocking with other
// transactions is run again call by call; no call sees the contention.
func TestGroupCommitContentionSplits(t *testing.T) {
	ctx := context.Background()
	st := testdb.SQLite(t)
	f := &contendedStore{Store: st}
	c := newCommitter(f, 0, 0, protocol.IsRefusal)
	exp := time.Now().Add(time.Hour).UTC()
	var ran []string
	ops := []*commitOp{
		{ctx: ctx, nonce: &store.Nonce{RunnerID: "rnr_ct", Nonce: "n1", ExpiresAt: exp}, done: make(chan struct{})},
		{ctx: ctx, fn: func(store.Tx) error { ran = append(ran, "a"); return nil }, done: make(chan struct{})},
		{ctx: ctx, fn: func(store.Tx) error { ran = append(ran, "b"); return nil }, done: make(chan struct{})},
	}
	c.group(ops, &slot{c: c})
	for i, o := range ops {
		<-o.done
		require.NoError(t, o.err, "call %d", i)
	}
	require.Equal(t, 4, f.calls, "the group once, then each call alone")
	require.Equal(t, []string{"a", "b", "a", "b"}, ran[len(ran)-4:], "the bodies ran in the group, then alone")
	err := st.InTx(ctx, func(tx store.Tx) error { return tx.NonceInsert(ctx, "rnr_ct", "n1", exp) })
	require.ErrorIs(t, err, store.ErrAlreadyExists, "the nonce was recorded once it ran alone")
}

// contendedStore fails its first transaction as InTx does after its last
// retry of a deadlock.
type contendedStore struct {
	store.Store
	calls int
}

func (s *contendedStore) InTx(ctx context.Context, fn func(tx store.Tx) error) error {
	s.calls++
	if s.calls == 1 {
		err := s.Store.InTx(ctx, func(tx store.Tx) error {
			if err := fn(tx); err != nil {
				return err
			}
			return errors.New("roll back")
		})
		if err.Error() != "roll back" {
			return err
		}
		return fmt.Errorf("%w: deadlock detected", store.ErrContention)
	}
	return s.Store.InTx(ctx, fn)
}

type failingStore struct {
	store.Store
	err error
}

func (f *failingStore) InTx(ctx context.Context, fn func(tx store.Tx) error) error {
	if err := f.Store.InTx(ctx, func(tx store.Tx) error {
		if err := fn(tx); err != nil {
			return err
		}
		return errors.New("roll back")
	}); err != nil && err.Error() != "roll back" {
		return err
	}
	return f.err
}

// TestClaimMemoForgetsOnWake: within one group, a scope that found nothing
// is not queried again, until a body wakes claimers.
func TestClaimMemoForgetsOnWake(t *testing.T) {
	ctx := context.Background()
	st := testdb.SQLite(t)
	p := &store.AttemptClaimParams{Tenant: "tnt_x", Pool: "p", RunnerID: "rnr_x", LeaseDigest: "d"}
	err := st.InTx(ctx, func(tx store.Tx) error {
		cnt := &countingTx{Tx: tx}
		bt := &groupTx{}
		bt.reset(cnt)
		for range 3 {
			_, _, err := bt.AttemptClaimRun(ctx, p)
			require.ErrorIs(t, err, store.ErrNotFound)
		}
		require.Equal(t, 1, cnt.claims, "the scope was queried again within the group")
		require.NoError(t, bt.WakeClaimers(ctx))
		_, _, err := bt.AttemptClaimRun(ctx, p)
		require.ErrorIs(t, err, store.ErrNotFound)
		require.Equal(t, 2, cnt.claims, "a wake must make the scope be queried again")
		other := *p
		other.RunnerLabels = []string{"gpu"}
		_, _, err = bt.AttemptClaimRun(ctx, &other)
		require.ErrorIs(t, err, store.ErrNotFound)
		require.Equal(t, 3, cnt.claims, "another scope has its own memo")
		return nil
	})
	require.NoError(t, err)
}

type countingTx struct {
	store.Tx
	claims int
}

func (c *countingTx) AttemptClaimRun(ctx context.Context, p *store.AttemptClaimParams) (*store.Attempt, *store.Run, error) {
	c.claims++
	return c.Tx.AttemptClaimRun(ctx, p)
}

// concurrentStore counts the transactions in flight and holds each until
// release is closed. It hides the SQLite store's SingleWriter, so the
// committer treats it as a store with concurrent writers (PostgreSQL).
type concurrentStore struct {
	store.Store
	mu       sync.Mutex
	inFlight int
	most     int
	// executing counts the transactions running their bodies (mostExec at
	// most at once); committed, those that committed.
	executing int
	mostExec  int
	committed int
	// release holds every transaction before its bodies; hold, when set,
	// after its commit, as if the commit's flush took that long.
	release chan struct{}
	hold    chan struct{}
}

// A transaction counts as running its bodies from its start until its
// function returned, or until the committer handed its slot on (endBodies,
// set as its handedOn), which it does at the end of that function: the
// SQLite store underneath runs one at a time, and what is counted is how
// many the committer let in.
func (s *concurrentStore) InTx(ctx context.Context, fn func(tx store.Tx) error) error {
	s.mu.Lock()
	s.inFlight++
	s.most = max(s.most, s.inFlight)
	s.executing++
	s.mostExec = max(s.mostExec, s.executing)
	s.mu.Unlock()
	running := true
	ran := func() {
		s.mu.Lock()
		if running {
			running = false
			s.executing--
		}
		s.mu.Unlock()
	}
	<-s.release
	defer func() {
		ran()
		s.mu.Lock()
		s.inFlight--
		s.mu.Unlock()
	}()
	err := s.Store.InTx(ctx, func(tx store.Tx) error {
		defer ran()
		return fn(&countedTx{Tx: tx, ran: ran})
	})
	s.mu.Lock()
	s.committed++
	s.mu.Unlock()
	if s.hold != nil {
		<-s.hold
	}
	return err
}

// countedTx is a transaction of concurrentStore; ran ends its count of
// running bodies.
type countedTx struct {
	store.Tx
	ran func()
}

// endBodies, as a committer's handedOn, ends a transaction's count of
// running bodies where the committer hands its slot on: the next group
// may start before this one's function has returned, and counted until
// then the two would look like running their bodies at once.
func endBodies(tx store.Tx) {
	if ct, ok := tx.(*countedTx); ok {
		ct.ran()
	}
}

// SingleWriter hides the SQLite store's.
func (s *concurrentStore) SingleWriter() bool { return false }

func (s *concurrentStore) count(n *int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return *n
}

// TestCommitConcurrency: on a store with concurrent writers the committer
// keeps at most its concurrency of group transactions running their bodies
// (DefaultConcurrency unless set), and at most as many more
// committing; the calls beyond wait and are grouped, and every call is
// answered.
func TestCommitConcurrency(t *testing.T) {
	for _, c := range []struct {
		set, want int
	}{{0, DefaultConcurrency}, {3, 3}, {1, 1}} {
		t.Run(fmt.Sprint(c.set), func(t *testing.T) {
			ctx := context.Background()
			st := &concurrentStore{Store: testdb.SQLite(t), release: make(chan struct{})}
			cm := newCommitter(st, 0, c.set, protocol.IsRefusal)
			cm.handedOn = endBodies
			const calls = 12
			var wg sync.WaitGroup
			errs := make([]error, calls)
			inFlight := func() int {
				st.mu.Lock()
				defer st.mu.Unlock()
				return st.inFlight
			}
			queued := func() int {
				cm.mu.Lock()
				defer cm.mu.Unlock()
				return len(cm.queue)
			}
			for i := range calls {
				wg.Go(func() { errs[i] = cm.do(ctx, nil, func(store.Tx) error { return nil }) })
				if i < c.want { // one call per group until every worker is busy
					require.Eventually(t, func() bool { return inFlight() == i+1 }, 10*time.Second, time.Millisecond)
				}
			}
			require.Eventually(t, func() bool { return queued() == calls-c.want }, 10*time.Second, time.Millisecond,
				"the calls beyond the concurrency wait")
			require.Equal(t, c.want, inFlight(), "group transactions in flight")
			close(st.release)
			wg.Wait()
			for i, err := range errs {
				require.NoError(t, err, "call %d", i)
			}
			require.Equal(t, c.want, st.mostExec, "group transactions running bodies at once")
			require.LessOrEqual(t, st.most, 2*c.want, "group transactions in flight at once")
		})
	}
}

// TestCommitsOverlap: a group hands its slot on once its bodies have run,
// so that the next group runs its bodies while the first one's commit is
// outstanding; no call is answered before its own group committed, and
// with a concurrency of one at most two transactions are in flight.
func TestCommitsOverlap(t *testing.T) {
	ctx := context.Background()
	release := make(chan struct{})
	close(release)
	st := &concurrentStore{Store: testdb.SQLite(t), release: release, hold: make(chan struct{})}
	cm := newCommitter(st, 0, 1, protocol.IsRefusal)
	cm.handedOn = endBodies
	call := func(ran chan struct{}) chan error {
		answer := make(chan error, 1)
		go func() {
			answer <- cm.do(ctx, nil, func(store.Tx) error {
				close(ran)
				return nil
			})
		}()
		return answer
	}
	waitFor := func(what string, ch chan struct{}) {
		t.Helper()
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatal(what)
		}
	}
	ran1, ran2, ran3 := make(chan struct{}), make(chan struct{}), make(chan struct{})
	first := call(ran1)
	waitFor("the first call did not run", ran1)
	require.Eventually(t, func() bool { return st.count(&st.committed) == 1 }, 10*time.Second, time.Millisecond)
	second := call(ran2)
	waitFor("the second group did not run its body while the first committed", ran2)
	require.Eventually(t, func() bool { return st.count(&st.committed) == 2 }, 10*time.Second, time.Millisecond)
	third := call(ran3)
	require.Eventually(t, func() bool {
		cm.mu.Lock()
		defer cm.mu.Unlock()
		return len(cm.queue) == 1
	}, 10*time.Second, time.Millisecond, "the third call waits: two transactions are in flight")
	select {
	case <-ran3:
		t.Fatal("a third transaction ran with two in flight and a concurrency of one")
	case err := <-first:
		t.Fatalf("the first call was answered (%v) before its commit returned", err)
	case err := <-second:
		t.Fatalf("the second call was answered (%v) before its commit returned", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(st.hold)
	for i, answer := range []chan error{first, second, third} {
		require.NoError(t, <-answer, "call %d", i+1)
	}
	waitFor("the third call did not run", ran3)
	require.Equal(t, 1, st.mostExec, "transactions running bodies at once")
	require.Equal(t, 2, st.most, "transactions in flight at once")
}

// TestCommitsOverlapNotOnLeaseKeys: a group whose bodies took lease keys,
// and a body alone that did, keeps its slot until it has committed: the
// next group waits, rather than queue on the same key rows. Checking no
// keys at all (what a run request without keys does) is not taking them.
func TestCommitsOverlapNotOnLeaseKeys(t *testing.T) {
	touch := func(tx store.Tx) error { return tx.LeaseKeyLock(context.Background(), "tnt_overlap", "k") }
	noKeys := func(tx store.Tx) error {
		_, _, err := tx.LeaseAcquire(context.Background(), &store.LeaseAcquireParams{Tenant: "tnt_overlap", RunID: "run_x", AttemptID: "att_x"})
		return err
	}
	none := func(store.Tx) error { return nil }
	for name, c := range map[string]struct {
		fns     []func(store.Tx) error
		overlap bool
	}{
		"alone":         {fns: []func(store.Tx) error{touch}},
		"group":         {fns: []func(store.Tx) error{touch, none}},
		"no keys alone": {fns: []func(store.Tx) error{noKeys}, overlap: true},
		"no keys group": {fns: []func(store.Tx) error{noKeys, none}, overlap: true},
	} {
		fns := c.fns
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			release := make(chan struct{})
			close(release)
			st := &concurrentStore{Store: testdb.SQLite(t), release: release, hold: make(chan struct{})}
			cm := newCommitter(st, 0, 1, protocol.IsRefusal)
			var ops []*commitOp
			for _, fn := range fns {
				ops = append(ops, &commitOp{ctx: ctx, fn: fn, done: make(chan struct{})})
			}
			go func() {
				// As a worker does (work), which gives its slot up when idle.
				s := &slot{c: cm}
				cm.group(ops, s)
				s.giveUp()
			}()
			require.Eventually(t, func() bool { return st.count(&st.committed) == 1 }, 10*time.Second, time.Millisecond)
			ran := make(chan struct{})
			answer := make(chan error, 1)
			go func() {
				answer <- cm.do(ctx, nil, func(store.Tx) error {
					close(ran)
					return nil
				})
			}()
			if c.overlap {
				select {
				case <-ran:
				case <-time.After(10 * time.Second):
					t.Fatal("the next group did not run while one without keys committed")
				}
			} else {
				select {
				case <-ran:
					t.Fatal("the next group ran while one that took lease keys committed")
				case <-time.After(50 * time.Millisecond):
				}
			}
			close(st.hold)
			for _, o := range ops {
				<-o.done
				require.NoError(t, o.err)
			}
			require.NoError(t, <-answer)
			most := 1
			if c.overlap {
				most = 2
			}
			require.Equal(t, most, st.most, "transactions in flight at once")
		})
	}
}

// TestGroupEndsAfterLeaseKeys: where rows are locked (PostgreSQL), a group
// transaction ends with its first body that took lease keys, and the bodies
// after it form the next group: one holding a key's row must not then wait
// for an attempt's row, which a claim waiting for that key may hold
// (groupTx). The bodies left over are answered after their own group
// commits, their pending nonces, recorded with the first group, are not
// refused as replays, and a replay among them still is. With one writer
// (SQLite) nothing waits for rows and the group stays whole.
func TestGroupEndsAfterLeaseKeys(t *testing.T) {
	testdb.Each(t, func(t *testing.T, st store.Store) {
		ctx := context.Background()
		g, c, exp := gatedCommitter(st)
		if st.SingleWriter() {
			c.locks, c.overlap = false, false // as newCommitter, which the gate hides it from
		}
		tn, err := st.TenantEnsure(ctx, "groupcut", nil)
		require.NoError(t, err)
		var mu sync.Mutex
		txOf := map[int]string{}
		body := func(i int, key string) func(store.Tx) error {
			return func(tx store.Tx) error {
				mu.Lock()
				txOf[i] = fmt.Sprintf("%p", tx.(*groupTx).Tx)
				mu.Unlock()
				if key == "" {
					return tx.NonceInsert(ctx, "rnr_gk", fmt.Sprintf("effect-%d", i), exp)
				}
				return tx.LeaseKeyLock(ctx, tn.ID, key)
			}
		}
		pending := func(n string) *store.PendingNonce {
			return store.NewPendingNonce(store.Nonce{RunnerID: "rnr_gk", Nonce: n, ExpiresAt: exp})
		}
		ps := []*store.PendingNonce{nil, nil, nil, pending("p3"), pending("p3"), nil}
		call := func(i int, key string) func() error {
			return func() error { return c.do(ctx, ps[i], body(i, key)) }
		}
		calls := []func() error{
			func() error { return c.doNonce(ctx, store.Nonce{RunnerID: "rnr_gk", Nonce: "first", ExpiresAt: exp}) },
			call(1, ""), call(2, "k"), call(3, ""), call(4, ""), call(5, ""),
		}
		errs := runQueued(t, c, g, calls, nil)
		for i, err := range errs {
			if i == 4 {
				require.ErrorIs(t, err, store.ErrReplay, "the same nonce as call 3")
				continue
			}
			require.NoError(t, err, "call %d", i)
		}
		require.True(t, ps[3].Recorded())
		require.Equal(t, txOf[1], txOf[2])
		require.Equal(t, txOf[3], txOf[5])
		require.NotContains(t, txOf, 4, "a replay does not run")
		if c.locks {
			require.NotEqual(t, txOf[2], txOf[3], "the group went on after a body took a key")
			require.Equal(t, int64(3), c.stats.Transactions)
		} else {
			require.Equal(t, txOf[2], txOf[3])
			require.Equal(t, int64(2), c.stats.Transactions)
		}
		for _, n := range []string{"effect-1", "effect-3", "effect-5", "p3"} {
			err := st.InTx(ctx, func(tx store.Tx) error { return tx.NonceInsert(ctx, "rnr_gk", n, exp) })
			require.ErrorIs(t, err, store.ErrAlreadyExists, "%s was not committed", n)
		}
	})
}

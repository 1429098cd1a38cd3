package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/id"
	"github.com/jobplane/jobplane/internal/store"
)

// ---- run lease fixtures ----

func lk(key string, limit int) store.LeaseKey {
	return store.LeaseKey{Key: key, Limit: limit, OnConflict: "queue"}
}

// leasedAttempt creates a run naming keys, and its attempt in a pool of its
// own, and claims it at now (lease: now + 30 s).
func (f *fixture) leasedAttempt(t *testing.T, now *time.Time, keys ...store.LeaseKey) *store.Attempt {
	t.Helper()
	a := f.queuedAttempt(t, keys...)
	got, err := claim(f.s, f.tenant, a.Pool, nil, "rnr_"+a.Pool, now)
	require.NoError(t, err)
	require.Equal(t, a.ID, got.ID)
	return got
}

func (f *fixture) queuedAttempt(t *testing.T, keys ...store.LeaseKey) *store.Attempt {
	t.Helper()
	lks, err := json.Marshal(keys)
	require.NoError(t, err)
	r := f.run(t, func(r *store.Run) { r.LeaseKeys = lks })
	a := &store.Attempt{
		ID: id.New(id.Attempt, t0.Add(time.Duration(f.n)*time.Millisecond)), RunID: r.ID, Tenant: f.tenant,
		Number: 1, State: store.AttemptQueued, Pool: fmt.Sprintf("lp%03d", f.n), LeaseTTL: 30 * time.Second,
		Timeout: time.Hour, NotBefore: t0.Add(-time.Minute), CreatedAt: t0,
	}
	require.NoError(t, f.s.AttemptCreate(bg(), a))
	return a
}

func acquire(t *testing.T, q store.Queries, a *store.Attempt, now *time.Time, keys ...store.LeaseKey) ([]store.LeaseHold, string) {
	t.Helper()
	held, blocked, err := q.LeaseAcquire(bg(), &store.LeaseAcquireParams{
		Tenant: a.Tenant, RunID: a.RunID, AttemptID: a.ID, Keys: keys, Now: now})
	require.NoError(t, err)
	if blocked != "" {
		require.Empty(t, held)
	} else {
		distinct := map[string]bool{}
		for _, k := range keys {
			distinct[k.Key] = true
		}
		require.Len(t, held, len(distinct))
	}
	return held, blocked
}

// requeueBlocked does what the service does with a claimed attempt whose
// keys are taken: back to the queue, waiting for key.
func requeueBlocked(ctx context.Context, q store.Queries, a *store.Attempt, key string) error {
	a.State, a.RunnerID, a.LeaseDigest, a.ClaimRequestID = store.AttemptQueued, "", "", ""
	a.ClaimedAt, a.LeaseExpiresAt, a.Deadline, a.HeartbeatAt = nil, nil, nil, nil
	a.BlockedOn = key
	return q.AttemptUpdate(ctx, a)
}

func tokens(hs []store.LeaseHold) []int64 {
	var out []int64
	for _, h := range hs {
		out = append(out, h.FencingToken)
	}
	return out
}

func holdKeys(hs []store.LeaseHold) []string {
	var out []string
	for _, h := range hs {
		out = append(out, fmt.Sprintf("%s/%d", h.Key, h.Slot))
	}
	return out
}

func keyToken(t *testing.T, s store.Store, tenant, key string) int64 {
	t.Helper()
	st, err := s.LeaseKeyGet(bg(), tenant, key)
	require.NoError(t, err)
	return st.LastFencingToken
}

// ---- cases ----

// testLeaseFencing: a key's token only moves forward: across releases,
// force releases and purges of expired or ended holders (RELIABILITY rule 2).
func testLeaseFencing(t *testing.T, s store.Store) {
	ctx := bg()
	f := newFixture(t, s)
	_, err := s.LeaseKeyGet(ctx, f.tenant, "k")
	require.ErrorIs(t, err, store.ErrNotFound)
	_, _, err = s.LeaseForceRelease(ctx, f.tenant, "k")
	require.ErrorIs(t, err, store.ErrNotFound)

	a1 := f.leasedAttempt(t, at(0), lk("k", 1))
	held, blocked := acquire(t, s, a1, at(time.Second), lk("k", 1))
	require.Empty(t, blocked)
	requireEqual(t, []store.LeaseHold{{Tenant: f.tenant, Key: "k", Slot: 0, RunID: a1.RunID, AttemptID: a1.ID,
		RunnerID: a1.RunnerID, FencingToken: 1, AcquiredAt: t0.Add(time.Second), ExpiresAt: at(31 * time.Second)}}, held) // from the acquisition
	require.NotEmpty(t, a1.RunnerID)
	listed, err := s.LeaseList(ctx, f.tenant, "")
	require.NoError(t, err)
	requireEqual(t, held, listed)
	require.Equal(t, int64(1), keyToken(t, s, f.tenant, "k"))

	// Release, then the next holder gets 2.
	keys, err := s.LeaseReleaseAttempt(ctx, f.tenant, a1.ID)
	require.NoError(t, err)
	require.Equal(t, []string{"k"}, keys)
	keys, err = s.LeaseReleaseAttempt(ctx, f.tenant, a1.ID)
	require.NoError(t, err)
	require.Empty(t, keys, "a second release releases nothing")
	a2 := f.leasedAttempt(t, at(0), lk("k", 1))
	held, _ = acquire(t, s, a2, at(0), lk("k", 1))
	require.Equal(t, []int64{2}, tokens(held))

	// Force release: the counter moves on by one, the holds are returned.
	dropped, tok, err := s.LeaseForceRelease(ctx, f.tenant, "k")
	require.NoError(t, err)
	require.Equal(t, int64(3), tok)
	requireEqual(t, held, dropped)
	listed, err = s.LeaseList(ctx, f.tenant, "")
	require.NoError(t, err)
	require.Empty(t, listed)
	a3 := f.leasedAttempt(t, at(0), lk("k", 1))
	held, _ = acquire(t, s, a3, at(0), lk("k", 1))
	require.Equal(t, []int64{4}, tokens(held))
	keys, err = s.LeaseReleaseAttempt(ctx, f.tenant, a2.ID)
	require.NoError(t, err)
	require.Empty(t, keys, "the force-released holder has nothing left to release")

	// a3's lease (t0 + 30 s) is still live at 29 s: k is taken.
	a4 := f.leasedAttempt(t, at(29*time.Second), lk("k", 1))
	_, blocked = acquire(t, s, a4, at(29*time.Second), lk("k", 1))
	require.Equal(t, "k", blocked)
	// At exactly 30 s it has expired: the next acquirer purges it.
	held, blocked = acquire(t, s, a4, at(30*time.Second), lk("k", 1))
	require.Empty(t, blocked)
	require.Equal(t, []int64{5}, tokens(held))
	require.Equal(t, a4.ID, held[0].AttemptID)
	listed, err = s.LeaseList(ctx, f.tenant, "k")
	require.NoError(t, err)
	require.Equal(t, []string{a4.ID}, []string{listed[0].AttemptID})
	require.Len(t, listed, 1)

	// A holder whose attempt ended without releasing is purged too.
	a4.State = store.AttemptSucceeded
	a4.EndedAt = at(31 * time.Second)
	require.NoError(t, s.AttemptUpdate(ctx, a4))
	a5 := f.leasedAttempt(t, at(31*time.Second), lk("k", 1))
	held, _ = acquire(t, s, a5, at(31*time.Second), lk("k", 1))
	require.Equal(t, []int64{6}, tokens(held))
	require.Equal(t, int64(6), keyToken(t, s, f.tenant, "k"))

	// Counters are per key and per tenant.
	b := f.leasedAttempt(t, at(31*time.Second), lk("other", 1))
	held, _ = acquire(t, s, b, at(31*time.Second), lk("other", 1))
	require.Equal(t, []int64{1}, tokens(held))
	_, err = s.LeaseKeyGet(ctx, "tnt_other", "k")
	require.ErrorIs(t, err, store.ErrNotFound)

	// No keys: nothing to take.
	held, blocked = acquire(t, s, b, at(31*time.Second))
	require.Empty(t, held)
	require.Empty(t, blocked)
}

// testLeaseSemaphore: a key with limit N has N slots.
func testLeaseSemaphore(t *testing.T, s store.Store) {
	ctx := bg()
	f := newFixture(t, s)
	a1 := f.leasedAttempt(t, at(0), lk("sem", 2))
	a2 := f.leasedAttempt(t, at(0), lk("sem", 2))
	a3 := f.leasedAttempt(t, at(0), lk("sem", 2))
	h1, _ := acquire(t, s, a1, at(0), lk("sem", 2))
	h2, _ := acquire(t, s, a2, at(0), lk("sem", 2))
	require.Equal(t, []string{"sem/0"}, holdKeys(h1))
	require.Equal(t, []string{"sem/1"}, holdKeys(h2))
	require.Equal(t, []int64{1, 2}, append(tokens(h1), tokens(h2)...))
	_, blocked := acquire(t, s, a3, at(0), lk("sem", 2))
	require.Equal(t, "sem", blocked)
	require.Equal(t, int64(2), keyToken(t, s, f.tenant, "sem"), "a blocked acquire draws no token")

	// The freed slot is reused.
	_, err := s.LeaseReleaseAttempt(ctx, f.tenant, a1.ID)
	require.NoError(t, err)
	h3, blocked := acquire(t, s, a3, at(0), lk("sem", 2))
	require.Empty(t, blocked)
	require.Equal(t, []string{"sem/0"}, holdKeys(h3))
	require.Equal(t, []int64{3}, tokens(h3))
	listed, err := s.LeaseList(ctx, f.tenant, "sem")
	require.NoError(t, err)
	require.Equal(t, []string{"sem/0", "sem/1"}, holdKeys(listed))
	require.Equal(t, []string{a3.ID, a2.ID}, []string{listed[0].AttemptID, listed[1].AttemptID})

	// A limit below 1 means 1.
	b1 := f.leasedAttempt(t, at(0), lk("solo", 0))
	b2 := f.leasedAttempt(t, at(0), lk("solo", 0))
	_, blocked = acquire(t, s, b1, at(0), lk("solo", 0))
	require.Empty(t, blocked)
	_, blocked = acquire(t, s, b2, at(0), lk("solo", -3))
	require.Equal(t, "solo", blocked)
}

// testLeaseGroup: a group is taken all-or-nothing (RELIABILITY L11 in small).
func testLeaseGroup(t *testing.T, s store.Store) {
	ctx := bg()
	f := newFixture(t, s)
	holder := f.leasedAttempt(t, at(0), lk("c", 1))
	acquire(t, s, holder, at(0), lk("c", 1))

	g := f.leasedAttempt(t, at(0), lk("c", 1), lk("a", 1), lk("b", 1))
	held, blocked := acquire(t, s, g, at(0), lk("c", 1), lk("a", 1), lk("b", 1))
	require.Equal(t, "c", blocked)
	require.Empty(t, held)
	listed, err := s.LeaseList(ctx, f.tenant, "")
	require.NoError(t, err)
	require.Equal(t, []string{"c/0"}, holdKeys(listed), "nothing of a or b was taken")
	for _, k := range []string{"a", "b"} {
		st, err := s.LeaseKeyGet(ctx, f.tenant, k)
		if err == nil {
			require.Zero(t, st.LastFencingToken, "key %s", k)
		} else {
			require.ErrorIs(t, err, store.ErrNotFound)
		}
	}

	// Another holder on b: the first blocked key in order is reported.
	hb := f.leasedAttempt(t, at(0), lk("b", 1))
	acquire(t, s, hb, at(0), lk("b", 1))
	_, blocked = acquire(t, s, g, at(0), lk("c", 1), lk("a", 1), lk("b", 1))
	require.Equal(t, "b", blocked)

	_, err = s.LeaseReleaseAttempt(ctx, f.tenant, holder.ID)
	require.NoError(t, err)
	_, err = s.LeaseReleaseAttempt(ctx, f.tenant, hb.ID)
	require.NoError(t, err)
	held, blocked = acquire(t, s, g, at(0), lk("c", 1), lk("a", 1), lk("b", 1), lk("a", 1))
	require.Empty(t, blocked)
	require.Equal(t, []string{"a/0", "b/0", "c/0"}, holdKeys(held), "sorted, one hold per key")
	require.Equal(t, []int64{1, 2, 2}, tokens(held))
	keys, err := s.LeaseReleaseAttempt(ctx, f.tenant, g.ID)
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b", "c"}, keys)
}

// testLeaseWaiters: a blocked attempt is not claimable until a release of
// its key clears BlockedOn.
func testLeaseWaiters(t *testing.T, s store.Store) {
	ctx := bg()
	f := newFixture(t, s)

	// BlockedOn is stored and read back.
	pre := f.queuedAttempt(t, lk("x", 1))
	pre.BlockedOn = "x"
	require.NoError(t, s.AttemptUpdate(ctx, pre))
	got, err := s.AttemptGetByID(ctx, pre.ID, false)
	require.NoError(t, err)
	requireEqual(t, pre, got)
	_, err = claim(s, f.tenant, pre.Pool, nil, "r", at(0))
	require.ErrorIs(t, err, store.ErrNotFound, "a blocked attempt is not claimable")

	holder := f.leasedAttempt(t, at(0), lk("k", 1))
	acquire(t, s, holder, at(0), lk("k", 1))
	var waiters []*store.Attempt
	for i := range 2 {
		w := f.leasedAttempt(t, at(0), lk("k", 1))
		_, blocked := acquire(t, s, w, at(0), lk("k", 1))
		require.Equal(t, "k", blocked)
		w.NotBefore = t0.Add(-time.Duration(i+1) * time.Hour) // the second is older
		require.NoError(t, requeueBlocked(ctx, s, w, blocked))
		_, err := claim(s, f.tenant, w.Pool, nil, "r", at(0))
		require.ErrorIs(t, err, store.ErrNotFound, "a blocked attempt is not claimable")
		waiters = append(waiters, w)
	}
	// Another tenant's attempt blocked on a key of the same name stays blocked.
	other := &fixture{s: s, tenant: "tnt_other", n: 500}
	ow := other.queuedAttempt(t, lk("k", 1))
	ow.BlockedOn = "k"
	require.NoError(t, s.AttemptUpdate(ctx, ow))

	list, err := s.LeaseWaiters(ctx, f.tenant, "k")
	require.NoError(t, err)
	requireEqual(t, []*store.Attempt{waiters[1], waiters[0]}, list)

	keys, err := s.LeaseReleaseAttempt(ctx, f.tenant, holder.ID)
	require.NoError(t, err)
	require.Equal(t, []string{"k"}, keys)
	list, err = s.LeaseWaiters(ctx, f.tenant, "k")
	require.NoError(t, err)
	require.Empty(t, list)
	for _, w := range waiters {
		got, err := s.AttemptGetByID(ctx, w.ID, false)
		require.NoError(t, err)
		require.Empty(t, got.BlockedOn)
		got, err = claim(s, f.tenant, w.Pool, nil, "r-"+w.Pool, at(0))
		require.NoError(t, err, "claimable again")
		require.Equal(t, w.ID, got.ID)
		*w = *got
	}
	got, err = s.AttemptGetByID(ctx, ow.ID, false)
	require.NoError(t, err)
	require.Equal(t, "k", got.BlockedOn, "other tenant untouched")
	got, err = s.AttemptGetByID(ctx, pre.ID, false)
	require.NoError(t, err)
	require.Equal(t, "x", got.BlockedOn, "other key untouched")

	// Force release unblocks as well.
	held, _ := acquire(t, s, waiters[0], at(0), lk("k", 1))
	_, blocked := acquire(t, s, waiters[1], at(0), lk("k", 1))
	require.Equal(t, "k", blocked)
	require.NoError(t, requeueBlocked(ctx, s, waiters[1], blocked))
	dropped, tok, err := s.LeaseForceRelease(ctx, f.tenant, "k")
	require.NoError(t, err)
	require.Equal(t, held[0].FencingToken+1, tok)
	require.Equal(t, []string{waiters[0].ID}, []string{dropped[0].AttemptID})
	got, err = claim(s, f.tenant, waiters[1].Pool, nil, "r2", at(0))
	require.NoError(t, err)
	require.Empty(t, got.BlockedOn)
	held, _ = acquire(t, s, got, at(0), lk("k", 1))
	require.Equal(t, []int64{tok + 1}, tokens(held))

	// A purge by an acquirer that is itself blocked still wakes the
	// purged key's waiters: nobody else will release that hold.
	ha := f.leasedAttempt(t, at(0), lk("pa", 1))
	acquire(t, s, ha, at(0), lk("pa", 1))
	hb := f.leasedAttempt(t, at(time.Hour), lk("pb", 1)) // lease to 1 h 30 s
	acquire(t, s, hb, at(time.Hour), lk("pb", 1))
	wa := f.leasedAttempt(t, at(0), lk("pa", 1))
	_, blocked = acquire(t, s, wa, at(0), lk("pa", 1))
	require.Equal(t, "pa", blocked)
	require.NoError(t, requeueBlocked(ctx, s, wa, blocked))
	g := f.leasedAttempt(t, at(time.Hour), lk("pa", 1), lk("pb", 1))
	_, blocked = acquire(t, s, g, at(time.Hour), lk("pa", 1), lk("pb", 1)) // ha expired; pb is live
	require.Equal(t, "pb", blocked)
	got, err = s.AttemptGetByID(ctx, wa.ID, false)
	require.NoError(t, err)
	require.Empty(t, got.BlockedOn)
}

// testLeaseOnce: a once key remembers the first run that consumed it.
func testLeaseOnce(t *testing.T, s store.Store) {
	ctx := bg()
	f := newFixture(t, s)
	require.NoError(t, s.LeaseKeyConsume(ctx, f.tenant, "rollup:2026-01-01", "run_1"))
	st, err := s.LeaseKeyGet(ctx, f.tenant, "rollup:2026-01-01")
	require.NoError(t, err)
	require.Equal(t, &store.LeaseKeyState{Tenant: f.tenant, Key: "rollup:2026-01-01", ConsumedByRun: "run_1"}, st)
	require.NoError(t, s.LeaseKeyConsume(ctx, f.tenant, "rollup:2026-01-01", "run_2"))
	st, err = s.LeaseKeyGet(ctx, f.tenant, "rollup:2026-01-01")
	require.NoError(t, err)
	require.Equal(t, "run_1", st.ConsumedByRun, "the first consumer stays")

	// Consuming a used key keeps its counter; inside a transaction too.
	a := f.leasedAttempt(t, at(0), lk("rollup:2026-01-02", 1))
	acquire(t, s, a, at(0), lk("rollup:2026-01-02", 1))
	require.NoError(t, s.InTx(ctx, func(tx store.Tx) error {
		return tx.LeaseKeyConsume(ctx, f.tenant, "rollup:2026-01-02", a.RunID)
	}))
	st, err = s.LeaseKeyGet(ctx, f.tenant, "rollup:2026-01-02")
	require.NoError(t, err)
	require.Equal(t, &store.LeaseKeyState{Tenant: f.tenant, Key: "rollup:2026-01-02", LastFencingToken: 1,
		ConsumedByRun: a.RunID}, st)
	_, err = s.LeaseKeyGet(ctx, "tnt_other", "rollup:2026-01-02")
	require.ErrorIs(t, err, store.ErrNotFound)
}

// testLeaseLiveRun: an unfinished run whose LeaseKeys name the key.
func testLeaseLiveRun(t *testing.T, s store.Store) {
	ctx := bg()
	f := newFixture(t, s)
	keys := func(ks ...string) json.RawMessage {
		var l []store.LeaseKey
		for _, k := range ks {
			l = append(l, store.LeaseKey{Key: k, Limit: 1, OnConflict: "reject", Once: k == "once"})
		}
		b, err := json.Marshal(l)
		require.NoError(t, err)
		return b
	}
	mk := func(state store.RunState, lks json.RawMessage) *store.Run {
		return f.run(t, func(r *store.Run) { r.State, r.LeaseKeys = state, lks })
	}
	mk(store.RunQueued, json.RawMessage(`["k1", "k2"]`)) // not objects: ignored
	mk(store.RunQueued, nil)
	mk(store.RunQueued, json.RawMessage(`{"key": "k1"}`))
	mk(store.RunSucceeded, keys("k1"))
	mk(store.RunFailed, keys("k2"))
	other := &fixture{s: s, tenant: "tnt_other", n: 500}
	other.run(t, func(r *store.Run) { r.LeaseKeys = keys("k2") })

	live := func(key, except string) string {
		t.Helper()
		id, err := s.LeaseLiveRun(ctx, f.tenant, key, except)
		if errors.Is(err, store.ErrNotFound) {
			return ""
		}
		require.NoError(t, err)
		return id
	}
	require.Empty(t, live("k1", ""))
	require.Empty(t, live("k2", ""))

	queued := mk(store.RunQueued, keys("a", "k1"))
	pending := mk(store.RunPendingApproval, keys("k2", "once"))
	running := mk(store.RunRunning, keys("k3"))
	require.Equal(t, queued.ID, live("k1", ""))
	require.Empty(t, live("k1", queued.ID))
	require.Equal(t, pending.ID, live("once", ""))
	require.Equal(t, pending.ID, live("k2", ""))
	require.Equal(t, running.ID, live("k3", "run_x"))
	require.Empty(t, live("k", ""), "no partial match")
	require.Empty(t, live("K1", ""), "case matters")
	again := mk(store.RunRunning, keys("k1"))
	got := live("k1", queued.ID)
	require.Equal(t, again.ID, got)
	require.Contains(t, []string{queued.ID, again.ID}, live("k1", ""))
}

// testLeaseList: holds by key prefix, by key and slot.
func testLeaseList(t *testing.T, s store.Store) {
	ctx := bg()
	f := newFixture(t, s)
	take := func(keys ...store.LeaseKey) *store.Attempt {
		a := f.leasedAttempt(t, at(0), keys...)
		acquire(t, s, a, at(0), keys...)
		return a
	}
	take(lk("deploy:b", 2))
	take(lk("deploy:b", 2), lk("deploy:a", 1))
	take(lk("deploy_x:c", 1))
	take(lk("deployYx", 1))
	take(lk("Deploy:z", 1))
	take(lk("deploy%", 1))
	other := &fixture{s: s, tenant: "tnt_other", n: 500}
	oa := other.leasedAttempt(t, at(0), lk("deploy:a", 1))
	acquire(t, s, oa, at(0), lk("deploy:a", 1))

	list := func(prefix string) []string {
		t.Helper()
		hs, err := s.LeaseList(ctx, f.tenant, prefix)
		require.NoError(t, err)
		for _, h := range hs {
			require.Equal(t, f.tenant, h.Tenant)
			require.NotEmpty(t, h.RunnerID)
			require.Equal(t, at(30*time.Second), h.ExpiresAt)
		}
		return holdKeys(hs)
	}
	require.Equal(t, []string{"Deploy:z/0", "deploy%/0", "deploy:a/0", "deploy:b/0", "deploy:b/1", "deployYx/0", "deploy_x:c/0"},
		list(""), "byte order")
	require.Equal(t, []string{"deploy:a/0", "deploy:b/0", "deploy:b/1"}, list("deploy:"))
	require.Equal(t, []string{"deploy_x:c/0"}, list("deploy_"), "_ is not a wildcard")
	require.Equal(t, []string{"deploy%/0"}, list("deploy%"), "% is not a wildcard")
	require.Equal(t, []string{"Deploy:z/0"}, list("D"), "case matters")
	require.Equal(t, []string{"deploy:a/0"}, list("deploy:a"))
	require.Empty(t, list("deploy:a:"))
	require.Empty(t, list(`deploy\`))
}

// testLeaseConcurrent: workers claim an attempt and take one key (limit 1)
// in one transaction, release it in another; the key never has two holds,
// tokens strictly increase in commit order, and no waiter is left blocked
// (RELIABILITY L1/L7 in small).
func testLeaseConcurrent(t *testing.T, s store.Store) {
	ctx := bg()
	f := newFixture(t, s)
	const workers, per = 16, 4
	key := []store.LeaseKey{lk("hot", 1)}
	var (
		mu     sync.Mutex
		grants []int64
		errs   = make([]error, workers)
		wg     sync.WaitGroup
		start  = make(chan struct{})
		// Only a guard against hanging forever: a lost wakeup is detected
		// below as a waiter left blocked while the key stays free, which
		// does not depend on how loaded the machine is.
		timeout = clock.Real{}.Now().Add(3 * time.Minute)
	)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			errs[w] = func() error {
				pool := fmt.Sprintf("cc%02d", w)
				runner := "rnr_" + pool
				for range per {
					now := clock.Real{}.Now()
					r := &store.Run{ID: id.New(id.Run, now), Tenant: f.tenant, Job: "j", Actor: "a",
						State: store.RunQueued, LeaseKeys: json.RawMessage(`[{"key":"hot","limit":1}]`), CreatedAt: t0}
					a := &store.Attempt{ID: id.New(id.Attempt, now), RunID: r.ID, Tenant: f.tenant, Number: 1,
						State: store.AttemptQueued, Pool: pool, LeaseTTL: time.Minute, Timeout: time.Hour,
						NotBefore: t0.Add(-time.Hour), CreatedAt: t0}
					// Writes go through transactions, as the services make
					// them: autocommit writes racing BEGIN IMMEDIATE on
					// SQLite would only measure its busy handler.
					if err := s.InTx(ctx, func(tx store.Tx) error {
						if err := tx.RunCreate(ctx, r); err != nil {
							return err
						}
						return tx.AttemptCreate(ctx, a)
					}); err != nil {
						return err
					}
					for {
						if (clock.Real{}).Now().After(timeout) {
							return fmt.Errorf("%s: attempt %s still blocked: lost wakeup?", pool, a.ID)
						}
						var held []store.LeaseHold
						var blocked string
						err := s.InTx(ctx, func(tx store.Tx) error {
							held, blocked = nil, ""
							c, err := claim(tx, f.tenant, pool, nil, runner, at(0))
							if err != nil {
								return err
							}
							held, blocked, err = tx.LeaseAcquire(ctx, &store.LeaseAcquireParams{
								Tenant: f.tenant, RunID: c.RunID, AttemptID: c.ID, Keys: key, Now: at(0)})
							if err != nil {
								return err
							}
							if blocked != "" {
								return requeueBlocked(ctx, tx, c, blocked)
							}
							hs, err := tx.LeaseList(ctx, f.tenant, "hot")
							if err != nil {
								return err
							}
							if len(hs) != 1 || hs[0].AttemptID != c.ID {
								return fmt.Errorf("after acquiring: holds %v", holdKeys(hs))
							}
							return nil
						})
						if errors.Is(err, store.ErrNotFound) { // still blocked: wait for a release
							var freeSince time.Time
							for {
								got, err := s.AttemptGetByID(ctx, a.ID, false)
								if err != nil {
									return err
								}
								if got.BlockedOn == "" || (clock.Real{}).Now().After(timeout) {
									break
								}
								hs, err := s.LeaseList(ctx, f.tenant, "hot")
								if err != nil {
									return err
								}
								switch now := (clock.Real{}).Now(); {
								case len(hs) > 0:
									freeSince = time.Time{}
								case freeSince.IsZero():
									freeSince = now
								case now.Sub(freeSince) > 10*time.Second:
									return fmt.Errorf("%s: attempt %s blocked on a key free for 10 s: lost wakeup", pool, a.ID)
								}
								time.Sleep(2 * time.Millisecond)
							}
							continue
						}
						if err != nil {
							return err
						}
						if blocked != "" {
							continue
						}
						mu.Lock()
						grants = append(grants, held[0].FencingToken)
						mu.Unlock()
						break
					}
					err := s.InTx(ctx, func(tx store.Tx) error {
						if _, err := tx.LeaseReleaseAttempt(ctx, f.tenant, a.ID); err != nil {
							return err
						}
						got, err := tx.AttemptGetByID(ctx, a.ID, true)
						if err != nil {
							return err
						}
						got.State, got.EndedAt = store.AttemptSucceeded, at(time.Second)
						return tx.AttemptUpdate(ctx, got)
					})
					if err != nil {
						return err
					}
				}
				return nil
			}()
		}()
	}
	close(start)
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	require.Len(t, grants, workers*per)
	for i := 1; i < len(grants); i++ {
		require.Greater(t, grants[i], grants[i-1], "tokens in commit order: %v", grants)
	}
	require.Equal(t, int64(workers*per), keyToken(t, s, f.tenant, "hot"))
	hs, err := s.LeaseList(ctx, f.tenant, "")
	require.NoError(t, err)
	require.Empty(t, hs)
}

// testLeaseKeyLock: the lock creates the key's row (once, whatever the
// number of calls) and holds it to the end of the transaction: a second
// transaction locking the same key goes on only after the first ended.
func testLeaseKeyLock(t *testing.T, s store.Store) {
	ctx := bg()
	f := newFixture(t, s)
	_, err := s.LeaseKeyGet(ctx, f.tenant, "deploy:prod")
	require.ErrorIs(t, err, store.ErrNotFound)
	require.NoError(t, s.InTx(ctx, func(tx store.Tx) error {
		if err := tx.LeaseKeyLock(ctx, f.tenant, "deploy:prod"); err != nil {
			return err
		}
		return tx.LeaseKeyLock(ctx, f.tenant, "deploy:prod")
	}))
	k, err := s.LeaseKeyGet(ctx, f.tenant, "deploy:prod")
	require.NoError(t, err)
	require.Equal(t, int64(0), k.LastFencingToken)
	require.Empty(t, k.ConsumedByRun)

	locked, release := make(chan struct{}), make(chan struct{})
	first := make(chan error, 1)
	go func() {
		first <- s.InTx(ctx, func(tx store.Tx) error {
			if err := tx.LeaseKeyLock(ctx, f.tenant, "deploy:prod"); err != nil {
				return err
			}
			close(locked)
			<-release
			return nil
		})
	}()
	<-locked
	second := make(chan error, 1)
	go func() {
		second <- s.InTx(ctx, func(tx store.Tx) error { return tx.LeaseKeyLock(ctx, f.tenant, "deploy:prod") })
	}()
	select {
	case err := <-second:
		t.Fatalf("a second transaction locked the key while the first held it (err %v)", err)
	case <-time.After(300 * time.Millisecond):
	}
	close(release)
	require.NoError(t, <-first)
	require.NoError(t, <-second)
}

// testLeaseBlockWaiters: the queued, unmarked attempts of runs naming the
// key with the same limit are marked as waiting for it, with their runs;
// nothing else is.
func testLeaseBlockWaiters(t *testing.T, s store.Store) {
	ctx := bg()
	f := newFixture(t, s)
	w1 := f.queuedAttempt(t, lk("k", 1))
	w2 := f.queuedAttempt(t, lk("a", 1), lk("k", 1))
	otherLimit := f.queuedAttempt(t, lk("k", 2))
	otherKey := f.queuedAttempt(t, lk("j", 1))
	elsewhere := f.queuedAttempt(t, lk("k", 1))
	elsewhere.BlockedOn = "x"
	require.NoError(t, s.AttemptUpdate(ctx, elsewhere))
	noKeys := f.queuedAttempt(t)
	leased := f.leasedAttempt(t, at(0), lk("k", 1))
	other := &fixture{s: s, tenant: "tnt_other", n: 600}
	otherTenant := other.queuedAttempt(t, lk("k", 1))

	n, err := s.LeaseBlockWaiters(ctx, f.tenant, "k", 1)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	for _, w := range []*store.Attempt{w1, w2} {
		got, err := s.AttemptGetByID(ctx, w.ID, false)
		require.NoError(t, err)
		require.Equal(t, "k", got.BlockedOn)
		r, err := s.RunGetByID(ctx, w.RunID, false)
		require.NoError(t, err)
		require.Equal(t, "lease k", r.WaitingFor)
	}
	for want, a := range map[string]*store.Attempt{"": otherLimit, "x": elsewhere} {
		got, err := s.AttemptGetByID(ctx, a.ID, false)
		require.NoError(t, err)
		require.Equal(t, want, got.BlockedOn, a.ID)
	}
	for _, a := range []*store.Attempt{otherKey, noKeys, leased, otherTenant} {
		got, err := s.AttemptGetByID(ctx, a.ID, false)
		require.NoError(t, err)
		require.Empty(t, got.BlockedOn, a.ID)
		r, err := s.RunGetByID(ctx, a.RunID, false)
		require.NoError(t, err)
		require.Empty(t, r.WaitingFor, a.ID)
	}
	list, err := s.LeaseWaiters(ctx, f.tenant, "k")
	require.NoError(t, err)
	require.Len(t, list, 2)
	n, err = s.LeaseBlockWaiters(ctx, f.tenant, "k", 1)
	require.NoError(t, err)
	require.Zero(t, n, "marked already")
}

// testLeaseWakeStranded: the sweep unblocks the waiters of keys nobody
// holds, in every tenant, and leaves alone the waiters of held keys and
// attempts no longer queued.
func testLeaseWakeStranded(t *testing.T, s store.Store) {
	ctx := bg()
	f := newFixture(t, s)
	other := &fixture{s: s, tenant: "tnt_other", n: 700}
	holder := f.leasedAttempt(t, at(0), lk("held", 1))
	acquire(t, s, holder, at(0), lk("held", 1))
	mark := func(a *store.Attempt, key string) *store.Attempt {
		t.Helper()
		a.BlockedOn = key
		require.NoError(t, s.AttemptUpdate(ctx, a))
		return a
	}
	heldWaiter := mark(f.queuedAttempt(t, lk("held", 1)), "held")
	free := []*store.Attempt{
		mark(f.queuedAttempt(t, lk("free", 1)), "free"),
		mark(f.queuedAttempt(t, lk("free", 1)), "free"),
		mark(f.queuedAttempt(t, lk("gone", 2)), "gone"),
		// Another tenant's key of the held key's name is free there.
		mark(other.queuedAttempt(t, lk("held", 1)), "held"),
	}
	ended := mark(f.queuedAttempt(t, lk("free", 1)), "free")
	ended.State = store.AttemptCancelled
	require.NoError(t, s.AttemptUpdate(ctx, ended))

	n, err := s.LeaseWakeStranded(ctx, 100)
	require.NoError(t, err)
	require.Equal(t, len(free), n)
	for _, a := range free {
		got, err := s.AttemptGetByID(ctx, a.ID, false)
		require.NoError(t, err)
		require.Empty(t, got.BlockedOn, a.ID)
	}
	for want, a := range map[string]*store.Attempt{"held": heldWaiter, "free": ended} {
		got, err := s.AttemptGetByID(ctx, a.ID, false)
		require.NoError(t, err)
		require.Equal(t, want, got.BlockedOn, a.ID)
	}
	n, err = s.LeaseWakeStranded(ctx, 100)
	require.NoError(t, err)
	require.Zero(t, n)

	// A batch at a time.
	for range 3 {
		mark(f.queuedAttempt(t, lk("later", 1)), "later")
	}
	n, err = s.LeaseWakeStranded(ctx, 2)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	n, err = s.LeaseWakeStranded(ctx, 2)
	require.NoError(t, err)
	require.Equal(t, 1, n)
}

// testLeaseReleaseSkipsLockedWaiters: a release does not wait for a
// waiter's row that another transaction has locked. A claim can hold such
// a row (its SKIP LOCKED statement locked it, then found that another
// claim had just marked it waiting) while it waits for the key's row,
// which the release holds: waiting here was a deadlock. The waiter it
// skipped is woken by the sweep once the key is free and the row is not
// locked. Stores with one writer have no such rows.
func testLeaseReleaseSkipsLockedWaiters(t *testing.T, s store.Store) {
	if s.SingleWriter() {
		t.Skip("one write transaction at a time: no row is ever locked by another")
	}
	ctx := bg()
	f := newFixture(t, s)
	holder := f.leasedAttempt(t, at(0), lk("k", 1))
	acquire(t, s, holder, at(0), lk("k", 1))
	var waiters []*store.Attempt
	for range 2 {
		w := f.queuedAttempt(t, lk("k", 1))
		w.BlockedOn = "k"
		require.NoError(t, s.AttemptUpdate(ctx, w))
		waiters = append(waiters, w)
	}
	locked, unlock := make(chan struct{}), make(chan struct{})
	locker := make(chan error, 1)
	go func() {
		locker <- s.InTx(ctx, func(tx store.Tx) error {
			if _, err := tx.AttemptGetByID(ctx, waiters[0].ID, true); err != nil {
				return err
			}
			close(locked)
			<-unlock
			return nil
		})
	}()
	<-locked
	// Waiting for the locker would never end here: it waits for this.
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	keys, err := s.LeaseReleaseAttempt(rctx, f.tenant, holder.ID)
	cancel()
	close(unlock)
	require.NoError(t, <-locker)
	require.NoError(t, err, "the release waited for a row another transaction holds")
	require.Equal(t, []string{"k"}, keys)
	blockedOn := func(a *store.Attempt) string {
		t.Helper()
		got, err := s.AttemptGetByID(ctx, a.ID, false)
		require.NoError(t, err)
		return got.BlockedOn
	}
	require.Equal(t, "k", blockedOn(waiters[0]), "the locked waiter is skipped")
	require.Empty(t, blockedOn(waiters[1]))
	n, err := s.LeaseWakeStranded(ctx, 100)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Empty(t, blockedOn(waiters[0]))
}

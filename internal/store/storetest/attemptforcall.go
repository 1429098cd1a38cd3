package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/id"
	"github.com/jobplane/jobplane/internal/store"
)

// testAttemptForCall: the one-statement read of an attempt, its run and
// the clock returns what the separate reads return.
func testAttemptForCall(t *testing.T, s store.Store) {
	f := newFixture(t, s)
	a := f.attempt(t, func(a *store.Attempt) { a.Labels = []string{"gpu"}; a.Repo = "acme/app" })
	wantA, err := s.AttemptGetByID(bg(), a.ID, false)
	require.NoError(t, err)
	wantR, err := s.RunGetByID(bg(), a.RunID, false)
	require.NoError(t, err)

	fixed := at(time.Hour)
	gotA, gotR, now, err := s.AttemptForCall(bg(), a.ID, true, fixed)
	require.NoError(t, err)
	require.Equal(t, wantA, gotA)
	require.Equal(t, wantR, gotR)
	require.True(t, now.Equal(*fixed), "a given time stands in for the clock: %s", now)

	gotA, gotR, now, err = s.AttemptForCall(bg(), a.ID, false, nil)
	require.NoError(t, err)
	require.Equal(t, wantA, gotA)
	require.Nil(t, gotR, "without withRun the run is not read")
	dbNow, err := s.Now(bg(), nil)
	require.NoError(t, err)
	require.WithinDuration(t, dbNow, now, time.Minute, "the database clock")

	_, _, _, err = s.AttemptForCall(bg(), "att_missing", true, nil)
	require.ErrorIs(t, err, store.ErrNotFound)
	_, _, _, err = s.AttemptForCall(bg(), "att_missing", false, nil)
	require.ErrorIs(t, err, store.ErrNotFound)
}

// testAttemptsForCall: several attempts with their runs in one read, in ID
// order, each once, the missing ones left out; what AttemptForCall returns
// for each.
func testAttemptsForCall(t *testing.T, s store.Store) {
	f := newFixture(t, s)
	var ids []string
	want := map[string][2]any{}
	for range 3 {
		a := f.attempt(t, nil)
		gotA, gotR, _, err := s.AttemptForCall(bg(), a.ID, true, nil)
		require.NoError(t, err)
		want[a.ID] = [2]any{gotA, gotR}
		ids = append(ids, a.ID)
	}
	fixed := at(time.Hour)
	var got []store.CallRows
	require.NoError(t, s.InTx(bg(), func(tx store.Tx) error {
		var err error
		got, err = tx.AttemptsForCall(bg(), []string{ids[2], "att_missing", ids[0], ids[1], ids[0]}, fixed)
		return err
	}))
	require.Len(t, got, 3)
	for i, c := range got {
		if i > 0 {
			require.Less(t, got[i-1].Attempt.ID, c.Attempt.ID, "in ID order")
		}
		require.Equal(t, want[c.Attempt.ID][0], c.Attempt)
		require.Equal(t, want[c.Attempt.ID][1], c.Run)
		require.True(t, c.Now.Equal(*fixed), "a given time stands in for the clock: %s", c.Now)
	}
	none, err := s.AttemptsForCall(bg(), []string{"att_missing"}, nil)
	require.NoError(t, err)
	require.Empty(t, none)
}

// testListByRuns: a page's attempts and approvals in one statement each,
// the same rows as run by run, each run's in its order.
func testListByRuns(t *testing.T, s store.Store) {
	f := newFixture(t, s)
	a1 := f.attempt(t, nil)
	a2 := f.attempt(t, nil)
	lone := f.run(t, nil)
	second := &store.Attempt{ID: a1.ID + "x", RunID: a1.RunID, Tenant: f.tenant, Number: 2, State: store.AttemptQueued,
		Pool: "default", LeaseTTL: time.Minute, NotBefore: t0, CreatedAt: t0}
	// The first attempt must end before a second may be live.
	a1.State = store.AttemptFailed
	require.NoError(t, s.InTx(bg(), func(tx store.Tx) error {
		if err := tx.AttemptUpdate(bg(), a1); err != nil {
			return err
		}
		return tx.AttemptCreate(bg(), second)
	}))
	for i, who := range []string{"bob", "alice"} {
		require.NoError(t, s.ApprovalCreate(bg(), &store.Approval{RunID: a2.RunID, Approver: who, Verdict: "approved", At: t0.Add(time.Duration(i) * time.Second)}))
	}
	ids := []string{a1.RunID, a2.RunID, lone.ID, "run_missing"}
	atts, err := s.AttemptListByRuns(bg(), ids)
	require.NoError(t, err)
	apps, err := s.ApprovalListByRuns(bg(), ids)
	require.NoError(t, err)
	var wantAtts []*store.Attempt
	var wantApps []*store.Approval
	for _, id := range ids {
		l, err := s.AttemptListByRun(bg(), id)
		require.NoError(t, err)
		wantAtts = append(wantAtts, l...)
		ap, err := s.ApprovalListByRun(bg(), id)
		require.NoError(t, err)
		wantApps = append(wantApps, ap...)
	}
	byRun := func(l []*store.Attempt) map[string][]string {
		m := map[string][]string{}
		for _, a := range l {
			m[a.RunID] = append(m[a.RunID], a.ID)
		}
		return m
	}
	require.Len(t, atts, 3)
	require.Equal(t, byRun(wantAtts), byRun(atts))
	require.Equal(t, []string{a1.ID, second.ID}, byRun(atts)[a1.RunID], "by number")
	require.Len(t, apps, 2)
	require.Equal(t, "bob", apps[0].Approver, "in order of time")
	require.Equal(t, wantApps[0].Approver, apps[0].Approver)
	none, err := s.AttemptListByRuns(bg(), nil)
	require.NoError(t, err)
	require.Empty(t, none)
}

// testNonceInsertMany: one statement for a group's nonces; a nonce already
// known, and every repeat within the batch after the first, is not new.
func testNonceInsertMany(t *testing.T, s store.Store) {
	exp := t0.Add(time.Hour)
	require.NoError(t, s.InTx(bg(), func(tx store.Tx) error { return tx.NonceInsert(bg(), "rnr_a", "known", exp) }))
	var got []bool
	require.NoError(t, s.InTx(bg(), func(tx store.Tx) error {
		var err error
		got, err = tx.NonceInsertMany(bg(), []store.Nonce{
			{RunnerID: "rnr_a", Nonce: "n1", ExpiresAt: exp},
			{RunnerID: "rnr_a", Nonce: "known", ExpiresAt: exp},
			{RunnerID: "rnr_b", Nonce: "n1", ExpiresAt: exp}, // another runner's
			{RunnerID: "rnr_a", Nonce: "n1", ExpiresAt: exp}, // a replay in the same batch
			{RunnerID: "rnr_a", Nonce: "n2", ExpiresAt: exp},
		})
		return err
	}))
	require.Equal(t, []bool{true, false, true, false, true}, got)
	require.ErrorIs(t, s.InTx(bg(), func(tx store.Tx) error { return tx.NonceInsert(bg(), "rnr_a", "n2", exp) }), store.ErrAlreadyExists)
	require.NoError(t, s.InTx(bg(), func(tx store.Tx) error {
		l, err := tx.NonceInsertMany(bg(), nil)
		require.Empty(t, l)
		return err
	}))
}

// testInTxNonce: a pending nonce is recorded by the first transaction that
// commits with it, and only then; a known one refuses the transaction
// before its body runs; a recorded or absent one changes nothing.
func testInTxNonce(t *testing.T, s store.Store) {
	exp := t0.Add(time.Hour)
	ran := 0
	body := func(tx store.Tx) error {
		ran++
		return tx.NonceInsert(bg(), "rnr_n", fmt.Sprintf("effect-%d", ran), exp)
	}
	boom := errors.New("body failed")

	p := store.NewPendingNonce(store.Nonce{RunnerID: "rnr_n", Nonce: "n1", ExpiresAt: exp})
	require.ErrorIs(t, s.InTxNonce(bg(), p, func(store.Tx) error { return boom }), boom)
	require.False(t, p.Recorded(), "a rolled back transaction recorded the nonce")
	require.NoError(t, s.InTxNonce(bg(), p, body))
	require.True(t, p.Recorded())
	require.NoError(t, s.InTxNonce(bg(), p, body), "a recorded nonce is not inserted again")
	require.Equal(t, 2, ran)

	replay := store.NewPendingNonce(store.Nonce{RunnerID: "rnr_n", Nonce: "n1", ExpiresAt: exp})
	require.ErrorIs(t, s.InTxNonce(bg(), replay, body), store.ErrReplay)
	require.Equal(t, 2, ran, "the body of a replay ran")
	require.False(t, replay.Recorded())
	require.ErrorIs(t, replay.Record(bg(), s), store.ErrReplay)
	require.NoError(t, s.InTxNonce(bg(), nil, body))
	require.Equal(t, 3, ran)

	alone := store.NewPendingNonce(store.Nonce{RunnerID: "rnr_n", Nonce: "n2", ExpiresAt: exp})
	require.NoError(t, alone.Record(bg(), s))
	require.True(t, alone.Recorded())
	require.NoError(t, alone.Record(bg(), s), "recording twice is recording once")
}

// requireLocksRun runs claim in a transaction and, before that commits,
// checks that another transaction locking runID waits for it.
func requireLocksRun(t *testing.T, s store.Store, runID string, claim func(tx store.Tx) error) {
	t.Helper()
	claimed := make(chan struct{})
	release := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- s.InTx(bg(), func(tx store.Tx) error {
			if err := claim(tx); err != nil {
				return err
			}
			close(claimed)
			<-release
			return nil
		})
	}()
	select {
	case <-claimed:
	case err := <-done:
		t.Fatalf("claim: %v", err)
	}
	locked := make(chan error, 1)
	go func() {
		locked <- s.InTx(bg(), func(tx store.Tx) error {
			_, err := tx.RunGetByID(bg(), runID, true)
			return err
		})
	}()
	select {
	case err := <-locked:
		close(release)
		<-done
		t.Fatalf("run %s was not locked by the claim (err %v)", runID, err)
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	require.NoError(t, <-done)
	require.NoError(t, <-locked)
}

// testAttemptClaimRun: the claim that returns its run claims what
// AttemptClaim claims and returns the run as RunGetByID reads it, locked:
// a second transaction that locks the run waits for the claim's commit.
func testAttemptClaimRun(t *testing.T, s store.Store) {
	f := newFixture(t, s)
	a := f.attempt(t, nil)
	params := &store.AttemptClaimParams{Tenant: f.tenant, Pool: a.Pool, RunnerID: "rnr_cr", LeaseDigest: "digest", ClaimRequestID: "req-cr", Now: at(0)}
	wantR, err := s.RunGetByID(bg(), a.RunID, false)
	require.NoError(t, err)

	var gotA *store.Attempt
	var gotR *store.Run
	requireLocksRun(t, s, a.RunID, func(tx store.Tx) (err error) {
		gotA, gotR, err = tx.AttemptClaimRun(bg(), params)
		return err
	})
	require.Equal(t, a.ID, gotA.ID)
	require.Equal(t, store.AttemptLeased, gotA.State)
	require.Equal(t, "rnr_cr", gotA.RunnerID)
	require.Equal(t, wantR, gotR)

	got, err := s.AttemptGetByID(bg(), a.ID, false)
	require.NoError(t, err)
	require.Equal(t, store.AttemptLeased, got.State)
	_, _, err = s.AttemptClaimRun(bg(), params)
	require.ErrorIs(t, err, store.ErrNotFound, "nothing left to claim")
}

// testUpdateInTx: a read in the transaction sees its own updates, and an
// update of a row that does not exist fails the transaction with
// ErrNotFound, at the latest at its next statement. (A store may keep
// writes back within a transaction; this is what it must keep to.)
func testUpdateInTx(t *testing.T, s store.Store) {
	f := newFixture(t, s)
	a := f.attempt(t, nil)
	require.NoError(t, s.InTx(bg(), func(tx store.Tx) error {
		r, err := tx.RunGetByID(bg(), a.RunID, true)
		if err != nil {
			return err
		}
		r.State = store.RunRunning
		if err := tx.RunUpdate(bg(), r); err != nil {
			return err
		}
		a.State = store.AttemptFailed
		if err := tx.AttemptUpdate(bg(), a); err != nil {
			return err
		}
		got, err := tx.RunGetByID(bg(), a.RunID, false)
		if err != nil {
			return err
		}
		require.Equal(t, store.RunRunning, got.State, "the transaction reads its own update")
		return nil
	}))
	got, err := s.AttemptGetByID(bg(), a.ID, false)
	require.NoError(t, err)
	require.Equal(t, store.AttemptFailed, got.State, "an update last in its transaction is committed")

	err = s.InTx(bg(), func(tx store.Tx) error {
		return tx.RunUpdate(bg(), &store.Run{ID: "run_missing", State: store.RunFailed})
	})
	require.ErrorIs(t, err, store.ErrNotFound)
	err = s.InTx(bg(), func(tx store.Tx) error {
		if err := tx.AttemptUpdate(bg(), &store.Attempt{ID: "att_missing", State: store.AttemptFailed}); err != nil {
			return err
		}
		_, err := tx.RunGetByID(bg(), a.RunID, false)
		return err
	})
	require.ErrorIs(t, err, store.ErrNotFound, "reported by the next statement")
}

// testAttemptClaimRuns: a claim of several claims what as many single
// claims would, in the same order, each with its own slot's lease digest
// and request ID, returns each attempt's run, and locks the runs.
func testAttemptClaimRuns(t *testing.T, s store.Store) {
	f := newFixture(t, s)
	var queued []*store.Attempt
	for i := range 5 {
		// Created newest first: the claim order is not_before, not creation.
		queued = append(queued, f.attempt(t, func(a *store.Attempt) { a.NotBefore = t0.Add(-time.Duration(i+1) * time.Minute) }))
	}
	f.attempt(t, func(a *store.Attempt) { a.Labels = []string{"gpu"} }) // not eligible
	f.attempt(t, func(a *store.Attempt) { a.NotBefore = t0.Add(time.Hour) })
	params := &store.AttemptClaimParams{Tenant: f.tenant, Pool: "default", RunnerID: "rnr_many", Now: at(0)}
	slots := []store.ClaimSlot{{LeaseDigest: "d0", ClaimRequestID: "req"}, {LeaseDigest: "d1", ClaimRequestID: "req#1"}, {LeaseDigest: "d2", ClaimRequestID: "req#2"}}

	var got []store.ClaimedRun
	requireLocksRun(t, s, queued[3].RunID, func(tx store.Tx) (err error) {
		got, err = tx.AttemptClaimRuns(bg(), params, slots)
		return err
	})

	require.Len(t, got, 3)
	for i, c := range got {
		want := queued[4-i] // the oldest not_before first
		require.Equal(t, i, c.Slot)
		require.Equal(t, want.ID, c.Attempt.ID)
		require.Equal(t, store.AttemptLeased, c.Attempt.State)
		require.Equal(t, "rnr_many", c.Attempt.RunnerID)
		require.Equal(t, slots[i].LeaseDigest, c.Attempt.LeaseDigest)
		require.Equal(t, slots[i].ClaimRequestID, c.Attempt.ClaimRequestID)
		wantR, err := s.RunGetByID(bg(), want.RunID, false)
		require.NoError(t, err)
		require.Equal(t, wantR.ID, c.Run.ID)
		require.Equal(t, wantR.State, c.Run.State)
		stored, err := s.AttemptGetByID(bg(), want.ID, false)
		require.NoError(t, err)
		require.Equal(t, c.Attempt, stored)
	}
	// What is left: two of the five, then nothing (and no error).
	var rest []store.ClaimedRun
	require.NoError(t, s.InTx(bg(), func(tx store.Tx) error {
		var err error
		rest, err = tx.AttemptClaimRuns(bg(), params, slots)
		return err
	}))
	require.Len(t, rest, 2)
	require.Equal(t, queued[1].ID, rest[0].Attempt.ID)
	require.Equal(t, queued[0].ID, rest[1].Attempt.ID)
	require.NoError(t, s.InTx(bg(), func(tx store.Tx) error {
		var err error
		rest, err = tx.AttemptClaimRuns(bg(), params, slots)
		return err
	}))
	require.Empty(t, rest)
}

// testRunCreateQueued: a run and its first attempt inserted together are
// what RunCreate and AttemptCreate would have stored, the attempt at the
// run's time when it names none; a taken idempotency key inserts neither.
func testRunCreateQueued(t *testing.T, s store.Store) {
	f := newFixture(t, s)
	newPair := func(created time.Time, key string) (*store.Run, *store.Attempt) {
		f.n++
		now := t0.Add(time.Duration(f.n) * time.Millisecond)
		r := &store.Run{
			ID: id.New(id.Run, now), Tenant: f.tenant, Job: "migrate", Channel: "prod", Ref: "main", Commit: "abc123",
			Params: json.RawMessage(`{"n":1}`), Actor: "alice", Source: json.RawMessage(`{"kind":"api"}`),
			IdempotencyKey: key, State: store.RunQueued, MaxAttempts: 3, Spec: json.RawMessage(`{"pool":"default"}`),
			CreatedAt: created, UpdatedAt: created,
		}
		a := &store.Attempt{ID: id.New(id.Attempt, now), RunID: r.ID, Tenant: f.tenant, Number: 1, State: store.AttemptQueued,
			Pool: "default", Labels: []string{"linux"}, LeaseTTL: 30 * time.Second, Timeout: time.Hour, Repo: "acme/defs",
			CreatedAt: created, NotBefore: created}
		return r, a
	}
	// The database's clock: the attempt gets the run's time.
	r, a := newPair(time.Time{}, "k1")
	require.NoError(t, s.InTx(bg(), func(tx store.Tx) error { return tx.RunCreateQueued(bg(), r, a) }))
	require.False(t, r.CreatedAt.IsZero())
	require.Equal(t, r.CreatedAt, a.CreatedAt)
	require.Equal(t, r.CreatedAt, a.NotBefore)
	gotR, err := s.RunGetByID(bg(), r.ID, false)
	require.NoError(t, err)
	require.Equal(t, r.CreatedAt, gotR.CreatedAt)
	require.Equal(t, store.RunQueued, gotR.State)
	gotA, err := s.AttemptGetByID(bg(), a.ID, false)
	require.NoError(t, err)
	require.Equal(t, a, gotA)

	// A fixed clock: the given times are kept.
	r2, a2 := newPair(t0.Add(time.Minute), "k2")
	a2.NotBefore = t0.Add(2 * time.Minute)
	require.NoError(t, s.InTx(bg(), func(tx store.Tx) error { return tx.RunCreateQueued(bg(), r2, a2) }))
	gotA, err = s.AttemptGetByID(bg(), a2.ID, false)
	require.NoError(t, err)
	require.True(t, gotA.CreatedAt.Equal(t0.Add(time.Minute)))
	require.True(t, gotA.NotBefore.Equal(t0.Add(2*time.Minute)))

	// The same idempotency key again: neither row.
	r3, a3 := newPair(time.Time{}, "k1")
	err = s.InTx(bg(), func(tx store.Tx) error { return tx.RunCreateQueued(bg(), r3, a3) })
	require.ErrorIs(t, err, store.ErrAlreadyExists)
	_, err = s.AttemptGetByID(bg(), a3.ID, false)
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = s.RunGetByID(bg(), r3.ID, false)
	require.ErrorIs(t, err, store.ErrNotFound)
}

// testAttemptRunUpdate: an attempt and its run updated together read back
// as AttemptUpdate and RunUpdate would leave them; a missing row of either
// is ErrNotFound.
func testAttemptRunUpdate(t *testing.T, s store.Store) {
	f := newFixture(t, s)
	a := f.attempt(t, nil)
	r, err := s.RunGetByID(bg(), a.RunID, false)
	require.NoError(t, err)
	ended := t0.Add(time.Minute)
	a.State, a.EndedAt, a.Result = store.AttemptSucceeded, &ended, json.RawMessage(`{"outcome":"succeeded"}`)
	r.State, r.FinishedAt, r.UpdatedAt = store.RunSucceeded, &ended, ended
	require.NoError(t, s.InTx(bg(), func(tx store.Tx) error { return tx.AttemptRunUpdate(bg(), a, r) }))
	gotA, err := s.AttemptGetByID(bg(), a.ID, false)
	require.NoError(t, err)
	require.Equal(t, store.AttemptSucceeded, gotA.State)
	require.True(t, gotA.EndedAt.Equal(ended))
	require.JSONEq(t, `{"outcome":"succeeded"}`, string(gotA.Result))
	gotR, err := s.RunGetByID(bg(), r.ID, false)
	require.NoError(t, err)
	require.Equal(t, store.RunSucceeded, gotR.State)
	require.True(t, gotR.FinishedAt.Equal(ended))
	require.True(t, gotR.UpdatedAt.Equal(ended))

	// A missing attempt: the run is not updated.
	b := f.attempt(t, nil)
	rb, err := s.RunGetByID(bg(), b.RunID, false)
	require.NoError(t, err)
	ghost := *b
	ghost.ID = id.New(id.Attempt, t0)
	rb.State = store.RunCancelled
	err = s.InTx(bg(), func(tx store.Tx) error { return tx.AttemptRunUpdate(bg(), &ghost, rb) })
	require.ErrorIs(t, err, store.ErrNotFound)
	gotR, err = s.RunGetByID(bg(), rb.ID, false)
	require.NoError(t, err)
	require.Equal(t, store.RunQueued, gotR.State)
	// A missing run: the transaction fails, and the attempt is unchanged.
	ghostRun := *rb
	ghostRun.ID = id.New(id.Run, t0)
	b.State = store.AttemptCancelled
	err = s.InTx(bg(), func(tx store.Tx) error { return tx.AttemptRunUpdate(bg(), b, &ghostRun) })
	require.ErrorIs(t, err, store.ErrNotFound)
	gotA, err = s.AttemptGetByID(bg(), b.ID, false)
	require.NoError(t, err)
	require.Equal(t, store.AttemptQueued, gotA.State)
}

// testPanicInTx: a transaction whose function panics is rolled back and
// lets go of its connection: its update is gone, and the run it locked and
// wrote is free for the next transaction at once. net/http recovers a
// handler's panic and serves on, so a transaction left open would hold its
// row locks (on SQLite, the write lock) for the life of the process.
func testPanicInTx(t *testing.T, s store.Store) {
	f := newFixture(t, s)
	a := f.attempt(t, nil)
	func() {
		defer func() { require.Equal(t, "boom", recover()) }()
		_ = s.InTx(bg(), func(tx store.Tx) error {
			r, err := tx.RunGetByID(bg(), a.RunID, true)
			if err != nil {
				return err
			}
			r.State = store.RunRunning
			if err := tx.RunUpdate(bg(), r); err != nil {
				return err
			}
			panic("boom")
		})
	}()
	// Bounded, so that a transaction left open fails the test rather
	// than hanging it here.
	ctx, cancel := context.WithTimeout(bg(), 5*time.Second)
	defer cancel()
	err := s.InTx(ctx, func(tx store.Tx) error {
		r, err := tx.RunGetByID(ctx, a.RunID, true)
		if err != nil {
			return err
		}
		if r.State != store.RunQueued {
			return fmt.Errorf("the panicked transaction's update was kept: %s", r.State)
		}
		r.State = store.RunFailed
		return tx.RunUpdate(ctx, r)
	})
	require.NoError(t, err, "the next transaction on the same run")
}

package storetest

import (
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/store"
)

func testSystemLease(t *testing.T, s store.Store) {
	ctx := bg()
	acquire := func(holder string, d time.Duration) (*store.SystemLease, error) {
		var l *store.SystemLease
		err := inTx(t, s, func(tx store.Tx) (err error) {
			l, err = tx.SystemLeaseAcquire(ctx, "retention", holder, time.Minute, at(d))
			return err
		})
		return l, err
	}
	check := func(token int64, d time.Duration) error {
		return inTx(t, s, func(tx store.Tx) error { return tx.SystemLeaseCheck(ctx, "retention", token, at(d)) })
	}
	a, err := acquire("a", 0)
	require.NoError(t, err)
	require.Equal(t, int64(1), a.Token)
	require.Equal(t, "a", a.Holder)
	require.Equal(t, t0.Add(time.Minute), a.ExpiresAt)

	_, err = acquire("b", 30*time.Second)
	require.ErrorIs(t, err, store.ErrNotFound, "held by a")
	r, err := acquire("a", 30*time.Second)
	require.NoError(t, err)
	require.Equal(t, int64(1), r.Token, "a renewal keeps the token")
	require.Equal(t, t0.Add(90*time.Second), r.ExpiresAt)
	require.NoError(t, check(1, 89*time.Second))
	require.ErrorIs(t, check(1, 90*time.Second), store.ErrNotFound, "expired at expires_at")

	b, err := acquire("b", 90*time.Second)
	require.NoError(t, err, "expired: another may take it")
	require.Equal(t, int64(2), b.Token)
	require.ErrorIs(t, check(1, 91*time.Second), store.ErrNotFound, "the old holder's token is fenced")
	require.NoError(t, check(2, 91*time.Second))
	a2, err := acquire("a", 200*time.Second)
	require.NoError(t, err, "b's lease expired too")
	require.Equal(t, int64(3), a2.Token, "a holder coming back after losing the lease gets a new token")

	// Releasing with a stale token does nothing; with the live one it frees the lease.
	require.NoError(t, inTx(t, s, func(tx store.Tx) error { return tx.SystemLeaseRelease(ctx, "retention", 2) }))
	_, err = acquire("b", 201*time.Second)
	require.ErrorIs(t, err, store.ErrNotFound)
	require.NoError(t, inTx(t, s, func(tx store.Tx) error { return tx.SystemLeaseRelease(ctx, "retention", 3) }))
	b2, err := acquire("b", 202*time.Second)
	require.NoError(t, err)
	require.Equal(t, int64(1), b2.Token, "a released lease starts over; its row is gone")

	// Of concurrent acquirers of a free lease exactly one wins.
	var wg sync.WaitGroup
	var mu sync.Mutex
	won := 0
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := s.InTx(ctx, func(tx store.Tx) error {
				_, err := tx.SystemLeaseAcquire(ctx, "race", string(rune('a'+i)), time.Minute, at(0))
				return err
			})
			if err == nil {
				mu.Lock()
				won++
				mu.Unlock()
			} else {
				require.ErrorIs(t, err, store.ErrNotFound)
			}
		}()
	}
	wg.Wait()
	require.Equal(t, 1, won)
}

func testRetention(t *testing.T, s store.Store) {
	ctx := bg()
	f := newFixture(t, s)
	end := func(d time.Duration, spec string) *store.Run {
		return f.run(t, func(r *store.Run) {
			r.State, r.FinishedAt = store.RunSucceeded, at(d)
			if spec != "" {
				r.Spec = json.RawMessage(spec)
			}
		})
	}
	live := f.run(t, nil)
	r1 := end(time.Hour, `{"name":"migrate","retention":{"logs":"1h0m0s"}}`)
	r2 := end(2*time.Hour, "")
	r3 := end(3*time.Hour, `{"name":"migrate"}`)

	wm, err := s.RetentionWatermark(ctx)
	require.NoError(t, err)
	require.True(t, wm.IsZero())
	ended, err := s.RunsEndedUnstamped(ctx, time.Time{}, 10)
	require.NoError(t, err)
	require.Len(t, ended, 3, "the live run is not listed")
	require.Equal(t, []string{r1.ID, r2.ID, r3.ID}, []string{ended[0].ID, ended[1].ID, ended[2].ID})
	require.Equal(t, t0.Add(time.Hour), ended[0].FinishedAt)
	require.Equal(t, f.tenant, ended[0].Tenant)
	require.Equal(t, "migrate", ended[0].Job)
	require.JSONEq(t, `{"name":"migrate","retention":{"logs":"1h0m0s"}}`, string(ended[0].Spec))
	require.Empty(t, ended[1].Spec)
	_ = live
	page, err := s.RunsEndedUnstamped(ctx, t0.Add(2*time.Hour), 1)
	require.NoError(t, err)
	require.Len(t, page, 1)
	require.Equal(t, r2.ID, page[0].ID, "since and limit")

	stamp := func(r *store.Run, logsDue, artifactsDue *time.Time) {
		require.NoError(t, inTx(t, s, func(tx store.Tx) error {
			return tx.RetentionStamp(ctx, &store.RunRetention{RunID: r.ID, Tenant: r.Tenant, Job: r.Job, FinishedAt: *r.FinishedAt,
				LogsDueAt: logsDue, ArtifactsDueAt: artifactsDue})
		}))
	}
	stamp(r1, at(2*time.Hour), at(10*time.Hour))
	stamp(r2, at(5*time.Hour), nil)
	stamp(r1, at(time.Hour), nil) // a second stamp keeps the first
	wm, err = s.RetentionWatermark(ctx)
	require.NoError(t, err)
	require.Equal(t, t0.Add(2*time.Hour), wm)
	ended, err = s.RunsEndedUnstamped(ctx, time.Time{}, 10)
	require.NoError(t, err)
	require.Len(t, ended, 1)
	require.Equal(t, r3.ID, ended[0].ID)

	due := func(kind store.RetentionKind, d time.Duration) []string {
		rows, err := s.RetentionDue(ctx, kind, at(d), 10)
		require.NoError(t, err)
		var ids []string
		for _, x := range rows {
			ids = append(ids, x.RunID)
		}
		return ids
	}
	require.Empty(t, due(store.RetainLogs, 2*time.Hour-time.Second))
	require.Equal(t, []string{r1.ID}, due(store.RetainLogs, 2*time.Hour), "due at logs_due_at")
	require.Equal(t, []string{r1.ID, r2.ID}, due(store.RetainLogs, 6*time.Hour), "earliest first")
	require.Empty(t, due(store.RetainArtifacts, 6*time.Hour))
	require.Equal(t, []string{r1.ID}, due(store.RetainArtifacts, 100*time.Hour), "a NULL due date is never due")
	rows, err := s.RetentionDue(ctx, store.RetainLogs, at(6*time.Hour), 1)
	require.NoError(t, err)
	require.Len(t, rows, 1)
	require.Equal(t, t0.Add(2*time.Hour), *rows[0].LogsDueAt)
	require.Equal(t, t0.Add(10*time.Hour), *rows[0].ArtifactsDueAt)
	require.Nil(t, rows[0].LogsPrunedAt)

	require.NoError(t, inTx(t, s, func(tx store.Tx) error {
		return tx.RetentionMarkPruned(ctx, r1.ID, store.RetainLogs, at(7*time.Hour))
	}))
	require.Equal(t, []string{r2.ID}, due(store.RetainLogs, 8*time.Hour), "pruned runs are no longer due")
	require.Equal(t, []string{r1.ID}, due(store.RetainArtifacts, 100*time.Hour), "kinds are independent")
	require.ErrorIs(t, inTx(t, s, func(tx store.Tx) error {
		return tx.RetentionMarkPruned(ctx, r3.ID, store.RetainLogs, at(7*time.Hour))
	}), store.ErrNotFound, "no retention row")
	_, err = s.RetentionDue(ctx, "audit", at(0), 1)
	require.Error(t, err, "unknown kind")
}

func testLogPrune(t *testing.T, s store.Store) {
	ctx := bg()
	f := newFixture(t, s)
	a := f.attempt(t, nil)
	b := f.attempt(t, nil)
	for _, att := range []*store.Attempt{a, b} {
		for seq := range int64(3) {
			_, err := s.LogAppend(ctx, &store.LogAppendParams{RunID: att.RunID, AttemptID: att.ID, Seq: seq,
				Lines: []store.LogLine{{At: t0, Stream: "stdout", Text: "x"}, {At: t0, Stream: "stdout", Text: "y"}}})
			require.NoError(t, err)
		}
	}
	prune := func(runID string, n int) int {
		var got int
		require.NoError(t, inTx(t, s, func(tx store.Tx) (err error) {
			got, err = tx.LogPrune(ctx, runID, n)
			return err
		}))
		return got
	}
	require.Equal(t, 4, prune(a.RunID, 4))
	left, err := s.LogList(ctx, &store.LogListParams{RunID: a.RunID, Limit: 100})
	require.NoError(t, err)
	require.Len(t, left, 2, "the oldest lines go first")
	require.Equal(t, int64(2), left[0].Seq)
	require.Equal(t, 2, prune(a.RunID, 4))
	require.Equal(t, 0, prune(a.RunID, 4))
	other, err := s.LogList(ctx, &store.LogListParams{RunID: b.RunID, Limit: 100})
	require.NoError(t, err)
	require.Len(t, other, 6, "another run's lines stay")
}

func testArtifactSweep(t *testing.T, s store.Store) {
	ctx := bg()
	mk := func(id, run string, state store.ArtifactState, created, expires time.Duration) *store.Artifact {
		a := &store.Artifact{ID: id, Tenant: "t1", RunID: run, AttemptID: "att_" + id, Name: "a.txt", Role: "r",
			MaxBytes: 10, CapabilityDigest: "cap_" + id, LeaseDigest: "ld", StorageKey: "t1/" + run + "/att_" + id + "/a.txt",
			State: state, ExpiresAt: t0.Add(expires), CreatedAt: t0.Add(created)}
		require.NoError(t, inTx(t, s, func(tx store.Tx) error { return tx.ArtifactCreate(ctx, a) }))
		return a
	}
	mk("s1", "run_1", store.ArtifactStored, 0, time.Minute)
	mk("s2", "run_1", store.ArtifactStored, time.Second, time.Minute)
	mk("s3", "run_2", store.ArtifactStored, 0, time.Minute)
	mk("p_live", "run_3", store.ArtifactPending, 0, time.Hour)
	mk("p_dead", "run_3", store.ArtifactPending, 0, time.Minute)
	mk("u_new", "run_3", store.ArtifactUploading, 30*time.Minute, time.Hour)
	mk("u_old", "run_3", store.ArtifactUploading, time.Minute, time.Hour)

	var marked []*store.Artifact
	require.NoError(t, inTx(t, s, func(tx store.Tx) (err error) {
		marked, err = tx.ArtifactMarkDeleting(ctx, "run_1", 1)
		return err
	}))
	require.Len(t, marked, 1)
	require.Equal(t, "s1", marked[0].ID)
	require.Equal(t, store.ArtifactDeleting, marked[0].State)
	require.Equal(t, "t1/run_1/att_s1/a.txt", marked[0].StorageKey)
	list, err := s.ArtifactListByRun(ctx, "run_1")
	require.NoError(t, err)
	require.Len(t, list, 1, "a deleting artifact is not listed")
	require.Equal(t, "s2", list[0].ID)

	stale, err := s.ArtifactListStale(ctx, t0.Add(20*time.Minute), at(30*time.Minute), 10)
	require.NoError(t, err)
	var ids []string
	for _, a := range stale {
		ids = append(ids, a.ID)
	}
	require.ElementsMatch(t, []string{"s1", "p_dead", "u_old"}, ids,
		"deleting rows, expired capabilities and uploads begun before the cutoff")
	stale, err = s.ArtifactListStale(ctx, t0.Add(20*time.Minute), at(30*time.Minute), 1)
	require.NoError(t, err)
	require.Len(t, stale, 1, "limit")

	// Source tickets expire out.
	for i, exp := range []time.Duration{time.Minute, 2 * time.Minute, time.Hour} {
		tk := &store.SourceTicket{Digest: "d" + string(rune('0'+i)), Tenant: "t1", RunID: "run_1", AttemptID: "att_1",
			LeaseDigest: "ld", Repo: "code", Commit: "c", ExpiresAt: t0.Add(exp), CreatedAt: t0}
		require.NoError(t, inTx(t, s, func(tx store.Tx) error { return tx.SourceTicketCreate(ctx, tk) }))
	}
	purge := func(d time.Duration, n int) int {
		var got int
		require.NoError(t, inTx(t, s, func(tx store.Tx) (err error) {
			got, err = tx.SourceTicketPurge(ctx, at(d), n)
			return err
		}))
		return got
	}
	require.Equal(t, 0, purge(time.Minute, 10), "not before expires_at")
	require.Equal(t, 1, purge(30*time.Minute, 1), "limit")
	require.Equal(t, 1, purge(30*time.Minute, 10))
	require.Equal(t, 0, purge(30*time.Minute, 10))
	_, err = inTxUse(t, s, "d2", at(time.Minute))
	require.NoError(t, err, "an unexpired ticket stays usable")
}

func inTxUse(t *testing.T, s store.Store, digest string, now *time.Time) (*store.SourceTicket, error) {
	var out *store.SourceTicket
	err := inTx(t, s, func(tx store.Tx) (err error) {
		out, err = tx.SourceTicketUse(bg(), digest, now)
		return err
	})
	return out, err
}

package storetest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/store"
)

func testAuditFilters(t *testing.T, s store.Store) {
	ctx := bg()
	var evs []*store.AuditEvent
	require.NoError(t, s.InTx(ctx, func(tx store.Tx) error {
		for i, actor := range []string{"alice", "bob", "alice", "carol"} {
			e := &store.AuditEvent{Tenant: "t1", At: t0.Add(time.Duration(i) * time.Hour), Actor: actor, Action: "x", Subject: "run_1"}
			if err := tx.AuditAppend(ctx, e); err != nil {
				return err
			}
			evs = append(evs, e)
		}
		return nil
	}))
	byActor, err := s.AuditList(ctx, &store.AuditListParams{Tenant: "t1", Actor: "alice", Limit: 10})
	require.NoError(t, err)
	requireEqual(t, []*store.AuditEvent{evs[0], evs[2]}, byActor)
	since, err := s.AuditList(ctx, &store.AuditListParams{Tenant: "t1", Since: t0.Add(2 * time.Hour), Limit: 10})
	require.NoError(t, err)
	requireEqual(t, []*store.AuditEvent{evs[2], evs[3]}, since)
	none, err := s.AuditList(ctx, &store.AuditListParams{Tenant: "t2", Limit: 10})
	require.NoError(t, err)
	require.Empty(t, none)
}

// testAuditNewestFirst pages the log backward: newest first, each page
// continuing below the last sequence number seen, with the filters still
// applied.
func testAuditNewestFirst(t *testing.T, s store.Store) {
	ctx := bg()
	var evs []*store.AuditEvent
	require.NoError(t, s.InTx(ctx, func(tx store.Tx) error {
		for i, actor := range []string{"alice", "bob", "alice", "carol", "alice"} {
			e := &store.AuditEvent{Tenant: "t1", At: t0.Add(time.Duration(i) * time.Hour), Actor: actor, Action: "x", Subject: "run_1"}
			if err := tx.AuditAppend(ctx, e); err != nil {
				return err
			}
			evs = append(evs, e)
		}
		return tx.AuditAppend(ctx, &store.AuditEvent{Tenant: "t2", At: t0.Add(9 * time.Hour), Actor: "alice", Action: "x", Subject: "run_1"})
	}))
	first, err := s.AuditList(ctx, &store.AuditListParams{Tenant: "t1", Desc: true, Limit: 2})
	require.NoError(t, err)
	requireEqual(t, []*store.AuditEvent{evs[4], evs[3]}, first)
	older, err := s.AuditList(ctx, &store.AuditListParams{Tenant: "t1", Desc: true, Before: first[1].Seq, Limit: 2})
	require.NoError(t, err)
	requireEqual(t, []*store.AuditEvent{evs[2], evs[1]}, older)
	last, err := s.AuditList(ctx, &store.AuditListParams{Tenant: "t1", Desc: true, Before: older[1].Seq, Limit: 2})
	require.NoError(t, err)
	requireEqual(t, []*store.AuditEvent{evs[0]}, last)

	byActor, err := s.AuditList(ctx, &store.AuditListParams{Tenant: "t1", Actor: "alice", Desc: true, Before: evs[4].Seq, Limit: 10})
	require.NoError(t, err)
	requireEqual(t, []*store.AuditEvent{evs[2], evs[0]}, byActor)
	since, err := s.AuditList(ctx, &store.AuditListParams{Tenant: "t1", Since: t0.Add(2 * time.Hour), Desc: true, Limit: 10})
	require.NoError(t, err)
	requireEqual(t, []*store.AuditEvent{evs[4], evs[3], evs[2]}, since)
	window, err := s.AuditList(ctx, &store.AuditListParams{Tenant: "t1", After: evs[0].Seq, Before: evs[3].Seq, Limit: 10})
	require.NoError(t, err)
	requireEqual(t, []*store.AuditEvent{evs[1], evs[2]}, window) // Before bounds a forward page too
}

func testAuditChain(t *testing.T, s store.Store) {
	ctx := bg()
	_, err := s.AuditChainHead(ctx)
	require.ErrorIs(t, err, store.ErrNotFound)
	m0, err := s.AuditHorizon(ctx, 0)
	require.NoError(t, err)
	require.Zero(t, m0.Seq, "no event drawn yet")

	var evs []*store.AuditEvent
	require.NoError(t, s.InTx(ctx, func(tx store.Tx) error {
		for _, tenant := range []string{"t1", "t2", "t1"} {
			e := &store.AuditEvent{Tenant: tenant, At: t0, Actor: "a", Action: "x", Subject: "s"}
			if err := tx.AuditAppend(ctx, e); err != nil {
				return err
			}
			evs = append(evs, e)
		}
		return nil
	}))
	m, err := s.AuditHorizon(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, evs[2].Seq, m.Seq)
	// On PostgreSQL the horizon is cluster-wide: other tests' transactions
	// hold it back for a moment, never for long.
	require.Eventually(t, func() bool {
		ok, err := s.AuditHorizonReached(ctx, m)
		return err == nil && ok
	}, 20*time.Second, 5*time.Millisecond, "the transactions that drew the numbers have ended")

	scan, err := s.AuditScan(ctx, &store.AuditScanParams{UpTo: evs[1].Seq, Limit: 10})
	require.NoError(t, err)
	requireEqual(t, evs[:2], scan)

	links := []store.AuditSeal{{Seq: evs[0].Seq, PrevHash: "p0", Hash: "h0"}, {Seq: evs[1].Seq, PrevHash: "h0", Hash: "h1"}}
	require.NoError(t, s.InTx(ctx, func(tx store.Tx) error {
		if err := tx.AuditSealLock(ctx); err != nil {
			return err
		}
		return tx.AuditSealAppend(ctx, links)
	}))
	err = s.InTx(ctx, func(tx store.Tx) error {
		return tx.AuditSealAppend(ctx, []store.AuditSeal{{Seq: evs[1].Seq, PrevHash: "h0", Hash: "fork"}})
	})
	require.ErrorIs(t, err, store.ErrAlreadyExists, "one link per event: no fork")
	head, err := s.AuditChainHead(ctx)
	require.NoError(t, err)
	require.Equal(t, evs[1].Seq, head.Seq)
	require.Equal(t, "h1", head.Hash)
	require.False(t, head.SealedAt.IsZero())
	got, err := s.AuditChainList(ctx, evs[0].Seq, 10)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, "h1", got[0].Hash)

	listed, err := s.AuditList(ctx, &store.AuditListParams{Tenant: "t1", Limit: 10})
	require.NoError(t, err)
	require.Len(t, listed, 2)
	require.Equal(t, "h0", listed[0].Hash, "listed events carry their link")
	require.Equal(t, "p0", listed[0].PrevHash)
	require.Empty(t, listed[1].Hash, "not sealed yet")
}

// testAuditInTx: events appended in a transaction, in several tenants'
// scopes as a group transaction does, are numbered in the order they were
// appended, are visible to a read of the log later in the same
// transaction, and keep the times they were given; an event without one
// gets the store's clock. A rolled-back transaction leaves none.
func testAuditInTx(t *testing.T, s store.Store) {
	ctx := context.Background()
	scoped := func(tenant string) context.Context { return store.WithTenant(ctx, tenant) }
	var evs []*store.AuditEvent
	require.NoError(t, s.InTx(bg(), func(tx store.Tx) error {
		for i, tenant := range []string{"ta", "tb", "tb", "ta"} {
			e := &store.AuditEvent{Tenant: tenant, Actor: "a", Action: "in.tx", Subject: "s"}
			if i != 2 {
				e.At = t0.Add(time.Duration(i) * time.Second)
			}
			if i == 1 {
				e.Details = []byte(`{"n": 1}`)
			}
			if err := tx.AuditAppend(scoped(tenant), e); err != nil {
				return err
			}
			evs = append(evs, e)
		}
		seen, err := tx.AuditList(scoped("tb"), &store.AuditListParams{Tenant: "tb", Limit: 10})
		if err != nil {
			return err
		}
		require.Len(t, seen, 2, "the transaction's own events, before its commit")
		return nil
	}))
	for i := 1; i < len(evs); i++ {
		require.Greater(t, evs[i].Seq, evs[i-1].Seq, "numbered in the order appended")
	}
	got, err := s.AuditList(bg(), &store.AuditListParams{Tenant: "ta", Limit: 10})
	require.NoError(t, err)
	require.Len(t, got, 2)
	require.True(t, got[0].At.Equal(t0) && got[1].At.Equal(t0.Add(3*time.Second)), "given times kept: %v %v", got[0].At, got[1].At)
	tb, err := s.AuditList(bg(), &store.AuditListParams{Tenant: "tb", Limit: 10})
	require.NoError(t, err)
	require.Len(t, tb, 2)
	require.JSONEq(t, `{"n": 1}`, string(tb[0].Details))
	dbNow, err := s.Now(bg(), nil)
	require.NoError(t, err)
	require.WithinDuration(t, dbNow, tb[1].At, time.Hour, "no time given: the store's clock")

	boom := errors.New("roll back")
	err = s.InTx(bg(), func(tx store.Tx) error {
		if err := tx.AuditAppend(scoped("tc"), &store.AuditEvent{Tenant: "tc", Actor: "a", Action: "x", Subject: "s"}); err != nil {
			return err
		}
		return boom
	})
	require.ErrorIs(t, err, boom)
	none, err := s.AuditList(bg(), &store.AuditListParams{Tenant: "tc", Limit: 10})
	require.NoError(t, err)
	require.Empty(t, none)
}

// testAuditReadsConcurrent reads the audit log from many goroutines outside
// a transaction, as the sealer and a verification do at once: under the
// race detector it fails if such a read writes state the store shares
// between callers.
func testAuditReadsConcurrent(t *testing.T, s store.Store) {
	ctx := bg()
	require.NoError(t, s.InTx(ctx, func(tx store.Tx) error {
		return tx.AuditAppend(ctx, &store.AuditEvent{Tenant: "t1", At: t0, Actor: "alice", Action: "x", Subject: "run_1"})
	}))
	var wg sync.WaitGroup
	errs := make(chan error, 24)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 3 {
				var err error
				switch i % 3 {
				case 0:
					_, err = s.AuditList(ctx, &store.AuditListParams{Tenant: "t1", Limit: 10})
				case 1:
					_, err = s.AuditScan(ctx, &store.AuditScanParams{Limit: 10})
				default:
					_, err = s.AuditHorizon(ctx, 0)
				}
				if err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

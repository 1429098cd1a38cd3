package groupcommit

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
	"github.com/jobplane/jobplane/internal/store/testdb"
)

// TestStoreAuthWrites: where one group runs at a time (SQLite), a signed
// request's nonce and its runner's last-seen time go into group
// transactions; elsewhere they are the store's own single statements.
// Either way a known nonce is refused.
func TestStoreAuthWrites(t *testing.T) {
	testdb.Each(t, func(t *testing.T, st store.Store) {
		ctx := context.Background()
		g := New(st, Config{Refusal: protocol.IsRefusal})
		exp := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
		require.NoError(t, g.NonceInsert(ctx, "rnr_sa", "n1", exp))
		require.ErrorIs(t, g.NonceInsert(ctx, "rnr_sa", "n1", exp), store.ErrAlreadyExists)
		tn, err := st.TenantEnsure(ctx, "authwrites", nil)
		require.NoError(t, err)
		rn := &store.Runner{ID: "rnr_sa", Tenant: tn.ID, Pool: "p", Name: "r", Labels: []string{}, PublicKey: "k",
			Status: store.RunnerActive, AllowedRepos: []string{}, CreatedAt: time.Now()}
		require.NoError(t, st.InTx(ctx, func(tx store.Tx) error { return tx.RunnerCreate(ctx, rn) }))
		require.NoError(t, g.RunnerTouch(store.WithTenant(ctx, tn.ID), rn.ID, nil))
		stats := g.Stats()
		if st.SingleWriter() {
			require.Equal(t, int64(3), stats.Transactions, "two nonces and a touch, each in a group")
		} else {
			require.Zero(t, stats.Transactions, "nonces and touches are the store's own statements")
		}
	})
}

// TestStoreBatchOne: with a batch of one nothing is grouped, and a pending
// nonce still goes in the call's own transaction, before its body.
func TestStoreBatchOne(t *testing.T) {
	testdb.Each(t, func(t *testing.T, st store.Store) {
		ctx := context.Background()
		g := New(st, Config{Batch: 1})
		exp := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
		p := store.NewPendingNonce(store.Nonce{RunnerID: "rnr_b1", Nonce: "n", ExpiresAt: exp})
		ran := 0
		require.NoError(t, g.InTxNonce(ctx, p, func(store.Tx) error { ran++; return nil }))
		require.True(t, p.Recorded())
		again := store.NewPendingNonce(p.Nonce)
		require.ErrorIs(t, g.InTxNonce(ctx, again, func(store.Tx) error { ran++; return nil }), store.ErrReplay)
		require.Equal(t, 1, ran)
		require.Zero(t, g.Stats().Transactions)
	})
}

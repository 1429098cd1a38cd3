package storetest

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/store"
)

func testCatalogs(t *testing.T, s store.Store) {
	ctx := bg()
	const a, b = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
	good := &store.Catalog{Tenant: "t1", Channel: "prod", Branch: "main", Commit: a, Status: store.CatalogActive,
		Author: "ann <ann@x>", CommittedAt: t0, LoadedAt: t0.Add(time.Second)}
	require.NoError(t, s.CatalogInsert(ctx, good))
	got, err := s.CatalogGet(ctx, "t1", "prod", "main", a)
	require.NoError(t, err)
	requireEqual(t, good, got)
	require.ErrorIs(t, s.CatalogInsert(ctx, &store.Catalog{Tenant: "t1", Channel: "prod", Branch: "main", Commit: a, Status: store.CatalogRejected, CommittedAt: t0}),
		store.ErrAlreadyExists, "one record per commit of a branch")

	bad := &store.Catalog{Tenant: "t1", Channel: "prod", Branch: "main", Commit: b, Status: store.CatalogRejected,
		Errors: json.RawMessage(`[{"file":"jobs/x.yaml","line":4,"column":12,"message":"invalid"}]`), Author: "bob", CommittedAt: t0.Add(time.Minute)}
	require.NoError(t, s.CatalogInsert(ctx, bad))
	require.False(t, bad.LoadedAt.IsZero(), "a zero LoadedAt is now")
	got, err = s.CatalogGet(ctx, "t1", "prod", "main", b)
	require.NoError(t, err)
	require.JSONEq(t, string(bad.Errors), string(got.Errors))
	_, err = s.CatalogGet(ctx, "t2", "prod", "main", b)
	require.ErrorIs(t, err, store.ErrNotFound, "per tenant")

	// Another branch of a pattern channel, and another tenant.
	require.NoError(t, s.CatalogInsert(ctx, &store.Catalog{Tenant: "t1", Channel: "sandbox", Branch: "feature/x", Commit: b, Status: store.CatalogActive, CommittedAt: t0, LoadedAt: t0}))
	require.NoError(t, s.CatalogInsert(ctx, &store.Catalog{Tenant: "t2", Channel: "prod", Branch: "main", Commit: b, Status: store.CatalogActive, CommittedAt: t0, LoadedAt: t0}))

	active, err := s.CatalogList(ctx, &store.CatalogListParams{Tenant: "t1", Status: store.CatalogActive})
	require.NoError(t, err)
	require.Len(t, active, 2)
	require.Equal(t, a, active[0].Commit, "newest loaded first")
	rejected, err := s.CatalogList(ctx, &store.CatalogListParams{Tenant: "t1", Channel: "prod", Status: store.CatalogRejected, Limit: 5})
	require.NoError(t, err)
	require.Len(t, rejected, 1)
	all, err := s.CatalogList(ctx, &store.CatalogListParams{Limit: 2})
	require.NoError(t, err)
	require.Len(t, all, 2, "limit")

	// Activating another commit supersedes the old one on that branch only.
	require.NoError(t, s.InTx(ctx, func(tx store.Tx) error {
		c := &store.Catalog{Tenant: "t1", Channel: "prod", Branch: "main", Commit: b, Status: store.CatalogActive, LoadedAt: t0.Add(time.Hour)}
		if err := tx.CatalogSetStatus(ctx, c); err != nil {
			return err
		}
		require.Equal(t, t0.Add(time.Hour), c.LoadedAt)
		n, err := tx.CatalogSupersede(ctx, "t1", "prod", "main", b)
		require.Equal(t, 1, n)
		return err
	}))
	got, err = s.CatalogGet(ctx, "t1", "prod", "main", a)
	require.NoError(t, err)
	require.Equal(t, store.CatalogSuperseded, got.Status)
	active, err = s.CatalogList(ctx, &store.CatalogListParams{Tenant: "t1", Status: store.CatalogActive})
	require.NoError(t, err)
	require.Len(t, active, 2)
	n, err := s.CatalogSupersede(ctx, "t1", "prod", "main", b)
	require.NoError(t, err)
	require.Zero(t, n)
	require.ErrorIs(t, s.CatalogSetStatus(ctx, &store.Catalog{Tenant: "t1", Channel: "prod", Branch: "main", Commit: "c", Status: store.CatalogActive}), store.ErrNotFound)
}

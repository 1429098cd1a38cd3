package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/store"
)

func testApprovals(t *testing.T, s store.Store) {
	ctx := bg()
	f := newFixture(t, s)
	r := f.run(t, func(r *store.Run) { r.State = store.RunPendingApproval; r.CreatedAt = t0 })
	a1 := &store.Approval{RunID: r.ID, Approver: "carol", Verdict: "approved", Comment: "ok", At: t0.Add(time.Second)}
	require.NoError(t, s.ApprovalCreate(ctx, a1))
	a2 := &store.Approval{RunID: r.ID, Approver: "dave", Verdict: "rejected", At: t0.Add(2 * time.Second)}
	require.NoError(t, s.ApprovalCreate(ctx, a2))
	require.ErrorIs(t, s.ApprovalCreate(ctx, &store.Approval{RunID: r.ID, Approver: "carol", Verdict: "rejected"}), store.ErrAlreadyExists)
	got, err := s.ApprovalListByRun(ctx, r.ID)
	require.NoError(t, err)
	requireEqual(t, []*store.Approval{a1, a2}, got)

	other := f.run(t, func(r *store.Run) { r.State = store.RunQueued; r.CreatedAt = t0 })
	_ = other
	pending, err := s.RunListPendingApproval(ctx, t0.Add(time.Minute), 10)
	require.NoError(t, err)
	require.Len(t, pending, 1)
	require.Equal(t, r.ID, pending[0].ID)
	pending, err = s.RunListPendingApproval(ctx, t0, 10)
	require.NoError(t, err)
	require.Empty(t, pending, "created_at must be strictly before")
}

func testSecrets(t *testing.T, s store.Store) {
	ctx := bg()
	_, err := s.SecretGet(ctx, "t1", "db", "prod")
	require.ErrorIs(t, err, store.ErrNotFound)
	sec := &store.Secret{Tenant: "t1", Name: "db", Channel: "prod", Ciphertext: []byte{1, 2, 3}, UpdatedAt: t0}
	require.NoError(t, s.SecretPut(ctx, sec))
	got, err := s.SecretGet(ctx, "t1", "db", "prod")
	require.NoError(t, err)
	requireEqual(t, sec, got)
	sec2 := &store.Secret{Tenant: "t1", Name: "db", Channel: "prod", Ciphertext: []byte{9}, UpdatedAt: t0.Add(time.Second)}
	require.NoError(t, s.SecretPut(ctx, sec2), "put replaces")
	got, err = s.SecretGet(ctx, "t1", "db", "prod")
	require.NoError(t, err)
	require.Equal(t, []byte{9}, got.Ciphertext)
	_, err = s.SecretGet(ctx, "t2", "db", "prod")
	require.ErrorIs(t, err, store.ErrNotFound, "secrets are per tenant")
	_, err = s.SecretGet(ctx, "t1", "db", "")
	require.ErrorIs(t, err, store.ErrNotFound, "and per channel")
}

func testSigningKeys(t *testing.T, s store.Store) {
	ctx := bg()
	k1 := &store.SigningKey{KID: "k1", Sealed: []byte("sealed-1"), CreatedAt: t0}
	k2 := &store.SigningKey{KID: "k2", Sealed: []byte("sealed-2"), CreatedAt: t0.Add(time.Hour)}
	require.NoError(t, s.SigningKeyCreate(ctx, k1))
	require.NoError(t, s.SigningKeyCreate(ctx, k2))
	require.ErrorIs(t, s.SigningKeyCreate(ctx, &store.SigningKey{KID: "k1", Sealed: []byte("x")}), store.ErrAlreadyExists)
	require.NoError(t, s.SigningKeyRetire(ctx, "k1", t0.Add(time.Hour)))
	require.NoError(t, s.SigningKeyRetire(ctx, "k1", t0.Add(2*time.Hour)), "retiring twice keeps the first time")
	ks, err := s.SigningKeyList(ctx)
	require.NoError(t, err)
	require.Len(t, ks, 2)
	require.Equal(t, "k1", ks[0].KID)
	require.Equal(t, t0.Add(time.Hour), *ks[0].RetiredAt)
	require.Nil(t, ks[1].RetiredAt)
	require.NoError(t, s.SigningKeyDelete(ctx, "k1"))
	require.ErrorIs(t, s.SigningKeyDelete(ctx, "k1"), store.ErrNotFound)
	ks, err = s.SigningKeyList(ctx)
	require.NoError(t, err)
	require.Len(t, ks, 1)
}

func testCredentials(t *testing.T, s store.Store) {
	ctx := bg()
	f := newFixture(t, s)
	live := f.attempt(t, nil)
	_, err := claim(s, f.tenant, "default", nil, "rnr_1", at(0))
	require.NoError(t, err)
	ended := f.attempt(t, func(a *store.Attempt) { a.State = store.AttemptSucceeded; a.NotBefore = t0.Add(time.Hour) })
	c1 := &store.Credential{Tenant: f.tenant, RunID: live.RunID, AttemptID: live.ID, Connector: "wh", Kind: "postgres", Ref: "jp_a", CreatedAt: t0}
	c2 := &store.Credential{Tenant: f.tenant, RunID: ended.RunID, AttemptID: ended.ID, Connector: "wh", Kind: "postgres", Ref: "jp_b", CreatedAt: t0.Add(time.Second)}
	require.NoError(t, s.CredentialCreate(ctx, c1))
	require.NoError(t, s.CredentialCreate(ctx, c2))
	got, err := s.CredentialListToRevoke(ctx, at(time.Second), 10)
	require.NoError(t, err)
	require.Len(t, got, 1, "only the ended attempt's credential")
	require.Equal(t, c2.ID, got[0].ID)
	// Once the live attempt's lease runs out, its credential is due too.
	got, err = s.CredentialListToRevoke(ctx, at(time.Hour), 10)
	require.NoError(t, err)
	require.Len(t, got, 2)
	// A credential whose revocation keeps failing moves behind the others.
	require.NoError(t, s.CredentialMarkFailed(ctx, c1.ID))
	got, err = s.CredentialListToRevoke(ctx, at(time.Hour), 10)
	require.NoError(t, err)
	require.Equal(t, []string{c2.ID, c1.ID}, []string{got[0].ID, got[1].ID})
	require.Equal(t, 1, got[1].Failures)
	got, err = s.CredentialListToRevoke(ctx, at(time.Hour), 1)
	require.NoError(t, err)
	require.Equal(t, c2.ID, got[0].ID, "a failing credential does not fill a batch")
	require.NoError(t, s.CredentialMarkRevoked(ctx, c2.ID, at(time.Second)))
	got, err = s.CredentialListToRevoke(ctx, at(time.Hour), 10)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, c1.ID, got[0].ID)
}

package storetest

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/store"
)

func inTx(t *testing.T, s store.Store, fn func(tx store.Tx) error) error {
	t.Helper()
	return s.InTx(bg(), fn)
}

func testArtifacts(t *testing.T, s store.Store) {
	ctx := bg()
	mk := func(id, attempt, name, capDigest string) *store.Artifact {
		return &store.Artifact{ID: id, Tenant: "t1", RunID: "run_1", AttemptID: attempt, Name: name, Role: "report",
			MaxBytes: 100, ExpectedSize: 5, ExpectedSHA256: "ab", CapabilityDigest: capDigest, LeaseDigest: "ld",
			StorageKey: "t1/run_1/" + attempt + "/" + name, State: store.ArtifactPending, ExpiresAt: t0.Add(time.Minute), CreatedAt: t0}
	}
	a := mk("art_1", "att_1", "report.json", "cap1")
	require.NoError(t, inTx(t, s, func(tx store.Tx) error { return tx.ArtifactCreate(ctx, a) }))
	got, err := s.ArtifactGetByID(ctx, "art_1")
	require.NoError(t, err)
	requireEqual(t, a, got)
	require.ErrorIs(t, inTx(t, s, func(tx store.Tx) error { return tx.ArtifactCreate(ctx, mk("art_x", "att_1", "x", "cap1")) }),
		store.ErrAlreadyExists, "capability digests are unique")

	// Expired capabilities cannot begin; live ones begin once.
	require.ErrorIs(t, inTx(t, s, func(tx store.Tx) error {
		_, err := tx.ArtifactBeginUpload(ctx, "cap1", at(time.Minute))
		return err
	}), store.ErrNotFound, "expired at expires_at")
	var up *store.Artifact
	require.NoError(t, inTx(t, s, func(tx store.Tx) (err error) {
		up, err = tx.ArtifactBeginUpload(ctx, "cap1", at(time.Second))
		return err
	}))
	require.Equal(t, store.ArtifactUploading, up.State)
	require.ErrorIs(t, inTx(t, s, func(tx store.Tx) error {
		_, err := tx.ArtifactBeginUpload(ctx, "cap1", at(time.Second))
		return err
	}), store.ErrNotFound, "single use")

	list, err := s.ArtifactListByRun(ctx, "run_1")
	require.NoError(t, err)
	require.Empty(t, list, "only stored artifacts are listed")
	up.Size, up.SHA256, up.StoredAt = 5, "abcd", at(2*time.Second)
	require.NoError(t, inTx(t, s, func(tx store.Tx) error { return tx.ArtifactMarkStored(ctx, up) }))
	require.ErrorIs(t, inTx(t, s, func(tx store.Tx) error { return tx.ArtifactMarkStored(ctx, up) }), store.ErrNotFound, "stored once")
	list, err = s.ArtifactListByRun(ctx, "run_1")
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Equal(t, int64(5), list[0].Size)
	require.Equal(t, "abcd", list[0].SHA256)
	require.Equal(t, t0.Add(2*time.Second), *list[0].StoredAt)

	// A second artifact of the same name in the same attempt cannot be
	// stored; in another attempt it can.
	for _, c := range []struct {
		id, attempt string
		want        error
	}{{"art_2", "att_1", store.ErrAlreadyExists}, {"art_3", "att_2", nil}} {
		b := mk(c.id, c.attempt, "report.json", "cap_"+c.id)
		require.NoError(t, inTx(t, s, func(tx store.Tx) error { return tx.ArtifactCreate(ctx, b) }))
		require.NoError(t, inTx(t, s, func(tx store.Tx) error {
			_, err := tx.ArtifactBeginUpload(ctx, b.CapabilityDigest, at(0))
			return err
		}))
		err := inTx(t, s, func(tx store.Tx) error { return tx.ArtifactMarkStored(ctx, b) })
		if c.want == nil {
			require.NoError(t, err)
		} else {
			require.ErrorIs(t, err, c.want)
		}
	}
	list, err = s.ArtifactListByRun(ctx, "run_1")
	require.NoError(t, err)
	require.Len(t, list, 2)
	require.Equal(t, "att_1", list[0].AttemptID, "by attempt")

	require.NoError(t, inTx(t, s, func(tx store.Tx) error { return tx.ArtifactDelete(ctx, "art_2") }))
	require.ErrorIs(t, inTx(t, s, func(tx store.Tx) error { return tx.ArtifactDelete(ctx, "art_2") }), store.ErrNotFound)
	_, err = s.ArtifactGetByID(ctx, "art_2")
	require.ErrorIs(t, err, store.ErrNotFound)

	// Of concurrent uses of one capability exactly one wins.
	c := mk("art_c", "att_3", "c.txt", "capc")
	require.NoError(t, inTx(t, s, func(tx store.Tx) error { return tx.ArtifactCreate(ctx, c) }))
	requireOneWinner(t, func() error {
		return inTx(t, s, func(tx store.Tx) error {
			_, err := tx.ArtifactBeginUpload(ctx, "capc", at(0))
			return err
		})
	})
}

func testSourceTickets(t *testing.T, s store.Store) {
	ctx := bg()
	tk := &store.SourceTicket{Digest: "d1", Tenant: "t1", RunID: "run_1", AttemptID: "att_1", LeaseDigest: "ld",
		Repo: "code", Commit: "0123456789012345678901234567890123456789", ExpiresAt: t0.Add(time.Minute), CreatedAt: t0}
	require.NoError(t, inTx(t, s, func(tx store.Tx) error { return tx.SourceTicketCreate(ctx, tk) }))
	require.ErrorIs(t, inTx(t, s, func(tx store.Tx) error { return tx.SourceTicketCreate(ctx, tk) }), store.ErrAlreadyExists)
	use := func(d string, now *time.Time) (*store.SourceTicket, error) {
		var out *store.SourceTicket
		err := inTx(t, s, func(tx store.Tx) (err error) {
			out, err = tx.SourceTicketUse(ctx, d, now)
			return err
		})
		return out, err
	}
	_, err := use("d1", at(time.Minute))
	require.ErrorIs(t, err, store.ErrNotFound, "expired")
	_, err = use("nope", at(0))
	require.ErrorIs(t, err, store.ErrNotFound, "unknown")
	got, err := use("d1", at(time.Second))
	require.NoError(t, err)
	require.Equal(t, tk.Commit, got.Commit)
	require.Equal(t, "att_1", got.AttemptID)
	require.NotNil(t, got.UsedAt)
	require.Equal(t, t0.Add(time.Second), *got.UsedAt)
	_, err = use("d1", at(time.Second))
	require.ErrorIs(t, err, store.ErrNotFound, "single use")

	// RELIABILITY ST1 at the store: of 50 concurrent redemptions one wins.
	tk2 := *tk
	tk2.Digest = "d2"
	require.NoError(t, inTx(t, s, func(tx store.Tx) error { return tx.SourceTicketCreate(ctx, &tk2) }))
	requireOneWinner(t, func() error {
		_, err := use("d2", at(0))
		return err
	})
}

func requireOneWinner(t *testing.T, fn func() error) {
	t.Helper()
	var wins atomic.Int32
	var wg sync.WaitGroup
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := fn()
			switch {
			case err == nil:
				wins.Add(1)
			case !errors.Is(err, store.ErrNotFound):
				t.Errorf("use: %v", err)
			}
		}()
	}
	wg.Wait()
	require.Equal(t, int32(1), wins.Load())
}

package storetest

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/store"
)

// testLogArchives: an attempt's archive row round-trips (blocks included),
// is listed by its run and is unique per attempt; the moved lines go by
// attempt and up to the archived ID only; a deleting archive is no longer
// listed.
func testLogArchives(t *testing.T, s store.Store) {
	ctx := bg()
	f := newFixture(t, s)
	a := f.attempt(t, nil)
	for seq := range int64(3) {
		_, err := s.LogAppend(ctx, &store.LogAppendParams{RunID: a.RunID, AttemptID: a.ID, Seq: seq,
			Lines: []store.LogLine{{At: t0, Stream: "stdout", Text: "x"}, {At: t0, Stream: "stderr", Text: "y"}}})
		require.NoError(t, err)
	}
	ls, err := s.LogListAttempt(ctx, a.RunID, a.ID, 0, 4)
	require.NoError(t, err)
	require.Len(t, ls, 4)
	rest, err := s.LogListAttempt(ctx, a.RunID, a.ID, ls[3].ID, 10)
	require.NoError(t, err)
	require.Len(t, rest, 2)
	none, err := s.LogListAttempt(ctx, a.RunID, "att_other", 0, 10)
	require.NoError(t, err)
	require.Empty(t, none)

	arch := &store.LogArchive{AttemptID: a.ID, RunID: a.RunID, Tenant: f.tenant, Key: ".logs/k", FirstID: ls[0].ID, LastID: ls[3].ID,
		Lines: 4, Size: 99, SHA256: "ab", State: store.LogArchiveMoving, CreatedAt: t0,
		Blocks: []store.LogBlock{{FirstID: ls[0].ID, Offset: 0, Lines: 2, Raw: 40}, {FirstID: ls[2].ID, Offset: 50, Lines: 2, Raw: 41}}}
	require.NoError(t, inTx(t, s, func(tx store.Tx) error { return tx.LogArchiveCreate(ctx, arch) }))
	require.ErrorIs(t, inTx(t, s, func(tx store.Tx) error { return tx.LogArchiveCreate(ctx, arch) }), store.ErrAlreadyExists)
	got, err := s.LogArchiveList(ctx, a.RunID)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, arch, got[0])

	var n int
	require.NoError(t, inTx(t, s, func(tx store.Tx) (err error) {
		n, err = tx.LogDeleteArchived(ctx, a.RunID, a.ID, arch.LastID, 3)
		return err
	}))
	require.Equal(t, 3, n)
	require.NoError(t, inTx(t, s, func(tx store.Tx) (err error) {
		n, err = tx.LogDeleteArchived(ctx, a.RunID, a.ID, arch.LastID, 3)
		return err
	}))
	require.Equal(t, 1, n, "only the archived lines go")
	left, err := s.LogList(ctx, &store.LogListParams{RunID: a.RunID, Limit: 10})
	require.NoError(t, err)
	require.Equal(t, rest, left)

	require.NoError(t, inTx(t, s, func(tx store.Tx) error { return tx.LogArchiveSetState(ctx, a.ID, store.LogArchiveStored) }))
	require.ErrorIs(t, inTx(t, s, func(tx store.Tx) error { return tx.LogArchiveSetState(ctx, "att_none", store.LogArchiveStored) }), store.ErrNotFound)
	var marked []*store.LogArchive
	require.NoError(t, inTx(t, s, func(tx store.Tx) (err error) {
		marked, err = tx.LogArchiveMarkDeleting(ctx, a.RunID)
		return err
	}))
	require.Len(t, marked, 1)
	require.Equal(t, store.LogArchiveDeleting, marked[0].State)
	got, err = s.LogArchiveList(ctx, a.RunID)
	require.NoError(t, err)
	require.Empty(t, got, "a deleting archive is not served")
	require.NoError(t, inTx(t, s, func(tx store.Tx) error { return tx.LogArchiveDelete(ctx, a.ID) }))
	require.NoError(t, inTx(t, s, func(tx store.Tx) (err error) {
		marked, err = tx.LogArchiveMarkDeleting(ctx, a.RunID)
		return err
	}))
	require.Empty(t, marked)
}

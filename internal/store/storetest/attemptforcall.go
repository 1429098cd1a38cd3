package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

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

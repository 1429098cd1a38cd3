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

func testSchedules(t *testing.T, s store.Store) {
	ctx := bg()
	const commit = "cccccccccccccccccccccccccccccccccccccccc"
	first := &store.Schedule{Tenant: "t1", Channel: "prod", Job: "nightly", Cron: "0 2 * * *", TZ: "UTC", Commit: commit,
		NextFireAt: t0.Add(2 * time.Hour), UpdatedAt: t0}
	require.NoError(t, s.ScheduleInsert(ctx, first))
	got, err := s.ScheduleGet(ctx, "t1", "prod", "nightly")
	require.NoError(t, err)
	requireEqual(t, first, got)
	require.Nil(t, got.LastWindow, "never fired")
	require.ErrorIs(t, s.ScheduleInsert(ctx, &store.Schedule{Tenant: "t1", Channel: "prod", Job: "nightly", NextFireAt: t0}),
		store.ErrAlreadyExists, "one row per tenant, channel and job")
	_, err = s.ScheduleGet(ctx, "t2", "prod", "nightly")
	require.ErrorIs(t, err, store.ErrNotFound, "per tenant")

	// A claim of a stale fire time matches nothing.
	w := t0.Add(2 * time.Hour)
	adv := *first
	adv.NextFireAt, adv.LastWindow, adv.UpdatedAt = t0.Add(26*time.Hour), &w, time.Time{}
	require.ErrorIs(t, s.ScheduleAdvance(ctx, &adv, t0), store.ErrNotFound)
	require.NoError(t, s.ScheduleAdvance(ctx, &adv, first.NextFireAt))
	require.False(t, adv.UpdatedAt.IsZero(), "a zero UpdatedAt is now")
	got, err = s.ScheduleGet(ctx, "t1", "prod", "nightly")
	require.NoError(t, err)
	require.Equal(t, t0.Add(26*time.Hour), got.NextFireAt)
	require.NotNil(t, got.LastWindow)
	require.Equal(t, w, *got.LastWindow)
	require.ErrorIs(t, s.ScheduleAdvance(ctx, &adv, first.NextFireAt), store.ErrNotFound, "claimed once")

	require.NoError(t, s.ScheduleInsert(ctx, &store.Schedule{Tenant: "t1", Channel: "dev", Job: "zeta", Cron: "* * * * *", TZ: "UTC", NextFireAt: t0}))
	require.NoError(t, s.ScheduleInsert(ctx, &store.Schedule{Tenant: "t2", Channel: "prod", Job: "nightly", Cron: "* * * * *", TZ: "UTC", NextFireAt: t0}))
	list, err := s.ScheduleList(ctx, "t1")
	require.NoError(t, err)
	require.Len(t, list, 2)
	require.Equal(t, "dev", list[0].Channel, "by channel, then job")
	require.Equal(t, "nightly", list[1].Job)

	require.NoError(t, s.ScheduleDelete(ctx, "t1", "dev", "zeta"))
	require.ErrorIs(t, s.ScheduleDelete(ctx, "t1", "dev", "zeta"), store.ErrNotFound)
	list, err = s.ScheduleList(ctx, "t1")
	require.NoError(t, err)
	require.Len(t, list, 1)

	// Of concurrent claims of one fire time exactly one wins.
	var wins atomic.Int32
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := adv
			c.NextFireAt = t0.Add(50*time.Hour + time.Duration(i)*time.Minute)
			c.UpdatedAt = time.Time{}
			err := s.ScheduleAdvance(ctx, &c, t0.Add(26*time.Hour))
			if err == nil {
				wins.Add(1)
			} else if !errors.Is(err, store.ErrNotFound) {
				t.Errorf("claim: %v", err)
			}
		}()
	}
	wg.Wait()
	require.Equal(t, int32(1), wins.Load())
}

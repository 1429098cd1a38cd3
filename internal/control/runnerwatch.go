package control

import (
	"context"
	"errors"
	"time"

	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/runnerwatch"
	"github.com/jobplane/jobplane/internal/store"
)

// A queued run's Check Run says which runner it waits for ("none of the 2
// online runners is eligible"), and that text depends on runners, not on
// the run: it goes stale when the only eligible runner goes offline, or
// when one registers or comes back. The run service therefore watches
// runners' availability and re-states the Check Runs of the queued runs of
// the tenant and pool whose runners changed — only on a change: a runner
// first seen by this server or back after RunnerOnlineWindow of silence,
// one that fell silent for that long, one disabled or enabled, or one whose
// executor states other capabilities. A heartbeat of a runner already known
// online costs a map lookup, nothing more.

// RunnerWatchInterval is how often RefreshRunnerWaits should run: how late,
// at most, a queued run's Check Run follows a runner going offline (after
// its RunnerOnlineWindow of silence) or coming online.
const RunnerWatchInterval = 10 * time.Second

// runnerWaitRefreshLimit bounds the queued runs re-stated per changed
// tenant and pool in one pass, newest first: a tenant with more queued runs
// than that has its older ones' Check Runs follow at their next change.
const runnerWaitRefreshLimit = 200

// runnerSeen notes a runner's signed call (claim or heartbeat).
func (s *Service) runnerSeen(rn *store.Runner) {
	if rn == nil || rn.Pool == store.ActionsPool || s.tenants == nil {
		return
	}
	now := s.clock.Now()
	if s.watch.Saw(rn, rn.LastSeenAt, now) {
		// The cached list may hold the runner's last-seen time from
		// before its silence: the re-statement must count it online.
		s.runnerLists.Invalidate()
	}
}

// RefreshRunnerWaits notices the runners gone silent and re-states the
// Check Runs of the queued runs of every tenant and pool whose runners
// changed since the last pass; it returns how many runs it re-stated. Call
// it every RunnerWatchInterval.
func (s *Service) RefreshRunnerWaits(ctx context.Context) (int, error) {
	if s.tenants == nil {
		return 0, nil
	}
	now := s.clock.Now()
	var errs []error
	for _, id := range s.watch.Silent(now) {
		rn, err := s.store.RunnerGetByID(ctx, id, false)
		if errors.Is(err, store.ErrNotFound) {
			rn, err = nil, nil
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		s.watch.Update(id, rn, now)
	}
	n := 0
	for _, k := range s.watch.Take() {
		m, err := s.restateWaits(ctx, k)
		n += m
		if err != nil {
			// Tried again at the next pass.
			s.watch.Mark(k.Tenant, k.Pool)
			errs = append(errs, err)
		}
	}
	return n, errors.Join(errs...)
}

// restateWaits has the tenant's integration re-state the queued runs of
// the pool whose wait is a runner's; the integration writes only what
// changed (githubapp: a Check Run whose summary stays the same is not
// written again).
func (s *Service) restateWaits(ctx context.Context, k runnerwatch.Pool) (int, error) {
	bound, err := s.gate(ctx, k.Tenant)
	if err != nil && !protocol.IsRefusal(err) {
		// The installation could not be read: the caller marks the pool
		// again, so that its Check Runs are re-stated at the next pass.
		return 0, err
	}
	if err != nil || !bound {
		// A tenant of no installation has no Check Runs; a suspended or
		// deleted installation's updates are held or dropped anyway.
		return 0, nil
	}
	s.runnerLists.Invalidate()
	n := 0
	err = s.store.InTx(ctx, func(tx store.Tx) error {
		n = 0
		runs, err := tx.RunList(ctx, &store.RunListParams{Tenant: k.Tenant, State: string(store.RunQueued), Limit: runnerWaitRefreshLimit})
		if err != nil {
			return err
		}
		ids := make([]string, 0, len(runs))
		for _, r := range runs {
			if r.WaitingFor == "" { // else approval, a lease: not a runner
				ids = append(ids, r.ID)
			}
		}
		if len(ids) == 0 {
			return nil
		}
		atts, err := tx.AttemptListByRuns(ctx, ids)
		if err != nil {
			return err
		}
		live := map[string]bool{}
		for _, a := range atts {
			if a.State == store.AttemptQueued && a.BlockedOn == "" && a.Pool == k.Pool {
				live[a.RunID] = true
			}
		}
		for _, r := range runs {
			if r.WaitingFor != "" || !live[r.ID] {
				continue
			}
			if err := s.runChanged(ctx, tx, r, ""); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	return n, err
}

package control

import (
	"context"
	"errors"
	"fmt"

	"github.com/jobplane/jobplane/internal/lease"
	"github.com/jobplane/jobplane/internal/principal"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
)

// SetRunnerStatus disables or enables a runner. Disabling expires its leased
// attempts at once, so their runs are retried elsewhere per policy.
func (s *Service) SetRunnerStatus(ctx context.Context, actor principal.Actor, runnerID string, status string) (*store.Runner, error) {
	if err := principal.RequireAdmin(actor); err != nil {
		return nil, err
	}
	var out *store.Runner
	err := s.store.InTx(ctx, func(tx store.Tx) error {
		rn, err := tx.RunnerGetByID(ctx, runnerID, true)
		if errors.Is(err, store.ErrNotFound) || (err == nil && rn.Tenant != actor.TenantID) {
			return fmt.Errorf("runner %s: %w", runnerID, protocol.ErrNotFound)
		}
		if err != nil {
			return err
		}
		out = rn
		if rn.Status == status {
			return nil
		}
		rn.Status = status
		if err := tx.RunnerUpdate(ctx, rn); err != nil {
			return err
		}
		if status == store.RunnerDisabled {
			atts, err := tx.AttemptListLeasedByRunner(ctx, rn.ID)
			if err != nil {
				return err
			}
			now, err := tx.Now(ctx, s.clock.NowOrNil())
			if err != nil {
				return err
			}
			var ends []*store.Attempt
			var runs []*store.Run
			var keys [][]store.LeaseKey
			for _, snap := range atts {
				a, err := tx.AttemptGetByID(ctx, snap.ID, true)
				if err != nil {
					return err
				}
				if a.State != store.AttemptLeased || a.RunnerID != rn.ID {
					continue
				}
				r, err := tx.RunGetByID(ctx, a.RunID, true)
				if err != nil {
					return err
				}
				ks, err := lease.RunKeys(r)
				if err != nil {
					return err
				}
				ends, runs, keys = append(ends, a), append(runs, r), append(keys, ks)
			}
			if err := s.leases.LockKeysFirst(ctx, tx, rn.Tenant, keys); err != nil {
				return err
			}
			for i, a := range ends {
				a.LeaseExpiresAt = &now
				if err := s.endAttempt(ctx, tx, writeNow{tx}, runs[i], a, store.AttemptExpired, nil, now, actor.Name, "runner disabled"); err != nil {
					return err
				}
			}
		}
		action := "runner.enabled"
		if status == store.RunnerDisabled {
			action = "runner.disabled"
		}
		return s.audit(ctx, tx, rn.Tenant, actor.Name, action, rn.ID, nil)
	})
	s.runnerLists.Invalidate()
	if err == nil && out != nil {
		s.watch.Mark(out.Tenant, out.Pool)
	}
	return out, store.Refusal(err)
}

package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/jobplane/jobplane/internal/principal"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
)

// Verdicts an approver can give.
const (
	VerdictApproved = "approved"
	VerdictRejected = "rejected"
)

// Approve records an approval; the run enters the queue once the decision's
// count of distinct approvers have approved.
func (s *Service) Approve(ctx context.Context, actor principal.Actor, runID, comment string) (*RunView, error) {
	return s.verdict(ctx, actor, runID, VerdictApproved, comment)
}

// Reject records a rejection; one rejection by any named approver rejects the run.
func (s *Service) Reject(ctx context.Context, actor principal.Actor, runID, comment string) (*RunView, error) {
	return s.verdict(ctx, actor, runID, VerdictRejected, comment)
}

func (s *Service) verdict(ctx context.Context, actor principal.Actor, runID, verdict, comment string) (*RunView, error) {
	if len(comment) > 2000 {
		return nil, &protocol.FieldError{Field: "comment", Err: fmt.Errorf("comment is longer than 2000 characters: %w", protocol.ErrBadRequest)}
	}
	err := s.store.InTx(ctx, func(tx store.Tx) error {
		r, err := tx.RunGetByID(ctx, runID, true)
		if errors.Is(err, store.ErrNotFound) || (err == nil && r.Tenant != actor.TenantID) {
			return fmt.Errorf("run %s: %w", runID, protocol.ErrNotFound)
		}
		if err != nil {
			return err
		}
		if r.State != store.RunPendingApproval {
			return fmt.Errorf("run %s is %s, not waiting for approval: %w", runID, r.State, protocol.ErrInvalidState)
		}
		var rec protocol.DecisionRecord
		if err := json.Unmarshal(r.Decision, &rec); err != nil || rec.Request.Approval == nil {
			return fmt.Errorf("run %s records no approval requirement: %w", runID, protocol.ErrInvalidState)
		}
		req := rec.Request.Approval
		if actor.Name == r.Actor {
			return fmt.Errorf("%s requested run %s and cannot approve or reject it: %w", actor.Name, runID, protocol.ErrSelfApproval)
		}
		if !slices.Contains(req.Approvers, actor.Name) {
			return fmt.Errorf("%s is not an approver of run %s (approvers: members of %v): %w", actor.Name, runID, req.Groups, protocol.ErrNotAnApprover)
		}
		now, err := tx.Now(ctx, s.clock.NowOrNil())
		if err != nil {
			return err
		}
		if err := tx.ApprovalCreate(ctx, &store.Approval{RunID: r.ID, Approver: actor.Name, Verdict: verdict, Comment: comment, At: now}); err != nil {
			if errors.Is(err, store.ErrAlreadyExists) {
				return fmt.Errorf("%s already gave a verdict on run %s: %w", actor.Name, runID, protocol.ErrAlreadyExists)
			}
			return err
		}
		details := map[string]any{"verdict": verdict, "comment": comment}
		if verdict == VerdictRejected {
			finish(r, store.RunRejected, now)
			r.WaitingFor = ""
			if err := tx.RunUpdate(ctx, r); err != nil {
				return err
			}
			if err := s.runChanged(ctx, tx, r, "rejected by "+actor.Name); err != nil {
				return err
			}
			return s.audit(ctx, tx, r.Tenant, actor.Name, "run.rejected", r.ID, details)
		}
		apps, err := tx.ApprovalListByRun(ctx, r.ID)
		if err != nil {
			return err
		}
		approved := 0
		for _, a := range apps {
			if a.Verdict == VerdictApproved && slices.Contains(req.Approvers, a.Approver) && a.Approver != r.Actor {
				approved++
			}
		}
		details["approvals"] = approved
		details["required"] = req.Count
		if approved < req.Count {
			r.WaitingFor = fmt.Sprintf("approval: %d of %d given", approved, req.Count)
			r.UpdatedAt = now
			if err := tx.RunUpdate(ctx, r); err != nil {
				return err
			}
			if err := s.runChanged(ctx, tx, r, ""); err != nil {
				return err
			}
			return s.audit(ctx, tx, r.Tenant, actor.Name, "run.approval_given", r.ID, details)
		}
		spec, err := runSpec(r)
		if err != nil {
			return err
		}
		r.State = store.RunQueued
		r.WaitingFor = ""
		r.UpdatedAt = now
		if err := tx.RunUpdate(ctx, r); err != nil {
			return err
		}
		att := s.newAttempt(r, spec, 1, now, now)
		if err := tx.AttemptCreate(ctx, att); err != nil {
			return err
		}
		if err := tx.WakeClaimers(ctx); err != nil {
			return err
		}
		details["attempt"] = att.ID
		return s.audit(ctx, tx, r.Tenant, actor.Name, "run.approved", r.ID, details)
	})
	if err != nil {
		return nil, store.Refusal(err)
	}
	return s.view(ctx, s.store, runID)
}

// ExpireApprovals ends runs that waited for approval longer than the
// approval TTL. Like the reaper it re-checks each run under its lock.
func (s *Service) ExpireApprovals(ctx context.Context) (int, error) {
	ctx = store.WithSystem(ctx, "approval expiry") // cross-tenant by nature (docs/operations.md)
	now, err := s.store.Now(ctx, s.clock.NowOrNil())
	if err != nil {
		return 0, store.Refusal(err)
	}
	cutoff := now.Add(-s.appTTL)
	runs, err := s.store.RunListPendingApproval(ctx, cutoff, s.batch)
	if err != nil {
		return 0, store.Refusal(err)
	}
	n := 0
	for _, snap := range runs {
		err := s.store.InTx(ctx, func(tx store.Tx) error {
			r, err := tx.RunGetByID(ctx, snap.ID, true)
			if err != nil {
				return err
			}
			if r.State != store.RunPendingApproval || !r.CreatedAt.Before(cutoff) {
				return nil
			}
			finish(r, store.RunExpired, now)
			r.WaitingFor = ""
			if err := tx.RunUpdate(ctx, r); err != nil {
				return err
			}
			if err := s.runChanged(ctx, tx, r, "no approval within "+s.appTTL.String()); err != nil {
				return err
			}
			n++
			return s.audit(ctx, tx, r.Tenant, "system:approvals", "run.expired", r.ID, map[string]any{"waited": s.appTTL.String()})
		})
		if err != nil {
			return n, store.Refusal(err)
		}
	}
	return n, nil
}

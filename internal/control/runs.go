package control

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"time"

	"github.com/jobplane/jobplane/internal/id"
	"github.com/jobplane/jobplane/internal/lease"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
)

// RunView is a run with its attempts, as the API returns it.
type RunView struct {
	Run       *store.Run
	Attempts  []*store.Attempt
	Approvals []*store.Approval
	Timeline  []TimelineEntry // GetRun only
}

// DeniedError is a denial together with the run kept for audit.
type DeniedError struct {
	RunID    string
	Decision Decision
}

func (e *DeniedError) Error() string { return "denied: " + e.Decision.Explanation }

// Unwrap makes a DeniedError match protocol.ErrDenied.
func (e *DeniedError) Unwrap() error { return protocol.ErrDenied }

var idempotencyKeyRE = regexp.MustCompile(`^[A-Za-z0-9._:/-]{1,200}$`)

// RequestRun authorizes and records a run request. created is false when an
// earlier request with the same idempotency key is returned.
func (s *Service) RequestRun(ctx context.Context, actor Actor, req *protocol.RunRequest) (view *RunView, created bool, err error) {
	return s.requestRun(ctx, actor, req, requestOrigin{})
}

// requestOrigin is how an internal caller (the scheduler) requests a run:
// the window its lease keys render with (zero: now) and its source (nil:
// an API request). Ref and commit are added to the source.
type requestOrigin struct {
	Window time.Time
	Source map[string]any
	// Catalog, when set, is the catalog to request from instead of the
	// channel's (a GitHub tenant's definitions).
	Catalog Catalog
	// GitHub, when set, makes the run a GitHub run: it gets a Check Run,
	// the repository and commit to build, and safe mode when untrusted.
	GitHub *githubRunOrigin
}

func (s *Service) requestRun(ctx context.Context, actor Actor, req *protocol.RunRequest, origin requestOrigin) (view *RunView, created bool, err error) {
	if req.Job == "" {
		return nil, false, fmt.Errorf("job is required: %w", protocol.ErrBadRequest)
	}
	if req.Channel == "" {
		return nil, false, fmt.Errorf("channel is required: %w", protocol.ErrBadRequest)
	}
	if req.IdempotencyKey != "" && !idempotencyKeyRE.MatchString(req.IdempotencyKey) {
		return nil, false, fmt.Errorf("idempotency_key must match %s: %w", idempotencyKeyRE, protocol.ErrBadRequest)
	}
	if len(req.Reason) > 1000 {
		return nil, false, fmt.Errorf("reason is longer than 1000 characters: %w", protocol.ErrBadRequest)
	}
	if req.IdempotencyKey != "" {
		if v, err := s.byIdempotencyKey(ctx, actor, req); v != nil || err != nil {
			return v, false, err
		}
	}
	inst, err := s.activeInstallation(ctx, actor.TenantID)
	if err != nil {
		return nil, false, err
	}
	cat := origin.Catalog
	if cat == nil {
		if cat, err = s.tenantCatalog(ctx, inst, req.Channel); err != nil {
			return nil, false, err
		}
	}
	if cat == nil {
		if s.defs == nil {
			return nil, false, fmt.Errorf("no definitions repository configured: %w", protocol.ErrCatalogUnavailable)
		}
		if cat, err = s.defs.Resolve(ctx, req.Channel, req.Ref); err != nil {
			return nil, false, err
		}
	}
	spec, ok := cat.Job(req.Job)
	if !ok {
		return nil, false, fmt.Errorf("no job %q in channel %s at %s: %w", req.Job, req.Channel, short(cat.Commit()), protocol.ErrUnknownJob)
	}
	params, err := cat.ValidateParams(req.Job, req.Params)
	if err != nil {
		var pe *ParamsError
		if errors.As(err, &pe) {
			return nil, false, &FieldError{Field: pe.Field, Err: fmt.Errorf("%s: %w", pe.Error(), protocol.ErrInvalidParams)}
		}
		return nil, false, fmt.Errorf("%s: %w", err.Error(), protocol.ErrInvalidParams)
	}
	ref := req.Ref
	if ref == "" {
		ref = cat.Branch()
	}
	src := map[string]any{"kind": "api"}
	if origin.Source != nil {
		src = maps.Clone(origin.Source)
	}
	src["ref"], src["commit"] = ref, cat.Commit()
	source, _ := json.Marshal(src)
	now := s.clock.Now()
	window := now
	if !origin.Window.IsZero() {
		window = origin.Window
	}
	keys, err := lease.Render(spec.Leases, lease.Vars{Params: params, Channel: req.Channel, Job: req.Job, Window: window})
	if err != nil {
		var pe *lease.ParamError
		if errors.As(err, &pe) {
			return nil, false, &FieldError{Field: pe.Field, Err: fmt.Errorf("%s: %w", pe.Error(), protocol.ErrInvalidParams)}
		}
		return nil, false, fmt.Errorf("%s: %w", err.Error(), protocol.ErrInvalidParams)
	}
	keysJSON, err := json.Marshal(keys)
	if err != nil {
		return nil, false, err
	}
	decision := cat.Decide(DecisionRequest{
		Job: req.Job, Channel: req.Channel, Actor: actor.Name, ActorKind: actor.Kind, Params: params,
		Ref: Ref{Branch: ref, Protected: cat.Protected(), Commit: cat.Commit()}, Source: source, Now: now,
	})
	if origin.GitHub != nil {
		origin.GitHub.pin(&spec, &decision)
	}
	s.observeDecision("request", decision)
	decisionJSON, err := json.Marshal(decisionRecord{Request: decision})
	if err != nil {
		return nil, false, err
	}
	grantsJSON, err := json.Marshal(grantsOrEmpty(decision.Grants))
	if err != nil {
		return nil, false, err
	}
	if err := s.pinSource(&spec, ref); err != nil {
		return nil, false, err
	}
	specJSON, err := json.Marshal(spec)
	if err != nil {
		return nil, false, err
	}
	run := &store.Run{
		ID: id.New(id.Run, now), Tenant: actor.TenantID, Job: req.Job, Channel: req.Channel, Ref: ref,
		Commit: cat.Commit(), Params: params, Actor: actor.Name, Reason: req.Reason, Source: source,
		IdempotencyKey: req.IdempotencyKey, Decision: decisionJSON, Grants: grantsJSON,
		LeaseKeys: keysJSON, Spec: specJSON, MaxAttempts: max(spec.MaxAttempts, 1),
	}
	switch {
	case !decision.Allowed:
		run.State = store.RunDenied
	case decision.Approval != nil:
		run.State = store.RunPendingApproval
		run.WaitingFor = fmt.Sprintf("approval: %d of %v", decision.Approval.Count, decision.Approval.Groups)
	default:
		run.State = store.RunQueued
	}
	var att *store.Attempt
	err = s.commits.do(ctx, func(tx store.Tx) error {
		att = nil
		// A zero time lets the insert read the database clock, which a
		// statement of its own cost a round trip per request.
		var t time.Time
		var err error
		if fixed := s.clock.NowOrNil(); fixed != nil {
			t = *fixed
		}
		if !decision.Allowed {
			if t, err = tx.Now(ctx, s.clock.NowOrNil()); err != nil {
				return err
			}
			run.FinishedAt = &t
		} else if err := s.checkKeys(ctx, tx, run.Tenant, keys); err != nil {
			return err
		}
		run.CreatedAt, run.UpdatedAt = t, t
		if run.State == store.RunQueued {
			// The run and its first attempt in one statement, at the
			// run's time (a round trip less on PostgreSQL).
			att = newAttempt(run, spec, 1, t, t)
			att.ID = id.New(id.Attempt, now)
			if err := tx.RunCreateQueued(ctx, run, att); err != nil {
				return err
			}
			if err := s.openRunCheck(ctx, tx, run, origin.GitHub); err != nil {
				return err
			}
			if err := tx.WakeClaimers(ctx); err != nil {
				return err
			}
			return s.audit(ctx, tx, run.Tenant, actor.Name, "run.requested", run.ID, map[string]any{"job": run.Job, "channel": run.Channel, "commit": run.Commit, "attempt": att.ID, "decision": "allow", "rule": decision.Rule})
		}
		if err := tx.RunCreate(ctx, run); err != nil {
			return err
		}
		if err := s.openRunCheck(ctx, tx, run, origin.GitHub); err != nil {
			return err
		}
		if !decision.Allowed {
			return s.audit(ctx, tx, run.Tenant, actor.Name, "run.denied", run.ID, map[string]any{"job": run.Job, "channel": run.Channel, "commit": run.Commit, "decision": decision})
		}
		// Pending approval: the attempt comes with the approval.
		return s.audit(ctx, tx, run.Tenant, actor.Name, "run.requested", run.ID, map[string]any{"job": run.Job, "channel": run.Channel, "commit": run.Commit, "waiting_for": run.WaitingFor, "decision": "needs_approval", "rule": decision.Rule})
	})
	if errors.Is(err, store.ErrAlreadyExists) && req.IdempotencyKey != "" {
		// A concurrent request with the same key won the insert.
		v, err := s.byIdempotencyKey(ctx, actor, req)
		if v == nil && err == nil {
			err = fmt.Errorf("idempotency key race: %w", protocol.ErrRetry)
		}
		return v, false, err
	}
	if err != nil {
		return nil, false, mapStoreErr(err)
	}
	s.log.InfoContext(ctx, "control: run requested", "run_id", run.ID, "job", run.Job, "channel", run.Channel, "state", run.State, "actor", actor.Name)
	if !decision.Allowed {
		return nil, false, &DeniedError{RunID: run.ID, Decision: decision}
	}
	// The answer is the run as this transaction wrote it: reading it back
	// would cost three queries per request and could only show it a moment
	// later (already claimed, say), which a GET shows as well.
	v := &RunView{Run: run}
	if att != nil {
		v.Attempts = []*store.Attempt{att}
	}
	s.explainWait(ctx, s.store, v)
	return v, true, nil
}

// FieldError is a refusal that names the input field at fault.
type FieldError struct {
	Field string
	Err   error
}

func (e *FieldError) Error() string { return e.Err.Error() }

// Unwrap returns the refusal.
func (e *FieldError) Unwrap() error { return e.Err }

func (s *Service) byIdempotencyKey(ctx context.Context, actor Actor, req *protocol.RunRequest) (*RunView, error) {
	r, err := s.store.RunGetByIdempotencyKey(ctx, actor.TenantID, actor.Name, req.IdempotencyKey)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, mapStoreErr(err)
	}
	if r.Job != req.Job || r.Channel != req.Channel || !sameParams(r.Params, req.Params) {
		return nil, fmt.Errorf("idempotency key %q was used for run %s with another job, channel or parameters: %w", req.IdempotencyKey, r.ID, protocol.ErrIdempotencyConflict)
	}
	if r.State == store.RunDenied {
		var d decisionRecord
		_ = json.Unmarshal(r.Decision, &d)
		return nil, &DeniedError{RunID: r.ID, Decision: d.Request}
	}
	return s.view(ctx, s.store, r.ID)
}

// sameParams compares the stored (normalized, defaults applied) params with a
// request's: every key the request names must carry the same value.
func sameParams(stored, requested json.RawMessage) bool {
	var a, b map[string]json.RawMessage
	if len(bytes.TrimSpace(requested)) == 0 || string(bytes.TrimSpace(requested)) == "null" {
		return true
	}
	if json.Unmarshal(stored, &a) != nil || json.Unmarshal(requested, &b) != nil {
		return false
	}
	for k, v := range b {
		var x, y any
		if json.Unmarshal(v, &x) != nil || json.Unmarshal(a[k], &y) != nil {
			return false
		}
		xb, _ := json.Marshal(x)
		yb, _ := json.Marshal(y)
		if !bytes.Equal(xb, yb) {
			return false
		}
	}
	return true
}

func short(sha string) string {
	if len(sha) > 12 {
		return sha[:12]
	}
	return sha
}

func (s *Service) view(ctx context.Context, q store.Queries, runID string) (*RunView, error) {
	r, err := q.RunGetByID(ctx, runID, false)
	if err != nil {
		return nil, mapStoreErr(err)
	}
	atts, err := q.AttemptListByRun(ctx, runID)
	if err != nil {
		return nil, mapStoreErr(err)
	}
	apps, err := q.ApprovalListByRun(ctx, runID)
	if err != nil {
		return nil, mapStoreErr(err)
	}
	v := &RunView{Run: r, Attempts: atts, Approvals: apps}
	s.explainWait(ctx, q, v)
	return v, nil
}

// decisionRecord is what a run keeps of its authorization: the decision at
// request time and, once dispatched, the one re-evaluated at claim.
type decisionRecord struct {
	Request  Decision  `json:"request"`
	Dispatch *Decision `json:"dispatch,omitempty"`
}

func grantsOrEmpty(g map[string]string) map[string]string {
	if g == nil {
		return map[string]string{}
	}
	return g
}

// GetRun returns a run of the actor's tenant.
func (s *Service) GetRun(ctx context.Context, actor Actor, runID string) (*RunView, error) {
	v, err := s.view(ctx, s.store, runID)
	if errors.Is(err, store.ErrNotFound) || (err == nil && v.Run.Tenant != actor.TenantID) {
		return nil, fmt.Errorf("run %s: %w", runID, protocol.ErrNotFound)
	}
	if err == nil {
		v.Timeline, err = s.timeline(ctx, v.Run)
	}
	return v, err
}

// ListRuns pages the tenant's runs, newest first.
func (s *Service) ListRuns(ctx context.Context, actor Actor, p store.RunListParams) ([]*RunView, string, error) {
	runs, next, err := s.ListRunSummaries(ctx, actor, p)
	if err != nil {
		return nil, "", err
	}
	// Two statements for the page, not two per run.
	ids := make([]string, len(runs))
	for i, r := range runs {
		ids[i] = r.ID
	}
	atts, err := s.store.AttemptListByRuns(ctx, ids)
	if err != nil {
		return nil, "", mapStoreErr(err)
	}
	apps, err := s.store.ApprovalListByRuns(ctx, ids)
	if err != nil {
		return nil, "", mapStoreErr(err)
	}
	byRun := make(map[string]*RunView, len(runs))
	out := make([]*RunView, 0, len(runs))
	for _, r := range runs {
		v := &RunView{Run: r}
		byRun[r.ID] = v
		out = append(out, v)
	}
	for _, a := range atts {
		if v := byRun[a.RunID]; v != nil {
			v.Attempts = append(v.Attempts, a)
		}
	}
	for _, a := range apps {
		if v := byRun[a.RunID]; v != nil {
			v.Approvals = append(v.Approvals, a)
		}
	}
	for _, v := range out {
		s.explainWait(ctx, s.store, v)
	}
	return out, next, nil
}

// CancelRun cancels a run: at once when it has not started, and by telling
// its runner (through renew and heartbeat) when it is running. The requester
// and admins may cancel.
func (s *Service) CancelRun(ctx context.Context, actor Actor, runID string) (*RunView, error) {
	err := s.store.InTx(ctx, func(tx store.Tx) error {
		// Lock order everywhere: attempt, then run (claims lock in that order).
		atts, err := tx.AttemptListByRun(ctx, runID)
		if err != nil {
			return err
		}
		var live *store.Attempt
		for _, a := range atts {
			if !a.State.Terminal() {
				live, err = tx.AttemptGetByID(ctx, a.ID, true)
				if err != nil {
					return err
				}
			}
		}
		r, err := tx.RunGetByID(ctx, runID, true)
		if errors.Is(err, store.ErrNotFound) || (err == nil && r.Tenant != actor.TenantID) {
			return fmt.Errorf("run %s: %w", runID, protocol.ErrNotFound)
		}
		if err != nil {
			return err
		}
		if r.Actor != actor.Name && !actor.Admin {
			return fmt.Errorf("only the requester or an admin may cancel run %s: %w", runID, protocol.ErrForbidden)
		}
		if r.State.Terminal() {
			if r.State == store.RunCancelled {
				return nil // cancelling twice is not an error
			}
			return fmt.Errorf("run %s already ended %s: %w", runID, r.State, protocol.ErrInvalidState)
		}
		now, err := tx.Now(ctx, s.clock.NowOrNil())
		if err != nil {
			return err
		}
		if live != nil && live.State == store.AttemptLeased {
			if r.CancelRequested {
				return nil
			}
			r.CancelRequested = true
			r.UpdatedAt = now
			if err := tx.RunUpdate(ctx, r); err != nil {
				return err
			}
			return s.audit(ctx, tx, r.Tenant, actor.Name, "run.cancel_requested", r.ID, map[string]any{"attempt": live.ID})
		}
		if live != nil {
			live.State = store.AttemptCancelled
			live.EndedAt = &now
			if err := tx.AttemptUpdate(ctx, live); err != nil {
				return err
			}
		}
		r.CancelRequested = true
		finish(r, store.RunCancelled, now)
		if err := tx.RunUpdate(ctx, r); err != nil {
			return err
		}
		if err := s.recordRunCheck(ctx, tx, r, "cancelled by "+actor.Name); err != nil {
			return err
		}
		return s.audit(ctx, tx, r.Tenant, actor.Name, "run.cancelled", r.ID, nil)
	})
	if err != nil {
		return nil, mapStoreErr(err)
	}
	return s.view(ctx, s.store, runID)
}

// Logs returns a run's lines after a cursor.
func (s *Service) Logs(ctx context.Context, actor Actor, runID string, after int64, limit int) ([]*store.LogLine, *store.Run, error) {
	r, err := s.store.RunGetByID(ctx, runID, false)
	if errors.Is(err, store.ErrNotFound) || (err == nil && r.Tenant != actor.TenantID) {
		return nil, nil, fmt.Errorf("run %s: %w", runID, protocol.ErrNotFound)
	}
	if err != nil {
		return nil, nil, mapStoreErr(err)
	}
	if limit <= 0 || limit > 5000 {
		limit = 1000
	}
	lines, err := s.store.LogList(ctx, &store.LogListParams{RunID: runID, After: after, Limit: limit})
	return lines, r, mapStoreErr(err)
}

// Wake returns a channel closed when work may have changed; log followers use it too.
func (s *Service) Wake() <-chan struct{} { return s.store.Wake() }

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
	"github.com/jobplane/jobplane/internal/principal"
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

// DeniedRun names the run kept for audit and the decision that denied it
// (problem.Denial).
func (e *DeniedError) DeniedRun() (string, any) { return e.RunID, e.Decision }

var idempotencyKeyRE = regexp.MustCompile(`^[A-Za-z0-9._:/-]{1,200}$`)

// RequestRun authorizes and records a run request. created is false when an
// earlier request with the same idempotency key is returned.
func (s *Service) RequestRun(ctx context.Context, actor principal.Actor, req *protocol.RunRequest) (view *RunView, created bool, err error) {
	return s.RequestRunFrom(ctx, actor, req, RequestOrigin{})
}

// RequestOrigin is how a caller other than the API (the scheduler, the
// GitHub App) requests a run: the window its lease keys render with (zero:
// now) and its source (nil: an API request). Ref and commit are added to
// the source.
type RequestOrigin struct {
	Window time.Time
	Source map[string]any
	// Catalog, when set, is the catalog to request from instead of the
	// channel's (a GitHub tenant's definitions).
	Catalog Catalog
	// Pin, when set, adjusts the spec and decision once the request is
	// decided (a pull request's run: the repository and commit to build,
	// and safe mode when untrusted).
	Pin func(spec *Spec, d *Decision)
	// Recorded, when set, is called in the request's transaction once the
	// run is written (a pull request's run opens its Check Run).
	Recorded func(ctx context.Context, tx store.Tx, run *store.Run) error
}

// RequestRunFrom is RequestRun for a request of another origin: it
// authorizes and records the run the same way.
func (s *Service) RequestRunFrom(ctx context.Context, actor principal.Actor, req *protocol.RunRequest, origin RequestOrigin) (view *RunView, created bool, err error) {
	if err := checkRunRequest(req); err != nil {
		return nil, false, err
	}
	p, v, err := s.prepareRun(ctx, actor, req, origin, nil)
	if v != nil || err != nil {
		return v, false, err
	}
	err = s.grouped.InTx(ctx, func(tx store.Tx) error { return s.writeRun(ctx, tx, writeNow{tx}, p) })
	if errors.Is(err, store.ErrAlreadyExists) && req.IdempotencyKey != "" {
		// A concurrent request with the same key won the insert.
		v, err := s.byIdempotencyKey(ctx, actor, req)
		if v == nil && err == nil {
			err = fmt.Errorf("idempotency key race: %w", protocol.ErrRetry)
		}
		return v, false, err
	}
	if err != nil {
		return nil, false, store.Refusal(err)
	}
	v, err = s.requested(ctx, p)
	return v, err == nil, err
}

// checkRunRequest checks what a run request must carry before anything is
// looked up: a refusal here is the caller's mistake, whatever the catalog.
func checkRunRequest(req *protocol.RunRequest) error {
	if req.Job == "" {
		return &protocol.FieldError{Field: "job", Err: fmt.Errorf("job is required: %w", protocol.ErrBadRequest)}
	}
	if req.Channel == "" {
		return &protocol.FieldError{Field: "channel", Err: fmt.Errorf("channel is required: %w", protocol.ErrBadRequest)}
	}
	if req.IdempotencyKey != "" && !idempotencyKeyRE.MatchString(req.IdempotencyKey) {
		return &protocol.FieldError{Field: "idempotency_key", Err: fmt.Errorf("idempotency_key must match %s: %w", idempotencyKeyRE, protocol.ErrBadRequest)}
	}
	if len(req.Reason) > 1000 {
		return &protocol.FieldError{Field: "reason", Err: fmt.Errorf("reason is longer than 1000 characters: %w", protocol.ErrBadRequest)}
	}
	return nil
}

// preparedRun is a run request decided outside any transaction: the run
// to write, with what its transaction needs.
type preparedRun struct {
	actor    principal.Actor
	run      *store.Run
	spec     Spec
	keys     []store.LeaseKey
	decision Decision
	recorded func(ctx context.Context, tx store.Tx, run *store.Run) error
	attID    string         // the first attempt's, should the run be queued
	att      *store.Attempt // set by writeRun for a queued run
}

// requestBatch is what the items of one batch of run requests share: the
// catalogs resolved, by channel and ref, so that each is read once, and
// identifiers that sort in the items' order (claims take runs of the same
// moment in the order of their attempts' identifiers).
type requestBatch struct {
	catalogs  map[[2]string]Catalog
	runs, att id.Seq
}

// prepareRun resolves, validates and decides a checked run request. It
// returns the earlier run instead when the request's idempotency key names
// one.
func (s *Service) prepareRun(ctx context.Context, actor principal.Actor, req *protocol.RunRequest, origin RequestOrigin, batch *requestBatch) (*preparedRun, *RunView, error) {
	if req.IdempotencyKey != "" {
		if v, err := s.byIdempotencyKey(ctx, actor, req); v != nil || err != nil {
			return nil, v, err
		}
	}
	cat := origin.Catalog
	if cat == nil && batch != nil {
		cat = batch.catalogs[[2]string{req.Channel, req.Ref}]
	}
	if cat == nil {
		if s.tenants != nil {
			var err error
			if cat, err = s.tenants.RequestCatalog(ctx, actor.TenantID, req.Channel); err != nil {
				return nil, nil, err
			}
		}
		if cat == nil {
			var err error
			if s.defs == nil {
				return nil, nil, fmt.Errorf("no definitions repository configured: %w", protocol.ErrCatalogUnavailable)
			}
			if cat, err = s.defs.Resolve(ctx, req.Channel, req.Ref); err != nil {
				return nil, nil, err
			}
		}
		if batch != nil {
			batch.catalogs[[2]string{req.Channel, req.Ref}] = cat
		}
	}
	spec, ok := cat.Job(req.Job)
	if !ok {
		return nil, nil, &protocol.FieldError{Field: "job", Err: fmt.Errorf("no job %q in channel %s at %s: %w", req.Job, req.Channel, short(cat.Commit()), protocol.ErrUnknownJob)}
	}
	params, err := cat.ValidateParams(req.Job, req.Params)
	if err != nil {
		var pe *ParamsError
		if errors.As(err, &pe) {
			return nil, nil, &protocol.FieldError{Field: pe.Field, Err: protocol.Refused(protocol.ErrInvalidParams, pe)}
		}
		return nil, nil, protocol.Refused(protocol.ErrInvalidParams, err)
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
			return nil, nil, &protocol.FieldError{Field: pe.Field, Err: protocol.Refused(protocol.ErrInvalidParams, pe)}
		}
		return nil, nil, protocol.Refused(protocol.ErrInvalidParams, err)
	}
	keysJSON, err := json.Marshal(keys)
	if err != nil {
		return nil, nil, err
	}
	decision := cat.Decide(DecisionRequest{
		Job: req.Job, Channel: req.Channel, Actor: actor.Name, ActorKind: actor.Kind, Params: params,
		Ref: Ref{Branch: ref, Protected: cat.Protected(), Commit: cat.Commit()}, Source: source, Now: now,
	})
	if origin.Pin != nil {
		origin.Pin(&spec, &decision)
	}
	s.observeDecision("request", decision)
	decisionJSON, err := json.Marshal(protocol.DecisionRecord{Request: decision})
	if err != nil {
		return nil, nil, err
	}
	grantsJSON, err := json.Marshal(grantsOrEmpty(decision.Grants))
	if err != nil {
		return nil, nil, err
	}
	if err := s.pinSource(&spec, ref); err != nil {
		return nil, nil, err
	}
	specJSON, err := json.Marshal(spec)
	if err != nil {
		return nil, nil, err
	}
	runID, attID := id.New(id.Run, now), id.New(id.Attempt, now)
	if batch != nil {
		runID, attID = batch.runs.Next(id.Run, now), batch.att.Next(id.Attempt, now)
	}
	run := &store.Run{
		ID: runID, Tenant: actor.TenantID, Job: req.Job, Channel: req.Channel, Ref: ref,
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
	return &preparedRun{actor: actor, run: run, spec: spec, keys: keys, decision: decision, recorded: origin.Recorded, attID: attID}, nil, nil
}

// writeRun records a prepared run in tx: its row, its first attempt when
// queued, its audit event. A refusal (a held reject key, a consumed once
// key) comes from reads before any write, so a batch can refuse one run
// and go on with the others in the same transaction. The insert of a
// queued run without lease keys or a Check Run goes through w; the others
// are written to tx at once (later reads in tx need them).
func (s *Service) writeRun(ctx context.Context, tx store.Tx, w runWriter, p *preparedRun) error {
	run, decision := p.run, p.decision
	p.att = nil
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
	} else if err := s.leases.Check(ctx, tx, run.Tenant, p.keys); err != nil {
		return err
	}
	run.CreatedAt, run.UpdatedAt = t, t
	if run.State == store.RunQueued {
		// The run and its first attempt in one statement, at the
		// run's time (a round trip less on PostgreSQL).
		att := s.newAttempt(run, p.spec, 1, t, t)
		att.ID = p.attID
		create := tx.RunCreateQueued
		if len(p.keys) == 0 && p.recorded == nil {
			// Nothing later in the transaction reads the run: no key
			// check looks for it, no row of an origin refers to it.
			create = w.runCreateQueued
		}
		if err := create(ctx, run, att); err != nil {
			return err
		}
		p.att = att
		if err := p.record(ctx, tx, s.checked(ctx, tx, run)); err != nil {
			return err
		}
		if err := tx.WakeClaimers(ctx); err != nil {
			return err
		}
		return s.audit(ctx, tx, run.Tenant, p.actor.Name, "run.requested", run.ID, requestedDetails{Job: run.Job, Channel: run.Channel, Commit: run.Commit, Attempt: att.ID, Decision: "allow", Rule: decision.Rule})
	}
	if err := tx.RunCreate(ctx, run); err != nil {
		return err
	}
	if err := p.record(ctx, tx, run); err != nil {
		return err
	}
	if !decision.Allowed {
		return s.audit(ctx, tx, run.Tenant, p.actor.Name, "run.denied", run.ID, map[string]any{"job": run.Job, "channel": run.Channel, "commit": run.Commit, "decision": decision})
	}
	// Pending approval: the attempt comes with the approval.
	return s.audit(ctx, tx, run.Tenant, p.actor.Name, "run.requested", run.ID, map[string]any{"job": run.Job, "channel": run.Channel, "commit": run.Commit, "waiting_for": run.WaitingFor, "decision": "needs_approval", "rule": decision.Rule})
}

// record calls the origin's Recorded hook, if any, in tx, with run as
// the Check Run shows it (Service.checked).
func (p *preparedRun) record(ctx context.Context, tx store.Tx, run *store.Run) error {
	if p.recorded == nil {
		return nil
	}
	return p.recorded(ctx, tx, run)
}

// requested answers a committed run request: the run as its transaction
// wrote it, or the denial (the denied run is kept for audit).
func (s *Service) requested(ctx context.Context, p *preparedRun) (*RunView, error) {
	run := p.run
	s.log.InfoContext(ctx, "control: run requested", "run_id", run.ID, "job", run.Job, "channel", run.Channel, "state", run.State, "actor", p.actor.Name)
	if !p.decision.Allowed {
		return nil, &DeniedError{RunID: run.ID, Decision: p.decision}
	}
	// Reading the run back would cost three queries per request and could
	// only show it a moment later (already claimed, say), which a GET
	// shows as well.
	v := &RunView{Run: run}
	if p.att != nil {
		v.Attempts = []*store.Attempt{p.att}
	}
	s.explainWait(ctx, s.store, v)
	return v, nil
}

func (s *Service) byIdempotencyKey(ctx context.Context, actor principal.Actor, req *protocol.RunRequest) (*RunView, error) {
	r, err := s.store.RunGetByIdempotencyKey(ctx, actor.TenantID, actor.Name, req.IdempotencyKey)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, store.Refusal(err)
	}
	if r.Job != req.Job || r.Channel != req.Channel || !sameParams(r.Params, req.Params) {
		return nil, fmt.Errorf("idempotency key %q was used for run %s with another job, channel or parameters: %w", req.IdempotencyKey, r.ID, protocol.ErrIdempotencyConflict)
	}
	if r.State == store.RunDenied {
		var d protocol.DecisionRecord
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
		return nil, store.Refusal(err)
	}
	atts, err := q.AttemptListByRun(ctx, runID)
	if err != nil {
		return nil, store.Refusal(err)
	}
	apps, err := q.ApprovalListByRun(ctx, runID)
	if err != nil {
		return nil, store.Refusal(err)
	}
	v := &RunView{Run: r, Attempts: atts, Approvals: apps}
	s.explainWait(ctx, q, v)
	return v, nil
}

func grantsOrEmpty(g map[string]string) map[string]string {
	if g == nil {
		return map[string]string{}
	}
	return g
}

// GetRun returns a run of the actor's tenant.
func (s *Service) GetRun(ctx context.Context, actor principal.Actor, runID string) (*RunView, error) {
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
func (s *Service) ListRuns(ctx context.Context, actor principal.Actor, p store.RunListParams) ([]*RunView, string, error) {
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
		return nil, "", store.Refusal(err)
	}
	apps, err := s.store.ApprovalListByRuns(ctx, ids)
	if err != nil {
		return nil, "", store.Refusal(err)
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
func (s *Service) CancelRun(ctx context.Context, actor principal.Actor, runID string) (*RunView, error) {
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
		if err := s.runChanged(ctx, tx, r, "cancelled by "+actor.Name); err != nil {
			return err
		}
		return s.audit(ctx, tx, r.Tenant, actor.Name, "run.cancelled", r.ID, nil)
	})
	if err != nil {
		return nil, store.Refusal(err)
	}
	return s.view(ctx, s.store, runID)
}

// Logs returns a run's lines after a cursor.
func (s *Service) Logs(ctx context.Context, actor principal.Actor, runID string, after int64, limit int) ([]*store.LogLine, *store.Run, error) {
	r, err := s.store.RunGetByID(ctx, runID, false)
	if errors.Is(err, store.ErrNotFound) || (err == nil && r.Tenant != actor.TenantID) {
		return nil, nil, fmt.Errorf("run %s: %w", runID, protocol.ErrNotFound)
	}
	if err != nil {
		return nil, nil, store.Refusal(err)
	}
	if limit <= 0 || limit > 5000 {
		limit = 1000
	}
	lines, err := s.logs.Lines(ctx, r, after, limit)
	return lines, r, store.Refusal(err)
}

// Wake returns a channel closed when work may have changed; log followers use it too.
func (s *Service) Wake() <-chan struct{} { return s.store.Wake() }

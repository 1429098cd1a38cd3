package control

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/jobplane/jobplane/internal/store"
)

// recheck evaluates a claimed run's authorization again against the
// channel's current definitions, so that a permission revoked after the
// request stops the run before it starts. The run keeps both decisions. On
// refusal the attempt ends cancelled and the run denied, and recheck reports
// false. The grants of a run that may go on are narrowed to what both
// decisions grant: a policy change can take access away at dispatch, never
// add it.
func (s *Service) recheck(ctx context.Context, tx store.Tx, cats catalogMemo, r *store.Run, a *store.Attempt, bound bool) (bool, error) {
	if s.defs == nil {
		return true, nil
	}
	reqRaw, request, err := readRecord(r.Decision)
	if err != nil {
		return false, fmt.Errorf("decode decision of run %s: %w", r.ID, err)
	}
	now := *a.ClaimedAt
	var dispatch Decision
	cat, err := s.dispatchCatalog(ctx, cats, r, bound)
	if err != nil {
		// Fail closed: with no definitions in force nothing is authorized.
		dispatch = Decision{Explanation: "denied at dispatch: the channel's definitions are unavailable: " + err.Error()}
	} else {
		kind, err := s.actorKinds.kind(ctx, tx, r.Tenant, r.Actor)
		if err != nil {
			return false, err
		}
		dispatch = cat.Decide(DecisionRequest{
			Job: r.Job, Channel: r.Channel, Actor: r.Actor, ActorKind: kind, Params: r.Params,
			Ref: Ref{Branch: r.Ref, Protected: cat.Protected(), Commit: r.Commit}, Source: r.Source, Now: now,
		})
		if dispatch.Allowed && dispatch.Approval != nil {
			apps, err := tx.ApprovalListByRun(ctx, r.ID)
			if err != nil {
				return false, err
			}
			n := 0
			for _, ap := range apps {
				if ap.Verdict == VerdictApproved && ap.Approver != r.Actor && slices.Contains(dispatch.Approval.Approvers, ap.Approver) {
					n++
				}
			}
			if n < dispatch.Approval.Count {
				dispatch.Allowed = false
				dispatch.Explanation = fmt.Sprintf("denied at dispatch: the policy now requires %d approval(s) from %v and the run has %d",
					dispatch.Approval.Count, dispatch.Approval.Groups, n)
			}
		}
	}
	s.observeDecision("dispatch", dispatch)
	raw, err := recordWith(reqRaw, dispatch)
	if err != nil {
		return false, err
	}
	r.Decision = raw
	if dispatch.Allowed {
		g := narrowGrants(request.Grants, dispatch.Grants)
		if r.Grants, err = json.Marshal(g); err != nil {
			return false, err
		}
		return true, nil
	}
	a.State = store.AttemptCancelled
	a.EndedAt = &now
	if err := tx.AttemptUpdate(ctx, a); err != nil {
		return false, err
	}
	finish(r, store.RunDenied, now)
	if err := tx.RunUpdate(ctx, r); err != nil {
		return false, err
	}
	s.log.InfoContext(ctx, "control: run denied at dispatch", "run_id", r.ID, "attempt_id", a.ID, "explanation", dispatch.Explanation)
	return false, s.audit(ctx, tx, r.Tenant, "system:dispatch", "run.denied", r.ID, map[string]any{
		"attempt": a.ID, "stage": "dispatch", "request_decision": request.Explanation, "dispatch_decision": dispatch.Explanation,
	})
}

// catalogMemo resolves each channel and ref once for the attempts of one
// claim call, which are then all re-checked against the definitions as
// they stood at that call. Resolving reads the branch head's ref files
// (two stat calls): for a claim of 32 attempts, 32 times the same answer.
// A nil memo resolves every time.
type catalogMemo map[[2]string]resolved

type resolved struct {
	cat Catalog
	err error
}

func (m catalogMemo) resolve(ctx context.Context, defs Definitions, channel, ref string) (Catalog, error) {
	if m == nil {
		return defs.Resolve(ctx, channel, ref)
	}
	k := [2]string{channel, ref}
	if r, ok := m[k]; ok {
		return r.cat, r.err
	}
	cat, err := defs.Resolve(ctx, channel, ref)
	m[k] = resolved{cat, err}
	return cat, err
}

// dispatchCatalog is the catalog whose policies re-check a run at dispatch:
// the tenant's own definitions when its integration serves it some (a
// GitHub installation's .jobplane), else the server's channel. bound is
// whether the tenant belongs to an integration at all: the others cost no
// lookup.
func (s *Service) dispatchCatalog(ctx context.Context, cats catalogMemo, r *store.Run, bound bool) (Catalog, error) {
	if bound && s.tenants != nil {
		k := [2]string{"\x00tenant " + r.Tenant, r.Channel}
		res, ok := cats[k]
		if !ok {
			res.cat, res.err = s.tenants.DispatchCatalog(ctx, r.Tenant, r.Channel)
			if cats != nil {
				cats[k] = res
			}
		}
		if res.err != nil || res.cat != nil {
			return res.cat, res.err
		}
	}
	return cats.resolve(ctx, s.defs, r.Channel, s.refFor(r))
}

// requestPart is what the re-check at dispatch reads of the request's
// decision.
type requestPart struct {
	Grants      map[string]string `json:"grants"`
	Explanation string            `json:"explanation"`
}

// readRecord reads a run's decision record for the re-check at dispatch:
// the request's decision as stored, and the part of it the re-check uses.
// The record is not decoded whole: recordWith splices the request's
// decision back as it is (every claimed attempt is re-checked).
//
// A record as the request wrote it, {"request":{…}} with nothing else, is
// what the claim of a queued run reads (byte for byte since migration 015
// stores it as json), so the request's decision is cut out of it and
// decoded once, where decoding the record first scanned every byte twice
// more. Anything else (jsonb's spelling, an earlier dispatch, a malformed
// record) takes the general path, which FuzzReadRecord holds it to.
func readRecord(stored json.RawMessage) (json.RawMessage, requestPart, error) {
	const prefix = `{"request":{`
	if n := len(stored); n > len(prefix) && string(stored[:len(prefix)]) == prefix && string(stored[n-2:]) == "}}" {
		// The cut is a whole JSON value exactly when it decodes, and then
		// the record is an object of that one member.
		req := stored[len(prefix)-1 : n-1]
		var part requestPart
		if json.Unmarshal(req, &part) == nil {
			return req, part, nil
		}
	}
	return readRecordDecoded(stored)
}

// readRecordDecoded is readRecord by decoding the record.
func readRecordDecoded(stored json.RawMessage) (json.RawMessage, requestPart, error) {
	var rec struct {
		Request json.RawMessage `json:"request"`
	}
	var part requestPart
	if err := json.Unmarshal(stored, &rec); err != nil {
		return nil, part, err
	}
	if len(rec.Request) == 0 || string(rec.Request) == "null" {
		raw, err := json.Marshal(Decision{})
		return raw, part, err
	}
	err := json.Unmarshal(rec.Request, &part)
	return rec.Request, part, err
}

// recordWith is the decision record of request (as readRecord returned it)
// and dispatch: what encoding protocol.DecisionRecord{request, &dispatch} gives, up
// to the request's spacing and key order.
func recordWith(request json.RawMessage, dispatch Decision) (json.RawMessage, error) {
	d, err := json.Marshal(dispatch)
	if err != nil {
		return nil, err
	}
	raw := make([]byte, 0, len(request)+len(d)+len(`{"request":,"dispatch":}`))
	raw = append(raw, `{"request":`...)
	raw = append(raw, request...)
	raw = append(raw, `,"dispatch":`...)
	raw = append(raw, d...)
	return append(raw, '}'), nil
}

// narrowGrants keeps each connector at the lower of the two levels. A
// connector the job declares is readable without a grant, so "read" is the
// floor, and only "write" needs both decisions.
func narrowGrants(a, b map[string]string) map[string]string {
	out := map[string]string{}
	for k, la := range a {
		if la == "write" && b[k] == "write" {
			out[k] = "write"
		} else {
			out[k] = "read"
		}
	}
	return out
}

// ClaimsWaiting reports how many long-polling claims are waiting on this
// server now.
func (s *Service) ClaimsWaiting() int { return s.lines.Waiting() }

package control

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jobplane/jobplane/internal/audit"
	"github.com/jobplane/jobplane/internal/principal"
	"github.com/jobplane/jobplane/internal/store"
)

// holder names who holds an attempt's lease in audit details (RELIABILITY
// AU1): the runner's registration, the incarnation of the claim (the
// runner's claim request ID, new for every claim a runner process makes,
// else the attempt number), and the lease itself (the first 16 hex digits of
// the lease token's digest, enough to tell two leases of one attempt apart
// without storing anything that could be replayed).
func holder(a *store.Attempt) holderDetails {
	inc := a.ClaimRequestID
	if inc == "" {
		inc = fmt.Sprintf("attempt-%d", a.Number)
	}
	lease := a.LeaseDigest
	if len(lease) > 16 {
		lease = lease[:16]
	}
	return holderDetails{Registration: a.RunnerID, Incarnation: inc, Lease: lease}
}

// The details of the audit events every run writes (a request, a claim,
// an end) are structs, not maps: encoding a map sorts its keys and
// reflects on every value, and was about 5 % of the server's CPU in the
// benchmark's lifecycle. Their fields are in key order, so the bytes are
// those a map with the same entries gave (TestAuditDetailsAsMaps).

type holderDetails struct {
	Incarnation  string `json:"incarnation"`
	Lease        string `json:"lease"`
	Registration string `json:"registration"`
}

// requestedDetails: "run.requested" of a run queued at once.
type requestedDetails struct {
	Attempt  string `json:"attempt"`
	Channel  string `json:"channel"`
	Commit   string `json:"commit"`
	Decision string `json:"decision"`
	Job      string `json:"job"`
	Rule     string `json:"rule"`
}

// claimedDetails: "attempt.claimed".
type claimedDetails struct {
	Attempt        string        `json:"attempt"`
	Holder         holderDetails `json:"holder"`
	LeaseExpiresAt *time.Time    `json:"lease_expires_at"`
	Number         int           `json:"number"`
	Runner         string        `json:"runner"`
}

// endedDetails: "attempt.<state>", the end of an attempt.
type endedDetails struct {
	Attempt     string             `json:"attempt"`
	Holder      holderDetails      `json:"holder"`
	NextAttempt string             `json:"next_attempt,omitempty"`
	Number      int                `json:"number"`
	Reason      string             `json:"reason,omitempty"`
	RunState    store.RunState     `json:"run_state"`
	State       store.AttemptState `json:"state"`
}

// AuditQuery filters the audit log.
type AuditQuery struct {
	After int64
	RunID string
	Actor string
	Since time.Time
	Limit int
}

// QueryAudit reads the tenant's audit events in sequence order (admin).
func (s *Service) QueryAudit(ctx context.Context, actor principal.Actor, q AuditQuery) ([]*store.AuditEvent, error) {
	if err := principal.RequireAdmin(actor); err != nil {
		return nil, err
	}
	if q.Limit <= 0 || q.Limit > 1000 {
		q.Limit = 100
	}
	ev, err := s.store.AuditList(ctx, &store.AuditListParams{Tenant: actor.TenantID, After: q.After, RunID: q.RunID,
		Actor: q.Actor, Since: q.Since, Limit: q.Limit})
	return ev, store.Refusal(err)
}

// VerifyAudit recomputes the whole hash chain (admin). The chain spans every
// tenant, so the report names only sequence numbers and hashes.
func (s *Service) VerifyAudit(ctx context.Context, actor principal.Actor, cp *audit.Checkpoint) (*audit.Report, error) {
	if err := principal.RequireAdmin(actor); err != nil {
		return nil, err
	}
	rep, err := audit.Verify(ctx, s.store, cp)
	return rep, store.Refusal(err)
}

// TimelineEntry is one state change of a run, from its audit trail.
type TimelineEntry struct {
	Seq     int64
	At      time.Time
	Actor   string
	Action  string
	State   string // the run's state after the change, when the event tells it
	Attempt string
	Reason  string
}

// runStateAfter is the run state an action leaves, for actions that always
// leave the same one; attempt endings say it in their details.
var runStateAfter = map[string]store.RunState{
	"run.approved": store.RunQueued, "run.rejected": store.RunRejected, "run.expired": store.RunExpired,
	"run.denied": store.RunDenied, "run.cancelled": store.RunCancelled, "attempt.claimed": store.RunRunning,
}

// timeline derives a run's history from its audit events: every change,
// with its time and actor, in commit-sequence order.
func (s *Service) timeline(ctx context.Context, r *store.Run) ([]TimelineEntry, error) {
	var out []TimelineEntry
	for after := int64(0); ; {
		evs, err := s.store.AuditList(ctx, &store.AuditListParams{Tenant: r.Tenant, RunID: r.ID, After: after, Limit: 1000})
		if err != nil {
			return nil, store.Refusal(err)
		}
		for _, e := range evs {
			var d struct {
				Attempt    string `json:"attempt"`
				RunState   string `json:"run_state"`
				State      string `json:"state"`
				Reason     string `json:"reason"`
				WaitingFor string `json:"waiting_for"`
			}
			_ = json.Unmarshal(e.Details, &d) // details of other shapes carry nothing the timeline shows
			te := TimelineEntry{Seq: e.Seq, At: e.At, Actor: e.Actor, Action: e.Action, Attempt: d.Attempt, Reason: d.Reason, State: d.RunState}
			if st, ok := runStateAfter[e.Action]; ok && te.State == "" {
				te.State = string(st)
			}
			if e.Action == "run.requested" {
				te.State = string(store.RunQueued)
				if d.WaitingFor != "" {
					te.State = string(store.RunPendingApproval)
				}
			}
			out = append(out, te)
		}
		if len(evs) < 1000 {
			return out, nil
		}
		after = evs[len(evs)-1].Seq
	}
}

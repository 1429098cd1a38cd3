package control

import (
	"context"
	"encoding/json"
	"time"

	"github.com/jobplane/jobplane/internal/lease"
	"github.com/jobplane/jobplane/internal/store"
)

// The details of the audit events every run writes (a request, a claim,
// an end) are structs, not maps: encoding a map sorts its keys and
// reflects on every value, and was about 5 % of the server's CPU in the
// benchmark's lifecycle. Their fields are in key order, so the bytes are
// those a map with the same entries gave (TestAuditDetailsAsMaps).

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
	Attempt        string              `json:"attempt"`
	Holder         lease.HolderDetails `json:"holder"`
	LeaseExpiresAt *time.Time          `json:"lease_expires_at"`
	Number         int                 `json:"number"`
	Runner         string              `json:"runner"`
}

// endedDetails: "attempt.<state>", the end of an attempt.
type endedDetails struct {
	Attempt     string              `json:"attempt"`
	Holder      lease.HolderDetails `json:"holder"`
	NextAttempt string              `json:"next_attempt,omitempty"`
	Number      int                 `json:"number"`
	Reason      string              `json:"reason,omitempty"`
	RunState    store.RunState      `json:"run_state"`
	State       store.AttemptState  `json:"state"`
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
	"run.superseded": store.RunSuperseded,
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

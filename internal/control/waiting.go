package control

import (
	"context"

	"github.com/jobplane/jobplane/internal/runnerwatch"
	"github.com/jobplane/jobplane/internal/store"
)

// RunnerOnlineWindow is how recently a runner must have called the control
// plane to count as online (runnerwatch.OnlineWindow).
const RunnerOnlineWindow = runnerwatch.OnlineWindow

// explainWait fills in WaitingFor of a queued run that waits for nothing
// else (approval, a lease, a retry's backoff) when no runner can take it,
// or, in the GitHub Actions mode, with what its dispatch waits for.
func (s *Service) explainWait(ctx context.Context, q store.Queries, v *RunView) {
	r := v.Run
	if r.State != store.RunQueued || r.WaitingFor != "" {
		return
	}
	var live *store.Attempt
	for _, a := range v.Attempts {
		if a.State == store.AttemptQueued && a.BlockedOn == "" {
			live = a
		}
	}
	if live == nil {
		return
	}
	r.WaitingFor = s.attemptWait(ctx, q, r, live)
}

// attemptWait says what a queued attempt waits for when nothing stored on
// its run does: a runner, or its GitHub Actions workflow.
func (s *Service) attemptWait(ctx context.Context, q store.Queries, r *store.Run, a *store.Attempt) string {
	if a.Pool == store.ActionsPool && s.actions != nil {
		return s.actions.AttemptWait(ctx, q, r, a)
	}
	now := s.clock.Now()
	runners, err := s.runnerLists.Get(ctx, q, r.Tenant, now)
	if err != nil {
		return "" // an explanation is best effort; the run itself is fine
	}
	images, isolation := "", ""
	if a.Needs != 0 {
		if spec, err := s.specs.get(r); err == nil {
			images, isolation = imagesReason(spec), s.isolationReason(r, spec)
		}
	}
	return runnerwatch.Wait(a, runners, now, needsText(a.Needs, images, isolation))
}

// checked is the run as its Check Run (Tenants.RunChanged) shows it: a
// queued run whose stored WaitingFor is empty gets what its live attempt
// waits for, computed now (a copy: nothing of it is stored).
func (s *Service) checked(ctx context.Context, q store.Queries, r *store.Run) *store.Run {
	if r.State != store.RunQueued || r.WaitingFor != "" {
		return r
	}
	atts, err := q.AttemptListByRun(ctx, r.ID)
	if err != nil {
		return r
	}
	for _, a := range atts {
		if a.State == store.AttemptQueued && a.BlockedOn == "" {
			c := *r
			c.WaitingFor = s.attemptWait(ctx, q, r, a)
			return &c
		}
	}
	return r
}

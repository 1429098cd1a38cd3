package control

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jobplane/jobplane/internal/store"
)

// RunnerOnlineWindow is how recently a runner must have called the control
// plane to count as online when a queued run explains what it waits for.
// Idle runners long-poll claims at least every 30 s.
const RunnerOnlineWindow = 2 * time.Minute

// runnerWait says why a queued run's attempt has no runner: "" when some
// online runner of its tenant is eligible for it (it is then merely next in
// line). It is computed when a run is read, never stored: runners come and
// go without touching runs.
func runnerWait(a *store.Attempt, runners []*store.Runner, now time.Time) string {
	online, eligible := 0, 0
	for _, rn := range runners {
		if rn.Status != store.RunnerActive || rn.LastSeenAt == nil || now.Sub(*rn.LastSeenAt) > RunnerOnlineWindow {
			continue
		}
		online++
		if runnerEligible(rn, a) {
			eligible++
		}
	}
	if eligible > 0 {
		return ""
	}
	var need []string
	need = append(need, "pool "+a.Pool)
	if len(a.Labels) > 0 {
		need = append(need, "labels "+strings.Join(a.Labels, ","))
	}
	if a.ManagedOnly {
		need = append(need, "a managed runner (safe mode)")
	}
	if a.Repo != "" {
		need = append(need, "access to "+a.Repo)
	}
	return fmt.Sprintf("runner: none of the %d online runners is eligible (needs %s)", online, strings.Join(need, ", "))
}

// runnerEligible mirrors the claim's filter (store.AttemptClaimParams).
func runnerEligible(rn *store.Runner, a *store.Attempt) bool {
	if rn.Tenant != a.Tenant || rn.Pool != a.Pool {
		return false
	}
	for _, l := range a.Labels {
		if !slices.Contains(rn.Labels, l) {
			return false
		}
	}
	if a.ManagedOnly && rn.SelfHosted {
		return false
	}
	return len(rn.AllowedRepos) == 0 || slices.Contains(rn.AllowedRepos, a.Repo)
}

// explainWait fills in WaitingFor of a queued run that waits for nothing
// else (approval, a lease, a retry's backoff) when no runner can take it.
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
	now := s.clock.Now()
	runners, err := s.runnerLists.get(ctx, q, r.Tenant, now)
	if err != nil {
		return // an explanation is best effort; the run itself is fine
	}
	r.WaitingFor = runnerWait(live, runners, now)
}

package control

import (
	"time"

	"github.com/jobplane/jobplane/internal/store"
)

// Observer receives the measurements the service makes on its hot paths.
// Calls happen after the work they measure and must not block
// (internal/metrics implements it with Prometheus counters).
type Observer interface {
	// Claimed: an attempt was leased after waiting this long since it
	// became claimable.
	Claimed(pool string, queued time.Duration)
	// PolicyDecision: a decision at stage "request" or "dispatch" with
	// outcome allow, deny or needs_approval.
	PolicyDecision(stage, outcome string)
	// Swept: a sweep removed n things of a kind ("staged_upload").
	Swept(kind string, n int)
}

type nopObserver struct{}

func (nopObserver) Claimed(string, time.Duration) {}
func (nopObserver) PolicyDecision(string, string) {}
func (nopObserver) Swept(string, int)             {}

func observerOrNop(o Observer) Observer {
	if o == nil {
		return nopObserver{}
	}
	return o
}

// observeClaim records a claimed attempt's wait in the queue: from when it
// became claimable (created, or its retry backoff ended) to its claim.
func (s *Service) observeClaim(a *store.Attempt) {
	if a == nil || a.ClaimedAt == nil {
		return
	}
	from := a.CreatedAt
	if a.NotBefore.After(from) {
		from = a.NotBefore
	}
	s.obs.Claimed(a.Pool, max(a.ClaimedAt.Sub(from), 0))
}

// observeDecision records a policy outcome.
func (s *Service) observeDecision(stage string, d Decision) {
	switch {
	case !d.Allowed:
		s.obs.PolicyDecision(stage, "deny")
	case d.Approval != nil && stage == "request":
		s.obs.PolicyDecision(stage, "needs_approval")
	default:
		s.obs.PolicyDecision(stage, "allow")
	}
}

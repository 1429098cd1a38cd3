package runcreds

import (
	"context"
	"fmt"

	"github.com/jobplane/jobplane/internal/principal"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
)

// RunLease answers a job's supervisor with the current lease of the run
// token's attempt, so that it can bound the job by the lease without the
// runner's key. attemptID is the attempt the supervisor was started for: a
// token of any other attempt is refused (403), so that a supervisor handed
// a wrong token kills its job rather than follow another attempt's lease.
// An attempt that no longer holds its lease is 410 attempt_ended; unlike
// the other run-token endpoints, a valid token of an ended attempt is not
// 401, since the supervisor must tell "stop now" from "cannot confirm".
func (s *Service) RunLease(ctx context.Context, token, attemptID string) (*protocol.RunLease, error) {
	if s.keys == nil {
		return nil, errNoRunTokens // before the attempt parameter: no request can succeed
	}
	if attemptID == "" {
		return nil, fmt.Errorf("the attempt parameter is required: %w", protocol.ErrBadRequest)
	}
	claims, err := s.verify(token)
	if err != nil {
		return nil, err
	}
	if claims.AttemptID != attemptID {
		return nil, fmt.Errorf("the run token is not of the attempt asked about: %w", protocol.ErrForbidden)
	}
	a, now, err := s.tokenAttempt(store.WithTenant(ctx, claims.Tenant), claims)
	if err != nil {
		return nil, err
	}
	if a.State != store.AttemptLeased || a.LeaseExpiresAt == nil || !now.Before(*a.LeaseExpiresAt) {
		return nil, fmt.Errorf("attempt %s is %s: %w", a.ID, a.State, protocol.ErrAttemptEnded)
	}
	return &protocol.RunLease{
		AttemptID: a.ID, State: string(a.State), ExpiresAt: a.LeaseExpiresAt.UTC(), ServerTime: now.UTC(),
		RemainingMS: a.LeaseExpiresAt.Sub(now).Milliseconds(), TTLSeconds: int(a.LeaseTTL.Seconds()),
	}, nil
}

// JobCall verifies a run token and returns the attempt it names, for the
// endpoints that check the attempt's lease in their own transaction
// (POST /v1/run/source and /v1/run/artifacts): like RunLease, they answer
// an ended attempt with 410 attempt_ended rather than 401.
func (s *Service) JobCall(token string) (*principal.JobCall, error) {
	claims, err := s.verify(token)
	if err != nil {
		return nil, err
	}
	return &principal.JobCall{Tenant: claims.Tenant, Run: claims.RunID, Attempt: claims.AttemptID}, nil
}

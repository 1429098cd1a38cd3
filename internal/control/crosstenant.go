package control

import (
	"context"

	"github.com/jobplane/jobplane/internal/crosstenant"
	"github.com/jobplane/jobplane/internal/principal"
)

// ActionCrossTenantReference is the audit action of a runner that named an
// attempt, run or artifact of another tenant (MT2, docs/operations.md).
const ActionCrossTenantReference = crosstenant.Action

// WatchCrossTenant prepares ctx for one signed request on route
// (crosstenant.Watcher.Watch over the service's store). Call flush once
// the request's own transactions are over and before the answer is
// written, so that the event exists when the caller sees the refusal.
func (s *Service) WatchCrossTenant(ctx context.Context, route string, call *principal.RunnerCall) (context.Context, func()) {
	return crosstenant.Watcher{Store: s.store, Clock: s.clock, Logger: s.log}.Watch(ctx, route, call)
}

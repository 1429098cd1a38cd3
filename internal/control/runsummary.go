package control

import (
	"context"

	"github.com/jobplane/jobplane/internal/principal"
	"github.com/jobplane/jobplane/internal/store"
)

// ListRunSummaries pages the tenant's runs, newest first, like ListRuns but
// without their attempts and approvals: one query per page, for lists that
// show only the runs' own columns (the web UI's runs table).
func (s *Service) ListRunSummaries(ctx context.Context, actor principal.Actor, p store.RunListParams) ([]*store.Run, string, error) {
	if p.Limit <= 0 || p.Limit > 500 {
		p.Limit = 50
	}
	p.Tenant = actor.TenantID
	want := p.Limit
	p.Limit = want + 1
	runs, err := s.store.RunList(ctx, &p)
	if err != nil {
		return nil, "", store.Refusal(err)
	}
	next := ""
	if len(runs) > want {
		runs = runs[:want]
		next = runs[want-1].ID
	}
	return runs, next, nil
}

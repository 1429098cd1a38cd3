package githubapp

import (
	"context"
	"errors"
	"time"

	"github.com/jobplane/jobplane/internal/control"
	"github.com/jobplane/jobplane/internal/schedule"
	"github.com/jobplane/jobplane/internal/store"
)

// Schedules of installation tenants (docs/schedules.md): a tenant whose
// installation grants its .jobplane repository has the schedules of that
// repository's default branch fired in its own tenant, by "scheduler",
// under its own policies, on the GitHub channel (the only channel its
// definitions serve). The firing state is the same per-tenant table as the
// server's schedules, so the same conditional update makes one replica of
// many fire each window. A tenant without .jobplane has no schedules: the
// server's were written for the default tenant.

// TenantScheduleRefresh bounds how stale a tenant's definitions may be when
// the scheduler reads them: a .jobplane head read less than this long ago
// (by the scheduler or a pull request) is not read again, so the scheduler
// costs each installation at most two API calls a minute per replica.
const TenantScheduleRefresh = time.Minute

// CatalogsWithin is implemented by Catalogs that can answer
// from a head read recently.
type CatalogsWithin interface {
	// TenantCatalogWithin is TenantCatalog, but may answer from a head
	// read less than maxAge ago.
	TenantCatalogWithin(ctx context.Context, in *store.GitHubInstallation, maxAge time.Duration) (control.Catalog, error)
}

// scheduleCatalogOf is a tenant's .jobplane catalog for the scheduler, or
// nil when the tenant has none (or its catalog declares no schedules).
func (s *Service) scheduleCatalogOf(ctx context.Context, in *store.GitHubInstallation) (schedule.Catalog, error) {
	if s.catalogs == nil {
		return nil, nil
	}
	var cat control.Catalog
	var err error
	if w, ok := s.catalogs.(CatalogsWithin); ok {
		cat, err = w.TenantCatalogWithin(ctx, in, TenantScheduleRefresh)
	} else {
		cat, err = s.catalogs.TenantCatalog(ctx, in)
	}
	if err != nil || cat == nil {
		return nil, err
	}
	sc, _ := cat.(schedule.Catalog)
	return sc, nil
}

// ScheduledTenants are the schedules of every active installation tenant
// whose definitions could be read (schedule.Tenants). A suspended or
// deleted installation's schedules are left alone: after an unsuspension,
// catch_up decides about the windows it missed.
func (s *Service) ScheduledTenants(ctx context.Context) ([]*schedule.Tenant, error) {
	if s.catalogs == nil {
		return nil, nil
	}
	ins, err := s.store.GitHubInstallationList(ctx)
	if err != nil {
		return nil, store.Refusal(err)
	}
	var out []*schedule.Tenant
	for _, in := range ins {
		if in.Status != store.GitHubInstallationActive {
			continue
		}
		sc, err := s.scheduleCatalogOf(ctx, in)
		if err != nil {
			// Unreadable definitions (GitHub down, no good commit yet):
			// the windows wait, and catch_up applies once they are read.
			s.log.DebugContext(ctx, "githubapp: tenant schedules not read", "installation", in.ID, "err", err)
			continue
		}
		out = append(out, &schedule.Tenant{Tenant: in.Tenant, Channel: s.channel, Catalog: sc})
	}
	return out, nil
}

// TenantSchedules are the schedules of an installation's tenant
// (schedule.Tenants): those of its .jobplane repository, none without one;
// nil for a tenant that is not an installation's.
func (s *Service) TenantSchedules(ctx context.Context, tenant string) (*schedule.Tenant, error) {
	in, err := s.store.GitHubInstallationGetByTenant(ctx, tenant)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, store.Refusal(err)
	}
	out := &schedule.Tenant{Tenant: tenant, Channel: s.channel}
	if in.Status != store.GitHubInstallationActive {
		return out, nil // nothing fires while suspended, or ever again once deleted
	}
	out.Catalog, err = s.scheduleCatalogOf(ctx, in)
	return out, err
}

package control

import (
	"context"
	"errors"
	"fmt"
	"time"

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

// GitHubCatalogsWithin is implemented by GitHubCatalogs that can answer
// from a head read recently.
type GitHubCatalogsWithin interface {
	// TenantCatalogWithin is TenantCatalog, but may answer from a head
	// read less than maxAge ago.
	TenantCatalogWithin(ctx context.Context, in *store.GitHubInstallation, maxAge time.Duration) (Catalog, error)
}

// scheduleCatalogOf is a tenant's .jobplane catalog for the scheduler, or
// nil when the tenant has none (or its catalog declares no schedules).
func (s *Service) scheduleCatalogOf(ctx context.Context, in *store.GitHubInstallation) (ScheduleCatalog, error) {
	if s.gh == nil || s.gh.Catalogs == nil {
		return nil, nil
	}
	var cat Catalog
	var err error
	if w, ok := s.gh.Catalogs.(GitHubCatalogsWithin); ok {
		cat, err = w.TenantCatalogWithin(ctx, in, TenantScheduleRefresh)
	} else {
		cat, err = s.gh.Catalogs.TenantCatalog(ctx, in)
	}
	if err != nil || cat == nil {
		return nil, err
	}
	sc, _ := cat.(ScheduleCatalog)
	return sc, nil
}

// tenantSchedules are a tenant catalog's schedules on the GitHub channel;
// a schedule naming another channel has no catalog to run in.
func (s *Service) tenantSchedules(sc ScheduleCatalog) []JobSchedule {
	var out []JobSchedule
	for _, js := range sc.Schedules() {
		if js.Channel == s.githubChannel() {
			out = append(out, js)
		}
	}
	return out
}

// fireTenantSchedules runs the scheduler pass of every active installation
// tenant. A suspended or deleted installation's schedules are left alone:
// after an unsuspension, catch_up decides about the windows it missed.
func (s *Service) fireTenantSchedules(ctx context.Context) (int, error) {
	if s.gh == nil || s.gh.Catalogs == nil {
		return 0, nil
	}
	ins, err := s.store.GitHubInstallationList(ctx)
	if err != nil {
		return 0, store.Refusal(err)
	}
	fired := 0
	var errs []error
	for _, in := range ins {
		if in.Status != store.GitHubInstallationActive {
			continue
		}
		sc, err := s.scheduleCatalogOf(ctx, in)
		if err != nil {
			// Unreadable definitions (GitHub down, no good commit yet):
			// the windows wait, and catch_up applies once they are read.
			s.log.DebugContext(ctx, "control: tenant schedules not read", "installation", in.ID, "err", err)
			continue
		}
		var scheds []JobSchedule
		if sc != nil {
			scheds = s.tenantSchedules(sc)
		}
		seen := map[string]bool{}
		for _, js := range scheds {
			seen[js.Job] = true
			ok, err := s.fireSchedule(ctx, in.Tenant, sc, js)
			if err != nil {
				errs = append(errs, fmt.Errorf("schedule of %s in %s: %w", js.Job, in.Tenant, err))
			}
			if ok {
				fired++
			}
		}
		// Forget what the tenant's definitions no longer declare (or all,
		// without .jobplane), as for the server's.
		rows, err := s.store.ScheduleList(ctx, in.Tenant)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, r := range rows {
			if r.Channel != s.githubChannel() || !seen[r.Job] {
				if err := s.store.ScheduleDelete(ctx, in.Tenant, r.Channel, r.Job); err != nil && !errors.Is(err, store.ErrNotFound) {
					errs = append(errs, err)
				}
			}
		}
	}
	return fired, errors.Join(errs...)
}

// listTenantSchedules is ListSchedules for an installation's tenant.
func (s *Service) listTenantSchedules(ctx context.Context, in *store.GitHubInstallation, state map[[2]string]*store.Schedule) (*SchedulesView, error) {
	out := &SchedulesView{Schedules: []ScheduleView{}}
	if in.Status != store.GitHubInstallationActive {
		return out, nil // nothing fires while suspended, or ever again once deleted
	}
	sc, err := s.scheduleCatalogOf(ctx, in)
	if err != nil || sc == nil {
		return out, err
	}
	for _, js := range s.tenantSchedules(sc) {
		out.Schedules = append(out.Schedules, s.scheduleView(js, sc.Commit(), state))
	}
	return out, nil
}

package githubapp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/jobplane/jobplane/internal/control"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
)

// The run service's view of installation tenants (control.Tenants).

// Gate refuses a tenant whose installation is suspended or deleted; bound
// reports whether the tenant is an installation's.
func (s *Service) Gate(ctx context.Context, tenant string) (bool, error) {
	in, err := s.activeInstallation(ctx, tenant)
	return in != nil, err
}

// GateTx refuses, in a claim's transaction, a tenant whose installation is
// no longer active.
func (s *Service) GateTx(ctx context.Context, tx store.Tx, tenant string) error {
	return installationClaimable(ctx, tx, tenant)
}

// RepoWithdrawnTx says, in a claim's (or an Actions exchange's)
// transaction, why the tenant's installation no longer lets an attempt
// building repo go out: "" while it grants the repository, and for a
// tenant that is not an installation's.
func (s *Service) RepoWithdrawnTx(ctx context.Context, tx store.Tx, tenant, repo string) (string, error) {
	in, err := tx.GitHubInstallationGetByTenant(ctx, tenant)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return "", nil
	case err != nil:
		return "", err
	}
	if in.Status == store.GitHubInstallationDeleted {
		return "GitHub installation " + strconv.FormatInt(in.ID, 10) + " was deleted", nil
	}
	repos, err := tx.GitHubRepoList(ctx, in.ID)
	if err != nil {
		return "", err
	}
	for _, r := range repos {
		if strings.EqualFold(r.FullName, repo) {
			return "", nil
		}
	}
	return "GitHub installation " + strconv.FormatInt(in.ID, 10) + " no longer grants " + repo, nil
}

// RequestCatalog is the catalog of an installation tenant's run requests:
// its .jobplane definitions, else the server's on the GitHub channel, and
// only on that channel; nil for a tenant that is not an installation's.
func (s *Service) RequestCatalog(ctx context.Context, tenant, channel string) (control.Catalog, error) {
	in, err := s.activeInstallation(ctx, tenant)
	if err != nil {
		return nil, err
	}
	return s.tenantCatalog(ctx, in, channel)
}

// DispatchCatalog is the catalog that re-checks an installation tenant's
// run when an attempt of it is handed out: the installation's own
// definitions, whose policies admitted the run, never the server's; nil
// for a tenant of no installation, and for an installation that uses the
// server's definitions. It is read in the claim's transaction, so it
// answers from the .jobplane head this replica read last, however old
// (the scheduler pass reads every installation's head each
// TenantScheduleRefresh, and so does every pull request), and asks GitHub
// only when this replica has never read it: a slow or unreachable GitHub
// must not hold a transaction that other runners' claims share.
func (s *Service) DispatchCatalog(ctx context.Context, tenant, channel string) (control.Catalog, error) {
	if s.catalogs == nil {
		return nil, nil
	}
	in, err := s.store.GitHubInstallationGetByTenant(ctx, tenant)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, store.Refusal(err)
	}
	if channel != s.channel {
		return nil, fmt.Errorf("channel %q: the definitions of GitHub installation %d (%s) are served on channel %s only: %w",
			channel, in.ID, in.Account, s.channel, protocol.ErrUnknownChannel)
	}
	var cat control.Catalog
	if w, ok := s.catalogs.(CatalogsWithin); ok {
		cat, err = w.TenantCatalogWithin(ctx, in, anyAge)
	} else {
		cat, err = s.catalogs.TenantCatalog(ctx, in)
	}
	return cat, err
}

// anyAge is a maxAge under which every head read is recent enough.
const anyAge = time.Duration(math.MaxInt64)

// ViewCatalog is what an installation tenant's views show: what its
// requests would run, from a .jobplane head read less than
// TenantScheduleRefresh ago.
func (s *Service) ViewCatalog(ctx context.Context, tenant, channel string) (control.Catalog, string, bool, error) {
	in, err := s.store.GitHubInstallationGetByTenant(ctx, tenant)
	if errors.Is(err, store.ErrNotFound) {
		return nil, "", false, nil
	}
	if err != nil {
		return nil, "", false, store.Refusal(err)
	}
	if channel == "" {
		channel = s.channel
	}
	if channel != s.channel {
		return nil, s.channel, true, fmt.Errorf("channel %q: the definitions of GitHub installation %d (%s) are served on channel %s only: %w",
			channel, in.ID, in.Account, s.channel, protocol.ErrUnknownChannel)
	}
	cat, err := s.githubCatalogWithin(ctx, in, TenantScheduleRefresh)
	return cat, s.channel, true, err
}

// RunChanged queues the Check Run state of a GitHub run that changed state.
func (s *Service) RunChanged(ctx context.Context, tx store.Tx, run *store.Run, detail string) error {
	return s.recordRunCheck(ctx, tx, run, detail)
}

// ServesSources reports whether the App serves GitHub runs' sources.
func (s *Service) ServesSources() bool { return s.sources != nil }

// Archive streams the source of a GitHub run.
func (s *Service) Archive(ctx context.Context, tenant, repo, commit string, open func() io.Writer) error {
	return s.archiveGitHubSource(ctx, tenant, repo, commit, open)
}

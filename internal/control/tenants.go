package control

import (
	"context"

	"github.com/jobplane/jobplane/internal/store"
)

// Tenants is how an integration whose installations are tenants (the GitHub
// App, package githubapp) plugs into the run service: it gates the claims
// and requests of its tenants, serves their definitions, and hears of
// their runs' state changes in the transactions that make them. (Their
// schedules and the sources of their repositories are served through
// internal/schedule and internal/source/tickets.) A tenant the integration
// does not know is left to the server's definitions and rules.
type Tenants interface {
	// Gate refuses a tenant whose installation is suspended or deleted,
	// outside any transaction (it may answer from a cache); bound reports
	// whether the tenant belongs to an installation at all.
	Gate(ctx context.Context, tenant string) (bound bool, err error)
	// GateTx is Gate read again in a claim's transaction.
	GateTx(ctx context.Context, tx store.Tx, tenant string) error
	// RepoWithdrawnTx says, in the transaction that would hand out an
	// attempt of the tenant building repo (owner/name), why the tenant
	// may no longer work on it ("" while it may): its installation no
	// longer grants the repository.
	RepoWithdrawnTx(ctx context.Context, tx store.Tx, tenant, repo string) (reason string, err error)
	// RequestCatalog is the catalog a run request of the tenant on channel
	// uses, refusing an inactive installation or another channel; nil
	// (and no error) when the tenant uses the server's definitions.
	RequestCatalog(ctx context.Context, tenant, channel string) (Catalog, error)
	// DispatchCatalog is the catalog whose policies re-check a run of the
	// tenant on channel when an attempt of it is handed out (it may answer
	// from a recently read copy); nil (and no error) when the tenant uses
	// the server's definitions.
	DispatchCatalog(ctx context.Context, tenant, channel string) (Catalog, error)
	// RunChanged hears of a run's new state, or of a change in what it
	// waits for, in the transaction that changed it; detail says why, when
	// there is more to say. A queued run's WaitingFor is filled in with
	// what it waits for even when nothing of it is stored (a runner, a
	// GitHub Actions workflow).
	RunChanged(ctx context.Context, tx store.Tx, run *store.Run, detail string) error
}

// gate is Tenants.Gate, or unbound without an integration.
func (s *Service) gate(ctx context.Context, tenant string) (bool, error) {
	if s.tenants == nil {
		return false, nil
	}
	return s.tenants.Gate(ctx, tenant)
}

// runChanged tells the integration of a run's new state, in tx.
func (s *Service) runChanged(ctx context.Context, tx store.Tx, r *store.Run, detail string) error {
	if s.tenants == nil {
		return nil
	}
	return s.tenants.RunChanged(ctx, tx, s.checked(ctx, tx, r), detail)
}

package control

import (
	"context"

	"github.com/jobplane/jobplane/internal/store"
)

// A repository an installation stops granting ends the repository's open
// runs when the loss is delivered (package githubapp). The claim and the
// Actions dispatch and exchange check it again in the transaction that
// would hand out an attempt, so that an attempt never goes out for a
// repository the installation no longer grants, whatever the order in
// which the loss and the claim were committed.

// repoWithdrawnActor is the actor of the audit event of a run ended this way.
const repoWithdrawnActor = "system:github-access"

// repoWithdrawn reports, in tx, why the attempt of run may no longer be
// handed out ("" when it may). bound says the tenant is an installation's.
func (s *Service) repoWithdrawn(ctx context.Context, tx store.Tx, tenant, repo string, bound bool) (string, error) {
	if !bound || repo == "" || s.tenants == nil {
		return "", nil
	}
	return s.tenants.RepoWithdrawnTx(ctx, tx, tenant, repo)
}

// endWithdrawn ends an attempt (claimed or queued) and its run cancelled
// with reason: on the run's timeline, its Check Run (which the outbox
// then drops, GitHub refusing it) and the audit log.
func (s *Service) endWithdrawn(ctx context.Context, tx store.Tx, w runWriter, r *store.Run, a *store.Attempt, reason string) error {
	now, err := tx.Now(ctx, s.clock.NowOrNil())
	if err != nil {
		return err
	}
	s.log.InfoContext(ctx, "control: attempt not handed out", "run_id", r.ID, "attempt_id", a.ID, "reason", reason)
	r.WaitingFor = ""
	return s.endAttempt(ctx, tx, w, r, a, store.AttemptCancelled, nil, now, repoWithdrawnActor, reason)
}

package control

import (
	"context"
	"errors"
	"sync"

	"github.com/jobplane/jobplane/internal/authn"
	"github.com/jobplane/jobplane/internal/store"
)

// ActionCrossTenantReference is the audit action of a runner that named an
// attempt, run or artifact of another tenant (RELIABILITY MT2).
const ActionCrossTenantReference = "security.cross_tenant_reference"

// crossTenantWatch collects what one signed request named of another
// tenant. The refusal rolls back the request's transaction, and with it
// anything written there, so the notes are kept outside it and written by
// FlushCrossTenant in a small transaction of their own.
type crossTenantWatch struct {
	route string
	mu    sync.Mutex
	kinds []string
}

type crossTenantKey struct{}

// WatchCrossTenant prepares ctx for one signed request on route. Call flush
// once the request's own transactions are over and before the answer is
// written, so that the event exists when the caller sees the refusal.
func (s *Service) WatchCrossTenant(ctx context.Context, route string, call *authn.SignedCall) (context.Context, func()) {
	w := &crossTenantWatch{route: route}
	return context.WithValue(ctx, crossTenantKey{}, w), func() { s.flushCrossTenant(context.WithoutCancel(ctx), call, w) }
}

// noteCrossTenant records the kind of identifier ("attempt", "run",
// "artifact") a runner named that exists in another tenant. Only the kind
// is kept: the other tenant's identifiers and data stay out of this
// tenant's audit log.
func noteCrossTenant(ctx context.Context, callerTenant, kind, ownerTenant string) {
	if ownerTenant == "" || ownerTenant == callerTenant {
		return
	}
	w, _ := ctx.Value(crossTenantKey{}).(*crossTenantWatch)
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, k := range w.kinds {
		if k == kind {
			return
		}
	}
	w.kinds = append(w.kinds, kind)
}

// refusedAttempt is checkAttempt's one call on refusal: a (nil when the
// attempt does not exist) or the run the headers name belonging to another
// tenant is noted. The run is read only on this refusal path.
func refusedAttempt(ctx context.Context, tx store.Tx, call *authn.SignedCall, a *store.Attempt) {
	if !watching(ctx) {
		return
	}
	// Row-level security (MT3) hides other tenants' rows from the
	// request's own scope, so the owner is read in a system scope, for the
	// audit only: the answer stays the one for an unknown ID.
	probe := store.WithSystem(ctx, "cross-tenant probe")
	if a == nil && call.Attempt != "" {
		a, _ = tx.AttemptGetByID(probe, call.Attempt, false)
	}
	if a != nil {
		noteCrossTenant(ctx, call.Runner.Tenant, "attempt", a.Tenant)
	}
	if call.Run == "" {
		return
	}
	if r, err := tx.RunGetByID(probe, call.Run, false); err == nil {
		noteCrossTenant(ctx, call.Runner.Tenant, "run", r.Tenant)
	}
}

// watching reports whether ctx collects cross-tenant references.
func watching(ctx context.Context) bool {
	w, _ := ctx.Value(crossTenantKey{}).(*crossTenantWatch)
	return w != nil
}

// probeTenant reads, for the audit only, which tenant owns an object the
// caller's scope could not see; "" when none does.
func probeTenant(ctx context.Context, q store.Queries, kind, id string) string {
	if !watching(ctx) {
		return ""
	}
	probe := store.WithSystem(ctx, "cross-tenant probe")
	switch kind {
	case "attempt":
		if a, err := q.AttemptGetByID(probe, id, false); err == nil {
			return a.Tenant
		}
	case "artifact":
		if a, err := q.ArtifactGetByID(probe, id); err == nil {
			return a.Tenant
		}
	}
	return ""
}

func (s *Service) flushCrossTenant(ctx context.Context, call *authn.SignedCall, w *crossTenantWatch) {
	w.mu.Lock()
	kinds := append([]string(nil), w.kinds...)
	w.mu.Unlock()
	if len(kinds) == 0 {
		return
	}
	err := s.store.InTx(ctx, func(tx store.Tx) error {
		return s.audit(ctx, tx, call.Runner.Tenant, "runner:"+call.Runner.ID, ActionCrossTenantReference, call.Runner.ID,
			map[string]any{"route": w.route, "kinds": kinds})
	})
	// The caller already has its refusal; a lost security note must not turn
	// it into a 500, but it is logged for the operator.
	if err != nil && !errors.Is(err, context.Canceled) {
		s.log.ErrorContext(ctx, "audit of a cross-tenant reference failed", "runner", call.Runner.ID, "route", w.route, "err", err)
	}
}

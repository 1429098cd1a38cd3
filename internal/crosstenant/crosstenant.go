package crosstenant

import (
	"context"
	"errors"
	"log/slog"
	"sync"

	"github.com/jobplane/jobplane/internal/audit"
	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/principal"
	"github.com/jobplane/jobplane/internal/store"
)

// Action is the audit action of a runner that named an attempt, run or
// artifact of another tenant (MT2, docs/operations.md).
const Action = "security.cross_tenant_reference"

// watch collects what one signed request named of another tenant. The
// refusal rolls back the request's transaction, and with it anything
// written there, so the notes are kept outside it and written by the
// flush in a small transaction of their own.
type watch struct {
	route string
	mu    sync.Mutex
	kinds []string
}

type watchKey struct{}

// Watcher writes the watches' audit events.
type Watcher struct {
	Store  store.Store
	Clock  clock.Clock
	Logger *slog.Logger
}

// Watch prepares ctx for one signed request on route. Call flush once the
// request's own transactions are over and before the answer is written,
// so that the event exists when the caller sees the refusal.
func (wr Watcher) Watch(ctx context.Context, route string, call *principal.RunnerCall) (context.Context, func()) {
	w := &watch{route: route}
	return context.WithValue(ctx, watchKey{}, w), func() { wr.flush(context.WithoutCancel(ctx), call, w) }
}

// Note records the kind of identifier ("attempt", "run", "artifact") a
// runner of callerTenant named that exists in ownerTenant, when that is
// another tenant and ctx is watched.
func Note(ctx context.Context, callerTenant, kind, ownerTenant string) {
	if ownerTenant == "" || ownerTenant == callerTenant {
		return
	}
	w, _ := ctx.Value(watchKey{}).(*watch)
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

// RefusedAttempt is the attempt check's one call on refusal: a (nil when
// the attempt does not exist) or the run the call names belonging to
// another tenant is noted. The run is read only on this refusal path.
func RefusedAttempt(ctx context.Context, tx store.Tx, call *principal.RunnerCall, a *store.Attempt) {
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
		Note(ctx, call.Runner.Tenant, "attempt", a.Tenant)
	}
	if call.Run == "" {
		return
	}
	if r, err := tx.RunGetByID(probe, call.Run, false); err == nil {
		Note(ctx, call.Runner.Tenant, "run", r.Tenant)
	}
}

// watching reports whether ctx collects cross-tenant references.
func watching(ctx context.Context) bool {
	w, _ := ctx.Value(watchKey{}).(*watch)
	return w != nil
}

// Probe reads, for the audit only, which tenant owns an object ("attempt"
// or "artifact") the caller's scope could not see; "" when none does, or
// when ctx is not watched.
func Probe(ctx context.Context, q store.Queries, kind, id string) string {
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

func (wr Watcher) flush(ctx context.Context, call *principal.RunnerCall, w *watch) {
	w.mu.Lock()
	kinds := append([]string(nil), w.kinds...)
	w.mu.Unlock()
	if len(kinds) == 0 {
		return
	}
	err := wr.Store.InTx(ctx, func(tx store.Tx) error {
		return audit.Recorder{Clock: wr.Clock}.Append(ctx, tx, call.Runner.Tenant, "runner:"+call.Runner.ID, Action, call.Runner.ID,
			map[string]any{"route": w.route, "kinds": kinds})
	})
	// The caller already has its refusal; a lost security note must not turn
	// it into a 500, but it is logged for the operator.
	if err != nil && !errors.Is(err, context.Canceled) && wr.Logger != nil {
		wr.Logger.ErrorContext(ctx, "audit of a cross-tenant reference failed", "runner_id", call.Runner.ID, "route", w.route, "error", err)
	}
}

package api

import (
	"context"
	"fmt"
	"net/http"

	"github.com/jobplane/jobplane/internal/principal"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/retention"
	"github.com/jobplane/jobplane/internal/store"
)

// Pruner is the retention sweeper as the admin routes use it.
type Pruner interface {
	Plan(ctx context.Context, tenant string, limit int) ([]retention.Planned, error)
	Sweep(ctx context.Context) (retention.Report, error)
}

// maxPlanLimit bounds one dry run's list.
const maxPlanLimit = 1000

func (h *Handler) routesRetention(m *routeMux, p Pruner) {
	// admin checks the caller, then that this server has a sweeper.
	admin := func(w http.ResponseWriter, actor principal.Actor) bool {
		err := principal.RequireAdmin(actor)
		if err == nil && p == nil {
			err = fmt.Errorf("this server runs no retention sweep: %w", protocol.ErrUnavailable)
		}
		if err != nil {
			writeError(w, h.log, err)
			return false
		}
		return true
	}
	m.HandleFunc("GET /v1/admin/prune", h.user(func(w http.ResponseWriter, r *http.Request, actor principal.Actor) {
		if !admin(w, actor) {
			return
		}
		limit, err := queryInt(r, "limit")
		if err != nil {
			writeError(w, h.log, err)
			return
		}
		if limit == 0 {
			limit = 100
		}
		limit = min(limit, maxPlanLimit)
		// An admin sees what would go of its own tenant only: the sweep is
		// cross-tenant, the listing is not.
		plan, err := p.Plan(r.Context(), actor.TenantID, int(limit))
		if err != nil {
			writeError(w, h.log, store.Refusal(err))
			return
		}
		if plan == nil {
			plan = []retention.Planned{}
		}
		writeJSON(w, http.StatusOK, protocol.PrunePlan{Items: plan})
	}))
	m.HandleFunc("POST /v1/admin/prune", h.user(func(w http.ResponseWriter, r *http.Request, actor principal.Actor) {
		if !admin(w, actor) {
			return
		}
		rep, err := p.Sweep(r.Context())
		if err != nil {
			writeError(w, h.log, store.Refusal(err))
			return
		}
		writeJSON(w, http.StatusOK, rep)
	}))
}

package api

import (
	"fmt"
	"net/http"

	"github.com/jobplane/jobplane/internal/principal"
	"github.com/jobplane/jobplane/internal/protocol"
)

// listSchedules answers GET /v1/schedules: every schedule of the channels'
// active catalogs with its next firing (docs/schedules.md). Any API token
// may read it.
func (h *Handler) listSchedules(w http.ResponseWriter, r *http.Request, actor principal.Actor) {
	if h.sched == nil {
		writeError(w, h.log, fmt.Errorf("no definitions repository configured: %w", protocol.ErrCatalogUnavailable))
		return
	}
	v, err := h.sched.List(r.Context(), actor)
	if err != nil {
		writeError(w, h.log, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

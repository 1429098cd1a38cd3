package api

import (
	"net/http"

	"github.com/jobplane/jobplane/internal/principal"
)

// listSchedules answers GET /v1/schedules: every schedule of the channels'
// active catalogs with its next firing (docs/schedules.md). Any API token
// may read it.
func (h *Handler) listSchedules(w http.ResponseWriter, r *http.Request, actor principal.Actor) {
	v, err := h.svc.ListSchedules(r.Context(), actor)
	if err != nil {
		writeError(w, h.log, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

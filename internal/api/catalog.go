package api

import (
	"net/http"

	"github.com/jobplane/jobplane/internal/principal"
)

// Catalog API (docs/protocol.md): jobs of a channel's active commit, and the
// active and rejected commits of every channel. Reading needs any API
// token; syncing is admin only.

func (h *Handler) listJobs(w http.ResponseWriter, r *http.Request, actor principal.Actor) {
	q := r.URL.Query()
	v, err := h.cats.ListJobs(r.Context(), actor, q.Get("channel"), q.Get("ref"))
	if err != nil {
		writeError(w, h.log, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

func (h *Handler) getJob(w http.ResponseWriter, r *http.Request, actor principal.Actor) {
	q := r.URL.Query()
	v, err := h.cats.ShowJob(r.Context(), actor, q.Get("channel"), q.Get("ref"), r.PathValue("name"))
	if err != nil {
		writeError(w, h.log, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

func (h *Handler) listCatalogs(w http.ResponseWriter, r *http.Request, actor principal.Actor) {
	v, err := h.cats.Catalogs(r.Context(), actor)
	if err != nil {
		writeError(w, h.log, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

func (h *Handler) syncCatalogs(w http.ResponseWriter, r *http.Request, actor principal.Actor) {
	v, err := h.cats.SyncCatalogs(r.Context(), actor)
	if err != nil {
		writeError(w, h.log, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

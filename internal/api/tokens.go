package api

import (
	"net/http"
	"strings"

	"github.com/jobplane/jobplane/internal/control"
	"github.com/jobplane/jobplane/internal/creds"
	"github.com/jobplane/jobplane/internal/principal"
	"github.com/jobplane/jobplane/internal/protocol"
)

func (h *Handler) jwks(w http.ResponseWriter, r *http.Request) {
	c := h.svc.Tokens()
	if c == nil {
		writeError(w, h.log, protocol.ErrNotFound)
		return
	}
	b, err := c.JWKS()
	if err != nil {
		writeError(w, h.log, err)
		return
	}
	w.Header().Set("Content-Type", "application/jwk-set+json")
	w.Header().Set("Cache-Control", "max-age=60")
	_, _ = w.Write(b)
}

func (h *Handler) discovery(w http.ResponseWriter, r *http.Request) {
	if h.svc.Tokens() == nil {
		writeError(w, h.log, protocol.ErrNotFound)
		return
	}
	b, err := creds.DiscoveryDocument(strings.TrimRight(h.publicURL, "/"))
	if err != nil {
		writeError(w, h.log, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}

// runIdentity tells a job who it is, as the control plane sees it.
func (h *Handler) runIdentity(w http.ResponseWriter, r *http.Request, c *control.RunCaller) {
	writeJSON(w, http.StatusOK, map[string]any{
		"run_id": c.Run.ID, "attempt_id": c.Attempt.ID, "job": c.Run.Job, "channel": c.Run.Channel,
		"commit": c.Run.Commit, "grants": c.Claims.Grants, "expires_at": c.Claims.Expiry.UTC(),
	})
}

func (h *Handler) rotateSigningKeys(w http.ResponseWriter, r *http.Request, actor principal.Actor) {
	kid, err := h.svc.RotateSigningKeys(r.Context(), actor)
	if err != nil {
		writeError(w, h.log, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"kid": kid})
}

func (h *Handler) runConnectors(w http.ResponseWriter, r *http.Request, c *control.RunCaller) {
	out, err := h.svc.IssueConnectors(r.Context(), c)
	if err != nil {
		writeError(w, h.log, err)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, out)
}

func (h *Handler) setSecret(w http.ResponseWriter, r *http.Request, actor principal.Actor) {
	var req struct {
		Value string `json:"value"`
	}
	if err := readJSON(r, &req); err != nil {
		writeError(w, h.log, err)
		return
	}
	if err := h.svc.SetSecret(r.Context(), actor, r.PathValue("name"), r.URL.Query().Get("channel"), req.Value); err != nil {
		writeError(w, h.log, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

package api

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/jobplane/jobplane/internal/authn"
	"github.com/jobplane/jobplane/internal/creds"
	"github.com/jobplane/jobplane/internal/principal"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/runcreds"
)

func (h *Handler) jwks(w http.ResponseWriter, r *http.Request) {
	c := h.creds.Keys()
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
	if h.creds.Keys() == nil {
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
func (h *Handler) runIdentity(w http.ResponseWriter, r *http.Request, c *runcreds.RunCaller) {
	writeJSON(w, http.StatusOK, map[string]any{
		"run_id": c.Run.ID, "attempt_id": c.Attempt.ID, "job": c.Run.Job, "channel": c.Run.Channel,
		"commit": c.Run.Commit, "grants": c.Claims.Grants, "expires_at": c.Claims.Expiry.UTC(),
	})
}

// runLease tells a job's supervisor its attempt's current lease. It
// authenticates the run token itself: an ended attempt is 410, not the 401
// of h.job.
func (h *Handler) runLease(w http.ResponseWriter, r *http.Request) {
	tok, ok := authn.BearerToken(r)
	if !ok || !looksLikeJWS(tok) {
		writeError(w, h.log, fmt.Errorf("a run token is required: %w", protocol.ErrUnauthorized))
		return
	}
	out, err := h.creds.RunLease(r.Context(), tok, r.URL.Query().Get("attempt"))
	if err != nil {
		writeError(w, h.log, err)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, out)
}

func (h *Handler) rotateSigningKeys(w http.ResponseWriter, r *http.Request, actor principal.Actor) {
	kid, err := h.creds.RotateSigningKeys(r.Context(), actor)
	if err != nil {
		writeError(w, h.log, err)
		return
	}
	writeJSON(w, http.StatusOK, protocol.SigningKeyRotation{KID: kid})
}

func (h *Handler) runConnectors(w http.ResponseWriter, r *http.Request, c *runcreds.RunCaller) {
	out, err := h.creds.IssueConnectors(r.Context(), c)
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
	if err := h.creds.SetSecret(r.Context(), actor, r.PathValue("name"), r.URL.Query().Get("channel"), req.Value); err != nil {
		writeError(w, h.log, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

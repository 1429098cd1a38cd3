package api

import (
	"net/http"

	"github.com/jobplane/jobplane/internal/authn"
	"github.com/jobplane/jobplane/internal/principal"
	"github.com/jobplane/jobplane/internal/protocol"
)

func (h *Handler) listLeases(w http.ResponseWriter, r *http.Request, actor principal.Actor) {
	holders, err := h.lease.List(r.Context(), actor, r.URL.Query().Get("prefix"))
	if err != nil {
		writeError(w, h.log, err)
		return
	}
	writeJSON(w, http.StatusOK, protocol.LeaseList{Leases: holders})
}

func (h *Handler) showLease(w http.ResponseWriter, r *http.Request, actor principal.Actor) {
	v, err := h.lease.Show(r.Context(), actor, r.PathValue("key"))
	if err != nil {
		writeError(w, h.log, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

func (h *Handler) releaseLease(w http.ResponseWriter, r *http.Request, actor principal.Actor) {
	var req protocol.LeaseReleaseRequest
	if err := readJSON(r, &req); err != nil {
		writeError(w, h.log, err)
		return
	}
	v, err := h.lease.ForceRelease(r.Context(), actor, r.PathValue("key"), req.Reason)
	if err != nil {
		writeError(w, h.log, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// verifyLease answers a downstream system, authenticated with an API token
// or a job's run token, whether a fencing token is still current.
func (h *Handler) verifyLease(w http.ResponseWriter, r *http.Request) {
	var tenant string
	if tok, ok := authn.BearerToken(r); ok && looksLikeJWS(tok) {
		c, err := h.creds.VerifyRunToken(r.Context(), tok)
		if err != nil {
			writeError(w, h.log, err)
			return
		}
		tenant = c.Run.Tenant
	} else {
		p, err := h.auth.Principal(r.Context(), r)
		if err != nil {
			writeError(w, h.log, err)
			return
		}
		tenant = p.Tenant
	}
	var req protocol.LeaseVerifyRequest
	if err := readJSON(r, &req); err != nil {
		writeError(w, h.log, err)
		return
	}
	if req.Key == "" || req.FencingToken <= 0 {
		writeError(w, h.log, &protocol.FieldError{Field: "key", Err: protocol.ErrBadRequest})
		return
	}
	current, runID, err := h.lease.Verify(r.Context(), tenant, req.Key, req.FencingToken)
	if err != nil {
		writeError(w, h.log, err)
		return
	}
	writeJSON(w, http.StatusOK, protocol.LeaseVerification{Current: current, RunID: runID})
}

package api

import (
	"net/http"

	"github.com/jobplane/jobplane/internal/authn"
	"github.com/jobplane/jobplane/internal/protocol"
)

func (h *Handler) register(w http.ResponseWriter, r *http.Request) {
	tok, ok := authn.BearerToken(r)
	if !ok {
		writeError(w, h.log, protocol.ErrRegistrationTokenInvalid)
		return
	}
	var req protocol.RegisterRequest
	if err := readJSON(r, &req); err != nil {
		writeError(w, h.log, err)
		return
	}
	rn, err := h.admin.Register(r.Context(), tok, &req)
	if err != nil {
		writeError(w, h.log, err)
		return
	}
	writeJSON(w, http.StatusCreated, protocol.RegisterResponse{RunnerID: rn.ID, Tenant: rn.Tenant, Pool: rn.Pool, Labels: rn.Labels, Status: rn.Status})
}

func (h *Handler) heartbeat(w http.ResponseWriter, r *http.Request, call *authn.SignedCall) {
	var req protocol.HeartbeatRequest
	if err := decode(call.Body, &req); err != nil {
		writeError(w, h.log, err)
		return
	}
	resp, err := h.svc.Heartbeat(r.Context(), call, &req)
	if err != nil {
		writeError(w, h.log, err)
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

func (h *Handler) claim(w http.ResponseWriter, r *http.Request, call *authn.SignedCall) {
	var req protocol.ClaimRequest
	if err := decode(call.Body, &req); err != nil {
		writeError(w, h.log, err)
		return
	}
	if req.Max != 0 {
		// A runner that asks for several attempts gets a list.
		asgs, err := h.svc.ClaimBatch(r.Context(), call, &req)
		if err != nil {
			writeError(w, h.log, err)
			return
		}
		if len(asgs) == 0 {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		writeJSON(w, http.StatusOK, protocol.ClaimBatch{Assignments: asgs})
		return
	}
	asg, err := h.svc.Claim(r.Context(), call, &req)
	if err != nil {
		writeError(w, h.log, err)
		return
	}
	if asg == nil {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	writeJSON(w, http.StatusOK, asg)
}

func (h *Handler) renew(w http.ResponseWriter, r *http.Request, call *authn.SignedCall) {
	var req struct{}
	if err := decode(call.Body, &req); err != nil {
		writeError(w, h.log, err)
		return
	}
	resp, err := h.svc.Renew(r.Context(), call)
	if err != nil {
		writeError(w, h.log, err)
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

func (h *Handler) appendLogs(w http.ResponseWriter, r *http.Request, call *authn.SignedCall) {
	var req protocol.LogsRequest
	if err := decode(call.Body, &req); err != nil {
		writeError(w, h.log, err)
		return
	}
	if err := h.svc.AppendLogs(r.Context(), call, &req); err != nil {
		writeError(w, h.log, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (h *Handler) relinquish(w http.ResponseWriter, r *http.Request, call *authn.SignedCall) {
	var req protocol.RelinquishRequest
	if err := decode(call.Body, &req); err != nil {
		writeError(w, h.log, err)
		return
	}
	if err := h.svc.Relinquish(r.Context(), call, &req); err != nil {
		writeError(w, h.log, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "relinquished"})
}

func (h *Handler) result(w http.ResponseWriter, r *http.Request, call *authn.SignedCall) {
	var req protocol.ResultRequest
	if err := decode(call.Body, &req); err != nil {
		writeError(w, h.log, err)
		return
	}
	resp, err := h.svc.Result(r.Context(), call, &req)
	if err != nil {
		writeError(w, h.log, err)
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

func (h *Handler) results(w http.ResponseWriter, r *http.Request, call *authn.SignedCall) {
	var req protocol.ResultsRequest
	if err := decode(call.Body, &req); err != nil {
		writeError(w, h.log, err)
		return
	}
	outs, err := h.svc.Results(r.Context(), call, &req)
	if err != nil {
		writeError(w, h.log, err)
		return
	}
	resp := protocol.ResultsResponse{Results: make([]protocol.ResultAnswer, len(outs))}
	for i, o := range outs {
		resp.Results[i] = protocol.ResultAnswer{AttemptID: o.AttemptID, RunState: o.RunState}
		if o.Err != nil {
			p := problemOf(h.log, o.Err)
			resp.Results[i].Error = &p
		}
	}
	writeJSON(w, http.StatusOK, resp)
}

func (h *Handler) rotateKey(w http.ResponseWriter, r *http.Request, call *authn.SignedCall) {
	var req protocol.RotateKeyRequest
	if err := decode(call.Body, &req); err != nil {
		writeError(w, h.log, err)
		return
	}
	if err := h.admin.RotateKey(r.Context(), call, &req); err != nil {
		writeError(w, h.log, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "rotated"})
}

// actionsExchange trades a GitHub Actions workflow's OIDC token (Bearer)
// for the attempt it was dispatched for (docs/github.md).
func (h *Handler) actionsExchange(w http.ResponseWriter, r *http.Request) {
	tok, ok := authn.BearerToken(r)
	if !ok {
		writeError(w, h.log, protocol.ErrOIDCTokenInvalid)
		return
	}
	var req protocol.ActionsExchangeRequest
	if err := readJSON(r, &req); err != nil {
		writeError(w, h.log, err)
		return
	}
	resp, err := h.act.Exchange(r.Context(), tok, &req)
	if err != nil {
		writeError(w, h.log, err)
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

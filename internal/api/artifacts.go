package api

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/jobplane/jobplane/internal/authn"
	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/principal"
	"github.com/jobplane/jobplane/internal/protocol"
)

// routesArtifacts registers the artifact and source routes that are not
// runner-signed: the capability and ticket URLs (the secret in the path is
// the authority) and the people-facing listing and download.
func (h *Handler) routesArtifacts(m *http.ServeMux) {
	m.HandleFunc("PUT /v1/uploads/{capability}", h.upload)
	m.HandleFunc("GET /v1/sources/{ticket}", h.downloadSource)
	m.HandleFunc("GET /v1/runs/{id}/artifacts", h.user(h.listArtifacts))
	m.HandleFunc("GET /v1/runs/{id}/artifacts/{name}", h.user(h.downloadArtifact))
}

func (h *Handler) requestUpload(w http.ResponseWriter, r *http.Request, call *authn.SignedCall) {
	var req protocol.ArtifactRequest
	if err := decode(call.Body, &req); err != nil {
		writeError(w, h.log, err)
		return
	}
	resp, err := h.svc.RequestUpload(r.Context(), call, &req)
	if err != nil {
		writeError(w, h.log, err)
		return
	}
	writeJSON(w, http.StatusCreated, resp)
}

func (h *Handler) attemptSource(w http.ResponseWriter, r *http.Request, call *authn.SignedCall) {
	var req struct{}
	if err := decode(call.Body, &req); err != nil {
		writeError(w, h.log, err)
		return
	}
	resp, err := h.svc.AttemptSource(r.Context(), call)
	if err != nil {
		writeError(w, h.log, err)
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

// upload streams the body into the service. The read deadline cuts off a
// trickling client; a refused upload closes the connection, so that the
// rest of an oversized body is never read (RELIABILITY A1).
func (h *Handler) upload(w http.ResponseWriter, r *http.Request) {
	_ = http.NewResponseController(w).SetReadDeadline(clock.Real{}.Now().Add(h.svc.UploadTimeout()))
	resp, err := h.svc.Upload(r.Context(), r.PathValue("capability"), r.ContentLength, r.Body)
	if err != nil {
		w.Header().Set("Connection", "close")
		writeError(w, h.log, err)
		return
	}
	writeJSON(w, http.StatusCreated, resp)
}

func (h *Handler) downloadSource(w http.ResponseWriter, r *http.Request) {
	wrote := false
	err := h.svc.RedeemSource(r.Context(), r.PathValue("ticket"), func() io.Writer {
		wrote = true
		w.Header().Set("Content-Type", "application/gzip")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusOK)
		return w
	})
	switch {
	case err == nil:
	case !wrote:
		writeError(w, h.log, err)
	default:
		// Headers are gone: break the connection so the client sees a
		// truncated download instead of a short, valid-looking archive.
		h.log.Error("api: source archive failed mid-stream", "err", err)
		panic(http.ErrAbortHandler)
	}
}

func (h *Handler) listArtifacts(w http.ResponseWriter, r *http.Request, actor principal.Actor) {
	arts, err := h.svc.RunArtifacts(r.Context(), actor, r.PathValue("id"))
	if err != nil {
		writeError(w, h.log, err)
		return
	}
	writeJSON(w, http.StatusOK, protocol.ArtifactList{Artifacts: arts})
}

func (h *Handler) downloadArtifact(w http.ResponseWriter, r *http.Request, actor principal.Actor) {
	art, rc, err := h.svc.OpenArtifact(r.Context(), actor, r.PathValue("id"), r.PathValue("name"))
	if err != nil {
		writeError(w, h.log, err)
		return
	}
	defer rc.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(art.Size, 10))
	w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", art.Name))
	w.Header().Set("Jobplane-Artifact-Sha256", art.SHA256)
	w.WriteHeader(http.StatusOK)
	if _, err := io.Copy(w, rc); err != nil && !errors.Is(err, r.Context().Err()) {
		h.log.Warn("api: artifact download interrupted", "err", err)
	}
}

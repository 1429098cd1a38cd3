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

// The refusals of a handler built without the artifact or the source
// ticket service.
var (
	errNoArtifacts = fmt.Errorf("this server stores no artifacts: %w", protocol.ErrUnavailable)
	errNoSources   = fmt.Errorf("this server has no source repositories: %w", protocol.ErrSourceUnavailable)
)

// routesArtifacts registers the artifact and source routes that are not
// runner-signed: the capability and ticket URLs (the secret in the path is
// the authority) and the people-facing listing and download.
func (h *Handler) routesArtifacts(m *routeMux) {
	m.HandleFunc("PUT /v1/uploads/{capability}", h.upload)
	m.HandleFunc("GET /v1/sources/{ticket}", h.downloadSource)
	m.HandleFunc("GET /v1/runs/{id}/artifacts", h.user(h.listArtifacts))
	m.HandleFunc("GET /v1/runs/{id}/artifacts/{name}", h.user(h.downloadArtifact))
}

func (h *Handler) requestUpload(w http.ResponseWriter, r *http.Request, call *authn.SignedCall) {
	if h.arts == nil {
		writeError(w, h.log, errNoArtifacts)
		return
	}
	var req protocol.ArtifactRequest
	if err := decode(call.Body, &req); err != nil {
		writeError(w, h.log, err)
		return
	}
	resp, err := h.arts.RequestUpload(r.Context(), call, &req)
	if err != nil {
		writeError(w, h.log, err)
		return
	}
	writeJSON(w, http.StatusCreated, resp)
}

func (h *Handler) attemptSource(w http.ResponseWriter, r *http.Request, call *authn.SignedCall) {
	if h.srcs == nil {
		writeError(w, h.log, errNoSources)
		return
	}
	var req struct{}
	if err := decode(call.Body, &req); err != nil {
		writeError(w, h.log, err)
		return
	}
	resp, err := h.srcs.AttemptSource(r.Context(), call)
	if err != nil {
		writeError(w, h.log, err)
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

// jobCall authenticates a job's run token for the endpoints that check its
// attempt themselves: an ended attempt is 410 attempt_ended, not the 401 of
// h.job.
func (h *Handler) jobCall(fn func(http.ResponseWriter, *http.Request, *principal.JobCall)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		tok, ok := authn.BearerToken(r)
		if !ok || !looksLikeJWS(tok) {
			writeError(w, h.log, fmt.Errorf("a run token is required: %w", protocol.ErrUnauthorized))
			return
		}
		call, err := h.creds.JobCall(tok)
		if err != nil {
			writeError(w, h.log, err)
			return
		}
		fn(w, r, call)
	}
}

// runSource is POST /v1/runner/attempt/source for the job itself, with its
// run token: a pod that holds no runner key fetches its source this way.
func (h *Handler) runSource(w http.ResponseWriter, r *http.Request, call *principal.JobCall) {
	var req struct{}
	if err := readJSON(r, &req); err != nil {
		writeError(w, h.log, err)
		return
	}
	if h.srcs == nil {
		writeError(w, h.log, errNoSources)
		return
	}
	resp, err := h.srcs.JobSource(r.Context(), call)
	if err != nil {
		writeError(w, h.log, err)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, resp)
}

// runArtifact is POST /v1/runner/attempt/artifacts for the job itself, with
// its run token; the bytes go to the capability's upload URL as a runner's.
func (h *Handler) runArtifact(w http.ResponseWriter, r *http.Request, call *principal.JobCall) {
	var req protocol.ArtifactRequest
	if err := readJSON(r, &req); err != nil {
		writeError(w, h.log, err)
		return
	}
	if h.arts == nil {
		writeError(w, h.log, errNoArtifacts)
		return
	}
	resp, err := h.arts.JobUpload(r.Context(), call, &req)
	if err != nil {
		writeError(w, h.log, err)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusCreated, resp)
}

// upload streams the body into the service. The read deadline cuts off a
// trickling client; a refused upload closes the connection, so that the
// rest of an oversized body is never read (RELIABILITY A1).
func (h *Handler) upload(w http.ResponseWriter, r *http.Request) {
	if h.arts == nil {
		writeError(w, h.log, errNoArtifacts)
		return
	}
	_ = http.NewResponseController(w).SetReadDeadline(clock.Real{}.Now().Add(h.arts.UploadTimeout()))
	resp, err := h.arts.Upload(r.Context(), r.PathValue("capability"), r.ContentLength, r.Body)
	if err != nil {
		w.Header().Set("Connection", "close")
		writeError(w, h.log, err)
		return
	}
	writeJSON(w, http.StatusCreated, resp)
}

func (h *Handler) downloadSource(w http.ResponseWriter, r *http.Request) {
	if h.srcs == nil {
		writeError(w, h.log, errNoSources)
		return
	}
	wrote := false
	err := h.srcs.RedeemSource(r.Context(), r.PathValue("ticket"), func() io.Writer {
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
	if h.arts == nil {
		writeError(w, h.log, errNoArtifacts)
		return
	}
	arts, err := h.arts.RunArtifacts(r.Context(), actor, r.PathValue("id"))
	if err != nil {
		writeError(w, h.log, err)
		return
	}
	writeJSON(w, http.StatusOK, protocol.ArtifactList{Artifacts: arts})
}

func (h *Handler) downloadArtifact(w http.ResponseWriter, r *http.Request, actor principal.Actor) {
	if h.arts == nil {
		writeError(w, h.log, errNoArtifacts)
		return
	}
	art, rc, err := h.arts.OpenArtifact(r.Context(), actor, r.PathValue("id"), r.PathValue("name"))
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

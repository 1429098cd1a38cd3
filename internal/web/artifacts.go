package web

import (
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"

	"github.com/jobplane/jobplane/internal/protocol"
)

func (h *Handler) routesArtifacts(m *http.ServeMux) {
	m.HandleFunc("GET /runs/{id}/artifacts/{name}", h.user(h.downloadArtifact))
}

// downloadArtifact sends an artifact's bytes as a download: never rendered
// by the browser (attachment, octet-stream, nosniff, a sandboxing CSP), so
// an HTML artifact cannot run script on this origin.
func (h *Handler) downloadArtifact(w http.ResponseWriter, r *http.Request, s *session) {
	if h.arts == nil {
		h.renderError(w, r, s, fmt.Errorf("run %s has no artifact %q: %w", r.PathValue("id"), r.PathValue("name"), protocol.ErrNotFound))
		return
	}
	a, rc, err := h.arts.OpenArtifact(r.Context(), s.Actor, r.PathValue("id"), r.PathValue("name"))
	if err != nil {
		h.renderError(w, r, s, err)
		return
	}
	defer rc.Close()
	hd := w.Header()
	hd.Set("Content-Type", "application/octet-stream")
	hd.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": a.Name}))
	hd.Set("Content-Length", strconv.FormatInt(a.Size, 10))
	hd.Set("Content-Security-Policy", "sandbox; default-src 'none'")
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Artifact-SHA256", a.SHA256)
	w.WriteHeader(http.StatusOK)
	if _, err := io.Copy(w, rc); err != nil {
		h.log.Warn("web: artifact download interrupted", "run_id", r.PathValue("id"), "name", a.Name, "err", err)
	}
}

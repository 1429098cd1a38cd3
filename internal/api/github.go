package api

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/github"
	"github.com/jobplane/jobplane/internal/githubapp"
	"github.com/jobplane/jobplane/internal/principal"
	"github.com/jobplane/jobplane/internal/protocol"
)

// GitHubWebhook configures the GitHub webhook intake; without it the route
// does not exist.
type GitHubWebhook struct {
	Secrets github.WebhookSecrets
	// Clock decides whether the previous secret's overlap has ended.
	Clock clock.Clock
	// MaxBody is the largest body accepted (default github.MaxWebhookBody).
	MaxBody int64
}

// GitHubWebhookResponse is the answer to an accepted delivery.
type GitHubWebhookResponse struct {
	Delivery string `json:"delivery"`
	Outcome  string `json:"outcome"`
}

func (h *Handler) routesGitHub(m *routeMux, cfg *GitHubWebhook) {
	// Installations come only from deliveries; without the App there are
	// none and this answers 404.
	m.HandleFunc("POST /v1/github/installations/{id}/registration-tokens", h.user(h.createInstallationRegToken))
	m.HandleFunc("POST /v1/github/installations/{id}/principals", h.user(h.createInstallationPrincipal))
	m.HandleFunc("POST /v1/github/installations/{id}/principals/{name}/tokens", h.user(h.createInstallationToken))
	m.HandleFunc("DELETE /v1/github/installations/{id}/tokens/{token}", h.user(h.revokeInstallationToken))
	if cfg == nil {
		return
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.MaxBody <= 0 {
		cfg.MaxBody = github.MaxWebhookBody
	}
	m.HandleFunc("POST /v1/github/webhook", h.githubWebhook(cfg))
}

func installationID(r *http.Request) (int64, error) {
	inst, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || inst <= 0 {
		return 0, fmt.Errorf("installation ID must be a positive integer: %w", protocol.ErrBadRequest)
	}
	return inst, nil
}

// createInstallationPrincipal answers POST
// /v1/github/installations/{id}/principals (operator admins).
func (h *Handler) createInstallationPrincipal(w http.ResponseWriter, r *http.Request, actor principal.Actor) {
	gh, err := h.githubApp()
	if err != nil {
		writeError(w, h.log, err)
		return
	}
	inst, err := installationID(r)
	if err != nil {
		writeError(w, h.log, err)
		return
	}
	var req protocol.PrincipalRequest
	if err := readJSON(r, &req); err != nil {
		writeError(w, h.log, err)
		return
	}
	p, err := gh.CreateInstallationPrincipal(r.Context(), actor, inst, &req)
	if err != nil {
		writeError(w, h.log, err)
		return
	}
	writeJSON(w, http.StatusCreated, protocol.Principal{ID: p.ID, Tenant: p.Tenant, Name: p.Name, Kind: p.Kind, Admin: p.Admin, CreatedAt: p.CreatedAt.UTC()})
}

// createInstallationToken answers POST
// /v1/github/installations/{id}/principals/{name}/tokens (operator admins).
func (h *Handler) createInstallationToken(w http.ResponseWriter, r *http.Request, actor principal.Actor) {
	gh, err := h.githubApp()
	if err != nil {
		writeError(w, h.log, err)
		return
	}
	inst, err := installationID(r)
	if err != nil {
		writeError(w, h.log, err)
		return
	}
	var req protocol.PrincipalTokenRequest
	if err := readJSON(r, &req); err != nil {
		writeError(w, h.log, err)
		return
	}
	resp, err := gh.CreateInstallationToken(r.Context(), actor, inst, r.PathValue("name"), req.TTLSeconds)
	if err != nil {
		writeError(w, h.log, err)
		return
	}
	writeJSON(w, http.StatusCreated, resp)
}

// revokeInstallationToken answers DELETE
// /v1/github/installations/{id}/tokens/{token} (operator admins).
func (h *Handler) revokeInstallationToken(w http.ResponseWriter, r *http.Request, actor principal.Actor) {
	gh, err := h.githubApp()
	if err != nil {
		writeError(w, h.log, err)
		return
	}
	inst, err := installationID(r)
	if err != nil {
		writeError(w, h.log, err)
		return
	}
	if err := gh.RevokeInstallationToken(r.Context(), actor, inst, r.PathValue("token")); err != nil {
		writeError(w, h.log, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// createInstallationRegToken answers POST
// /v1/github/installations/{id}/registration-tokens (operator admins).
func (h *Handler) createInstallationRegToken(w http.ResponseWriter, r *http.Request, actor principal.Actor) {
	gh, err := h.githubApp()
	if err != nil {
		writeError(w, h.log, err)
		return
	}
	inst, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || inst <= 0 {
		writeError(w, h.log, fmt.Errorf("installation ID must be a positive integer: %w", protocol.ErrBadRequest))
		return
	}
	var req protocol.RegistrationTokenRequest
	if err := readJSON(r, &req); err != nil {
		writeError(w, h.log, err)
		return
	}
	resp, err := gh.CreateInstallationRegistrationToken(r.Context(), actor, inst, &req)
	if err != nil {
		writeError(w, h.log, err)
		return
	}
	writeJSON(w, http.StatusCreated, resp)
}

// githubWebhook answers POST /v1/github/webhook. Order matters: the size
// limit comes before any hashing (an unauthenticated caller must not make
// us hash 25 MB), the signature before any header or payload is believed,
// and only then does the service see the delivery.
func (h *Handler) githubWebhook(cfg *GitHubWebhook) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		tooLarge := fmt.Errorf("a webhook body is limited to %d bytes: %w", cfg.MaxBody, protocol.ErrTooLarge)
		if r.ContentLength > cfg.MaxBody {
			writeError(w, h.log, tooLarge)
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, cfg.MaxBody+1))
		if err != nil {
			writeError(w, h.log, protocol.BodyError(err))
			return
		}
		if int64(len(body)) > cfg.MaxBody {
			writeError(w, h.log, tooLarge)
			return
		}
		if err := cfg.Secrets.Verify(body, r.Header.Get("X-Hub-Signature-256"), cfg.Clock.Now()); err != nil {
			if errors.Is(err, github.ErrSignatureMissing) {
				writeError(w, h.log, fmt.Errorf("X-Hub-Signature-256 is required: %w", protocol.ErrWebhookSignatureMissing))
				return
			}
			writeError(w, h.log, fmt.Errorf("X-Hub-Signature-256 does not match the body: %w", protocol.ErrWebhookSignatureInvalid))
			return
		}
		gh, err := h.githubApp()
		if err != nil {
			writeError(w, h.log, err)
			return
		}
		d := githubapp.Delivery{ID: r.Header.Get("X-GitHub-Delivery"), Event: r.Header.Get("X-GitHub-Event"), Body: body}
		if !validDeliveryHeader(d.ID) || !validDeliveryHeader(d.Event) {
			writeError(w, h.log, fmt.Errorf("X-GitHub-Delivery and X-GitHub-Event are required: %w", protocol.ErrWebhookDeliveryInvalid))
			return
		}
		outcome, err := gh.HandleDelivery(r.Context(), d)
		if err != nil {
			writeError(w, h.log, err)
			return
		}
		writeJSON(w, http.StatusOK, GitHubWebhookResponse{Delivery: d.ID, Outcome: string(outcome)})
	}
}

// validDeliveryHeader accepts GitHub's GUIDs and event names: short, and
// only letters, digits, '-' and '_'.
func validDeliveryHeader(s string) bool {
	if s == "" || len(s) > 100 {
		return false
	}
	for _, c := range s {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_':
		default:
			return false
		}
	}
	return true
}

// githubApp is the GitHub App service, refusing when none is wired.
func (h *Handler) githubApp() (*githubapp.Service, error) {
	if h.gh == nil {
		return nil, fmt.Errorf("this server serves no GitHub App: %w", protocol.ErrNotFound)
	}
	return h.gh, nil
}

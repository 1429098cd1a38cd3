package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jobplane/jobplane/internal/admin"
	artbroker "github.com/jobplane/jobplane/internal/artifact/broker"
	"github.com/jobplane/jobplane/internal/audit"
	"github.com/jobplane/jobplane/internal/authn"
	"github.com/jobplane/jobplane/internal/catalogs"
	"github.com/jobplane/jobplane/internal/control"
	"github.com/jobplane/jobplane/internal/githubapp"
	"github.com/jobplane/jobplane/internal/githubapp/actions"
	"github.com/jobplane/jobplane/internal/lease"
	"github.com/jobplane/jobplane/internal/openapi"
	"github.com/jobplane/jobplane/internal/principal"
	"github.com/jobplane/jobplane/internal/problem"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/runcreds"
	"github.com/jobplane/jobplane/internal/schedule"
	"github.com/jobplane/jobplane/internal/source/tickets"
	"github.com/jobplane/jobplane/internal/store"
)

// Config wires the handlers.
type Config struct {
	Control *control.Service
	// Admin administers principals, tokens and runners.
	Admin *admin.Service
	// Creds verifies run tokens, issues connector credentials, keeps
	// secrets and rotates the signing keys (nil: run tokens, secrets and
	// connectors are not configured).
	Creds *runcreds.Service
	// Artifacts issues upload capabilities, receives uploads and serves
	// runs' artifacts (nil: refused as unavailable).
	Artifacts *artbroker.Service
	// Sources issues and redeems source tickets (nil: refused as
	// source_unavailable).
	Sources *tickets.Service
	// Schedules lists schedules (nil: refused as catalog_unavailable).
	Schedules *schedule.Service
	// Audit reads and verifies the audit log.
	Audit  *audit.Log
	Auth   *authn.Authenticator
	Logger *slog.Logger
	// Ready reports whether the server can serve (store reachable).
	Ready func(ctx context.Context) error
	// PublicURL is the run-token issuer (the server's external URL).
	PublicURL string
	// GitHub enables the GitHub webhook intake (api/github.go).
	GitHub *GitHubWebhook
	// Leases shows, verifies and breaks run leases (nil: Control's).
	Leases *lease.Service
	// GitHubApp handles webhook deliveries and the operator's
	// administration of installation tenants (nil: neither is served).
	GitHubApp *githubapp.Service
	// Actions exchanges GitHub Actions workflows' OIDC tokens for their
	// attempts (nil: the exchange is refused, as with the mode off).
	Actions *actions.Service
	// Catalogs records and shows what the definitions serve: catalogs
	// and jobs.
	Catalogs *catalogs.Service
	// Retention serves /v1/admin/prune (nil: not served).
	Retention Pruner
}

// Handler is the HTTP API.
type Handler struct {
	svc   *control.Service
	admin *admin.Service
	audit *audit.Log
	creds *runcreds.Service
	arts  *artbroker.Service
	srcs  *tickets.Service
	sched *schedule.Service
	gh    *githubapp.Service
	act   *actions.Service
	cats  *catalogs.Service
	lease *lease.Service
	auth  *authn.Authenticator
	log   *slog.Logger
	ready func(ctx context.Context) error
	mux   *http.ServeMux

	publicURL string
	patterns  []string
}

// New builds the handler and its routes.
func New(cfg Config) *Handler {
	h := &Handler{svc: cfg.Control, admin: cfg.Admin, audit: cfg.Audit, creds: cfg.Creds, arts: cfg.Artifacts, srcs: cfg.Sources, sched: cfg.Schedules, gh: cfg.GitHubApp, act: cfg.Actions, cats: cfg.Catalogs, auth: cfg.Auth, log: cfg.Logger, ready: cfg.Ready, mux: http.NewServeMux(), publicURL: cfg.PublicURL}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	if h.creds == nil {
		h.creds = runcreds.New(runcreds.Config{})
	}
	if h.lease = cfg.Leases; h.lease == nil && cfg.Control != nil {
		h.lease = cfg.Control.Leases()
	}
	m := &routeMux{ServeMux: h.mux, patterns: &h.patterns}
	m.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, 200, map[string]string{"status": "ok"}) })
	m.HandleFunc("GET /readyz", h.readyz)
	m.HandleFunc("GET "+openapi.Path, openapi.ServeHTTP)
	m.HandleFunc("GET /.well-known/jwks.json", h.jwks)
	m.HandleFunc("GET /.well-known/openid-configuration", h.discovery)
	m.HandleFunc("GET /v1/run", h.job(h.runIdentity))
	m.HandleFunc("GET /v1/run/connectors", h.job(h.runConnectors))
	m.HandleFunc("GET /v1/run/lease", h.runLease)
	m.HandleFunc("POST /v1/run/source", h.jobCall(h.runSource))
	m.HandleFunc("POST /v1/run/artifacts", h.jobCall(h.runArtifact))
	m.HandleFunc("PUT /v1/secrets/{name}", h.user(h.setSecret))
	m.HandleFunc("GET /v1/audit", h.user(h.listAudit))
	h.routesAudit(m)
	m.HandleFunc("GET /v1/leases", h.user(h.listLeases))
	m.HandleFunc("GET /v1/leases/{key}", h.user(h.showLease))
	m.HandleFunc("POST /v1/leases/{key}/release", h.user(h.releaseLease))
	m.HandleFunc("POST /v1/leases/verify", h.verifyLease)
	m.HandleFunc("GET /v1/jobs", h.user(h.listJobs))
	m.HandleFunc("GET /v1/jobs/{name}", h.user(h.getJob))
	m.HandleFunc("GET /v1/catalogs", h.user(h.listCatalogs))
	m.HandleFunc("GET /v1/schedules", h.user(h.listSchedules))
	m.HandleFunc("POST /v1/catalogs/sync", h.user(h.syncCatalogs))
	m.HandleFunc("POST /v1/admin/signing-keys/rotate", h.user(h.rotateSigningKeys))

	m.HandleFunc("POST /v1/runner/register", h.register)
	// Answered 404 not_found when the GitHub Actions mode is off.
	m.HandleFunc("POST /v1/actions/exchange", h.actionsExchange)
	for path, fn := range h.signedRoutes() {
		m.HandleFunc("POST "+path, h.signed(fn, deferredNonce[path]))
	}

	m.HandleFunc("POST /v1/runs", h.user(h.createRun))
	m.HandleFunc("POST /v1/runs/batch", h.user(h.createRuns))
	m.HandleFunc("GET /v1/runs", h.user(h.listRuns))
	m.HandleFunc("GET /v1/runs/{id}", h.user(h.getRun))
	m.HandleFunc("POST /v1/runs/{id}/cancel", h.user(h.cancelRun))
	m.HandleFunc("POST /v1/runs/{id}/approve", h.user(h.verdict(true)))
	m.HandleFunc("POST /v1/runs/{id}/reject", h.user(h.verdict(false)))
	m.HandleFunc("GET /v1/runs/{id}/logs", h.user(h.logs))
	h.routesArtifacts(m)

	m.HandleFunc("POST /v1/principals", h.user(h.createPrincipal))
	m.HandleFunc("POST /v1/principals/{name}/tokens", h.user(h.createToken))
	m.HandleFunc("DELETE /v1/tokens/{id}", h.user(h.revokeToken))
	m.HandleFunc("POST /v1/runners/registration-tokens", h.user(h.createRegToken))
	m.HandleFunc("GET /v1/runners", h.user(h.listRunners))
	m.HandleFunc("POST /v1/runners/{id}/disable", h.user(h.setRunnerStatus(store.RunnerDisabled)))
	m.HandleFunc("POST /v1/runners/{id}/enable", h.user(h.setRunnerStatus(store.RunnerActive)))
	h.routesGitHub(m, cfg.GitHub)
	h.routesRetention(m, cfg.Retention)
	return h
}

// routeMux is the router, remembering every pattern it is given so that
// tests can hold the routes against the OpenAPI document.
type routeMux struct {
	*http.ServeMux
	patterns *[]string
}

func (m *routeMux) HandleFunc(pattern string, fn func(http.ResponseWriter, *http.Request)) {
	*m.patterns = append(*m.patterns, pattern)
	m.ServeMux.HandleFunc(pattern, fn)
}

// Routes lists the patterns ("METHOD /path") the handler serves.
func (h *Handler) Routes() []string { return slices.Clone(h.patterns) }

// SignedRoutes lists every route that requires a runner signature; tests
// sweep it to prove none answers without one.
func (h *Handler) SignedRoutes() []string {
	out := make([]string, 0)
	for p := range h.signedRoutes() {
		out = append(out, p)
	}
	return out
}

func (h *Handler) signedRoutes() map[string]func(http.ResponseWriter, *http.Request, *authn.SignedCall) {
	return map[string]func(http.ResponseWriter, *http.Request, *authn.SignedCall){
		"/v1/runner/heartbeat":          h.heartbeat,
		"/v1/runner/claim":              h.claim,
		"/v1/runner/attempt/renew":      h.renew,
		"/v1/runner/attempt/logs":       h.appendLogs,
		"/v1/runner/attempt/relinquish": h.relinquish,
		"/v1/runner/attempt/result":     h.result,
		"/v1/runner/results":            h.results,
		"/v1/runner/attempt/artifacts":  h.requestUpload,
		"/v1/runner/attempt/source":     h.attemptSource,
		"/v1/runner/keys":               h.rotateKey,
	}
}

// ServeHTTP refuses ambiguous runner paths before routing, so that the path a
// signature covers is the path the router dispatches (RELIABILITY rule 8).
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	raw, _ := authn.RawPath(r)
	if strings.HasPrefix(raw, "/v1/runner") || strings.HasPrefix(r.URL.Path, "/v1/runner") {
		if err := protocol.CheckPath(raw); err != nil || raw != r.URL.Path {
			writeError(w, h.log, fmt.Errorf("path %q is not canonical: %w", raw, protocol.ErrBadRequest))
			return
		}
	}
	if fn, pattern := h.mux.Handler(r); pattern == "" {
		// No route: let the mux decide between 404 and 405 (it sets Allow),
		// but answer in problem+json like every other refusal.
		sw := &statusOnly{header: w.Header()}
		fn.ServeHTTP(sw, r)
		err := fmt.Errorf("no route %s %s: %w", r.Method, r.URL.Path, protocol.ErrNotFound)
		if sw.status == http.StatusMethodNotAllowed {
			err = fmt.Errorf("method %s not allowed on %s: %w", r.Method, r.URL.Path, errMethodNotAllowed)
		}
		writeError(w, h.log, err)
		return
	}
	h.mux.ServeHTTP(w, r)
}

var errMethodNotAllowed = &protocol.Error{Status: http.StatusMethodNotAllowed, Code: protocol.CodeMethodNotAllowed, Title: "Method not allowed"}

// statusOnly records the status a handler chose and discards its body.
type statusOnly struct {
	header http.Header
	status int
}

func (s *statusOnly) Header() http.Header         { return s.header }
func (s *statusOnly) Write(b []byte) (int, error) { return len(b), nil }
func (s *statusOnly) WriteHeader(code int)        { s.status = code }

func (h *Handler) user(fn func(http.ResponseWriter, *http.Request, principal.Actor)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if tok, ok := authn.BearerToken(r); ok && looksLikeJWS(tok) {
			// A job's run token grants nothing here; say so, and audit the
			// attempt, rather than answering as if it were an unknown key.
			caller, err := h.creds.VerifyRunToken(r.Context(), tok)
			if err == nil {
				err = h.creds.RefuseRunToken(r.Context(), caller, r.Pattern)
			}
			writeError(w, h.log, err)
			return
		}
		p, err := h.auth.Principal(r.Context(), r)
		if err != nil {
			writeError(w, h.log, err)
			return
		}
		// Everything the request does is in its principal's tenant (MT3).
		fn(w, r.WithContext(store.WithTenant(r.Context(), p.Tenant)), principal.Actor{TenantID: p.Tenant, Name: p.Name, Kind: p.Kind, Admin: p.Admin})
	}
}

// job authenticates a running job by its run token.
func (h *Handler) job(fn func(http.ResponseWriter, *http.Request, *runcreds.RunCaller)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		tok, ok := authn.BearerToken(r)
		if !ok || !looksLikeJWS(tok) {
			writeError(w, h.log, fmt.Errorf("a run token is required: %w", protocol.ErrUnauthorized))
			return
		}
		caller, err := h.creds.VerifyRunToken(r.Context(), tok)
		if err != nil {
			writeError(w, h.log, err)
			return
		}
		fn(w, r.WithContext(store.WithTenant(r.Context(), caller.Claims.Tenant)), caller)
	}
}

// looksLikeJWS tells run tokens (compact JWS) from API tokens (jpt_…).
func looksLikeJWS(tok string) bool { return strings.Count(tok, ".") == 2 }

// deferredNonce lists the hot signed routes that record their nonce in the
// first transaction they commit (authn.VerifyRunnerDeferred) rather than in
// one of its own: a run's claim, renewals, log chunks and result. Every
// write these routes make before that goes through store.Store.InTxNonce
// with the call's nonce, which records it; an answer they write without
// one records it first (watchCrossTenant).
var deferredNonce = map[string]bool{
	"/v1/runner/claim":          true,
	"/v1/runner/attempt/renew":  true,
	"/v1/runner/attempt/logs":   true,
	"/v1/runner/attempt/result": true,
	"/v1/runner/results":        true,
}

func (h *Handler) signed(fn func(http.ResponseWriter, *http.Request, *authn.SignedCall), deferNonce bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		verify := h.auth.VerifyRunner
		if deferNonce {
			verify = h.auth.VerifyRunnerDeferred
		}
		call, err := verify(r.Context(), r)
		if err != nil {
			writeError(w, h.log, err)
			return
		}
		ctx := store.WithTenant(r.Context(), call.Runner.Tenant)
		h.watchCrossTenant(w, r.WithContext(ctx), call, fn) // MT2 audit: api/crosstenant.go
	}
}

func (h *Handler) readyz(w http.ResponseWriter, r *http.Request) {
	if h.ready != nil {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := h.ready(ctx); err != nil {
			writeError(w, h.log, fmt.Errorf("store: %w", protocol.ErrUnavailable))
			return
		}
	}
	writeJSON(w, 200, map[string]string{"status": "ready"})
}

// decode parses a JSON body strictly: unknown fields and trailing data are
// refused rather than silently ignored.
func decode(body []byte, v any) error {
	if len(strings.TrimSpace(string(body))) == 0 {
		body = []byte("{}")
	}
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return protocol.Refused(protocol.ErrBadRequest, fmt.Errorf("invalid JSON body: %w", err))
	}
	if dec.More() {
		return fmt.Errorf("invalid JSON body: trailing data: %w", protocol.ErrBadRequest)
	}
	switch v.(type) {
	case *protocol.LogsRequest, *protocol.ResultRequest, *protocol.ResultsRequest:
		// A job's output is stored, its NULs replaced (protocol.StorableText).
	case *protocol.ArtifactRequest:
		// Its name, role and digest each have a stricter check of their
		// own, which refuses a NUL with that field's code (invalid_name).
	default:
		if field, ok := protocol.NULField(body); ok {
			return &protocol.FieldError{Field: field, Err: fmt.Errorf("%s contains a NUL character (\\u0000), which no text field may hold: %w", field, protocol.ErrBadRequest)}
		}
	}
	return nil
}

func readJSON(r *http.Request, v any) error {
	b, err := authn.ReadBody(r)
	if err != nil {
		return err
	}
	return decode(b, v)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// writeError is the one place where errors become HTTP answers.
func writeError(w http.ResponseWriter, log *slog.Logger, err error) {
	if rep, ok := w.(errorReporter); ok && internal(err) && rep.ReportError(err) {
		log = nil // the server's edge logs it, with the request's identifiers
	}
	p := problemOf(log, err)
	if p.Status == http.StatusServiceUnavailable {
		// Every 503 is retryable (docs/protocol.md): say when.
		w.Header().Set("Retry-After", "1")
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(p)
}

// errorReporter is a ResponseWriter of the server's edge (internal/server)
// that logs an internal error itself, knowing the request it answers; it
// reports whether it took the error.
type errorReporter interface{ ReportError(err error) bool }

// internal reports whether err is answered 500 and logged.
func internal(err error) bool {
	_, failed := problem.Of(err)
	return failed && !errors.Is(err, context.Canceled)
}

// problemOf is the problem+json body that answers err, also where an error
// answers one item of a batch (POST /v1/runner/results, /v1/runs/batch).
// A nil log logs nothing.
func problemOf(log *slog.Logger, err error) protocol.Problem {
	p, failed := problem.Of(err)
	switch {
	case !failed:
	case errors.Is(err, context.Canceled):
		// A canceled request is a caller that hung up (or a server
		// stopping): nobody reads the answer, and nothing went wrong.
		if log != nil {
			log.Debug("api: request canceled", "err", err)
		}
	case log != nil:
		log.Error("api: internal error", "err", err)
	}
	return p
}

func queryInt(r *http.Request, key string) (int64, error) {
	v := r.URL.Query().Get(key)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("query %s must be a non-negative integer: %w", key, protocol.ErrBadRequest)
	}
	return n, nil
}

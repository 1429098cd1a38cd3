package web

import (
	"bytes"
	"embed"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"slices"
	"strings"

	"github.com/jobplane/jobplane/internal/admin"
	artbroker "github.com/jobplane/jobplane/internal/artifact/broker"
	"github.com/jobplane/jobplane/internal/audit"
	"github.com/jobplane/jobplane/internal/authn"
	"github.com/jobplane/jobplane/internal/catalogs"
	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/control"
	"github.com/jobplane/jobplane/internal/lease"
	apiproblem "github.com/jobplane/jobplane/internal/problem"
	"github.com/jobplane/jobplane/internal/protocol"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Config wires the UI.
type Config struct {
	Control *control.Service
	// Admin lists runners.
	Admin *admin.Service
	// Audit searches and verifies the audit log.
	Audit *audit.Log
	// Artifacts lists and serves runs' artifacts (nil: none are shown).
	Artifacts *artbroker.Service
	// Catalogs shows the catalogs and jobs of the definitions.
	Catalogs *catalogs.Service
	// Leases shows and breaks run leases (nil: Control's).
	Leases *lease.Service
	Auth   *authn.Authenticator
	Logger *slog.Logger
	Clock  clock.Clock
	// PublicURL is the server's external URL; an https one marks cookies
	// Secure even behind a TLS-terminating proxy.
	PublicURL string
}

// Handler serves the UI.
type Handler struct {
	svc      *control.Service
	cats     *catalogs.Service
	admin    *admin.Service
	auditLog *audit.Log
	arts     *artbroker.Service
	lease    *lease.Service
	auth     *authn.Authenticator
	log      *slog.Logger
	clock    clock.Clock
	secure   bool
	mux      *http.ServeMux
	pages    map[string]*template.Template
	// posts are the state-changing routes, all registered through post.
	posts []string
}

// pageNames are the templates rendered inside the layout.
var pageNames = []string{"signin", "runs", "run", "request", "approvals", "leases", "catalog", "job", "runners", "audit", "error"}

// New builds the UI handler. Templates are embedded, so a parse error is a
// programming error caught by every test.
func New(cfg Config) *Handler {
	h := &Handler{svc: cfg.Control, cats: cfg.Catalogs, admin: cfg.Admin, auditLog: cfg.Audit, arts: cfg.Artifacts, lease: cfg.Leases, auth: cfg.Auth, log: cfg.Logger, clock: cfg.Clock, mux: http.NewServeMux(),
		secure: strings.HasPrefix(cfg.PublicURL, "https://"), pages: map[string]*template.Template{}}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	if h.lease == nil && cfg.Control != nil {
		h.lease = cfg.Control.Leases()
	}
	if h.clock == nil {
		h.clock = clock.Real{}
	}
	for _, name := range pageNames {
		h.pages[name] = template.Must(template.New("layout.html").Funcs(h.funcs()).ParseFS(templateFS, "templates/layout.html", "templates/"+name+".html"))
	}
	static, _ := fs.Sub(staticFS, "static")
	m := h.mux
	m.Handle("GET /static/", http.StripPrefix("/static/", cacheable(http.FileServerFS(static))))
	m.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/runs", http.StatusSeeOther) })
	m.HandleFunc("GET /signin", h.signinForm)
	m.HandleFunc("POST /signin", h.signin)
	h.post(m, "/signout", h.signout)
	h.routesRuns(m)
	h.routesPages(m)
	h.routesArtifacts(m)
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		h.renderError(w, r, nil, fmt.Errorf("no page %s: %w", r.URL.Path, protocol.ErrNotFound))
	})
	return h
}

// post registers a state-changing route: it needs a session and its CSRF
// token (see user).
func (h *Handler) post(m *http.ServeMux, path string, fn func(http.ResponseWriter, *http.Request, *session)) {
	h.posts = append(h.posts, path)
	m.HandleFunc("POST "+path, h.user(fn))
}

// StateChangingRoutes lists the POST routes that act for a session (every
// one but sign-in, which has its own double-submit token); tests sweep it.
func (h *Handler) StateChangingRoutes() []string { return slices.Clone(h.posts) }

// ServeHTTP adds the security headers every UI answer carries. The content
// security policy allows scripts and styles from this server only: no
// inline script runs, whatever a page happens to contain.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Referrer-Policy", "same-origin")
	h.mux.ServeHTTP(w, r)
}

func cacheable(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		next.ServeHTTP(w, r)
	})
}

// Mount serves the API's paths (/v1/, health, discovery) with api and every
// other path with ui.
func Mount(api, ui http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.Path
		if strings.HasPrefix(p, "/v1/") || p == "/v1" || p == "/healthz" || p == "/readyz" || strings.HasPrefix(p, "/.well-known/") {
			api.ServeHTTP(w, r)
			return
		}
		ui.ServeHTTP(w, r)
	})
}

// view is what every page template receives.
type view struct {
	Title  string
	Nav    string
	Sess   *session
	Notice string
	Data   any
}

func (h *Handler) render(w http.ResponseWriter, r *http.Request, status int, page string, v view) {
	h.renderTemplate(w, status, page, "layout.html", v)
}

// renderTemplate executes into a buffer first so that a failing template
// never leaves half a page behind a 200.
func (h *Handler) renderTemplate(w http.ResponseWriter, status int, page, name string, data any) {
	var buf bytes.Buffer
	if err := h.pages[page].ExecuteTemplate(&buf, name, data); err != nil {
		h.log.Error("web: render", "page", page, "template", name, "err", err)
		http.Error(w, "internal error rendering the page", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// problem is an error as a page shows it.
type problem struct {
	Status int
	Code   string
	Title  string
	Detail string
	Field  string
	// Decision is a denial's policy decision.
	Decision *protocol.Decision
	RunID    string
}

func toProblem(log *slog.Logger, err error) problem {
	pp, failed := apiproblem.Of(err)
	if failed {
		log.Error("web: internal error", "err", err)
	}
	p := problem{Status: pp.Status, Code: pp.Code, Title: pp.Title, Detail: pp.Detail, Field: pp.Field, RunID: pp.RunID}
	if d, ok := pp.Decision.(protocol.Decision); ok {
		p.Decision = &d
	}
	return p
}

func (h *Handler) renderError(w http.ResponseWriter, r *http.Request, s *session, err error) {
	p := toProblem(h.log, err)
	if p.Status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	h.render(w, r, p.Status, "error", view{Title: p.Title, Sess: s, Data: p})
}

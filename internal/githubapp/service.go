package githubapp

import (
	"context"
	"errors"
	"log/slog"

	"github.com/jobplane/jobplane/internal/admin"
	"github.com/jobplane/jobplane/internal/audit"
	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/control"
	"github.com/jobplane/jobplane/internal/principal"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
)

// Config configures the Service.
type Config struct {
	Store  store.Store
	Clock  clock.Clock
	Logger *slog.Logger
	// Definitions are the server's: what a tenant without a .jobplane
	// repository uses, on Channel.
	Definitions control.Definitions
	// Channel is the channel of the server's definitions that tenants
	// without a .jobplane repository use; it is also the channel pull
	// request runs are recorded (and matched by policies) under (default
	// DefaultChannel).
	Channel string
	// Catalogs reads tenants' own definitions (nil: every tenant uses the
	// server's).
	Catalogs Catalogs
	// Sources serves managed runners the archive of a run's commit (nil:
	// source tickets of GitHub runs are refused).
	Sources Sources
	// Admin administers installation tenants' principals and tokens (nil:
	// one over Store).
	Admin Admin
	// Access asks GitHub whether an installation can access a repository
	// its deliveries have not listed (nil: what the deliveries said is
	// all that is known).
	Access RepoAccess
}

// RepoAccess asks GitHub about an installation's access to a repository.
type RepoAccess interface {
	// RepositoryID is the ID of repo (owner/name) when the installation
	// can access it now, 0 when GitHub says it cannot; an error when
	// GitHub could not say.
	RepositoryID(ctx context.Context, installation int64, repo string) (int64, error)
}

// Runs is what the service asks of the run service (a *control.Service):
// run requests, through the API's own entry point.
type Runs interface {
	RequestRunFrom(ctx context.Context, actor principal.Actor, req *protocol.RunRequest, origin control.RequestOrigin) (*control.RunView, bool, error)
	SupersedeRun(ctx context.Context, tx store.Tx, runID, actor, reason string) (bool, error)
}

var _ Runs = (*control.Service)(nil)

// Admin is the tenant administration (an *admin.Service) the operator's
// administration of installation tenants goes through.
type Admin interface {
	CreateRegistrationToken(ctx context.Context, actor principal.Actor, req *protocol.RegistrationTokenRequest) (*protocol.TokenResponse, error)
	CreatePrincipal(ctx context.Context, actor principal.Actor, req *protocol.PrincipalRequest) (*store.Principal, error)
	CreateToken(ctx context.Context, actor principal.Actor, principal string, ttlSeconds int) (*protocol.TokenResponse, error)
	RevokeToken(ctx context.Context, actor principal.Actor, tokenID string) error
}

var _ Admin = (*admin.Service)(nil)

// Service is the GitHub App's side of jobplane.
type Service struct {
	store    store.Store
	clock    clock.Clock
	log      *slog.Logger
	defs     control.Definitions
	channel  string
	catalogs Catalogs
	sources  Sources
	access   RepoAccess
	runs     Runs
	admin    Admin
}

var _ control.Tenants = (*Service)(nil)

// New returns a Service; Attach gives it the run service before use.
func New(cfg Config) (*Service, error) {
	if cfg.Store == nil {
		return nil, errors.New("githubapp: Store is required")
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Channel == "" {
		cfg.Channel = DefaultChannel
	}
	if cfg.Admin == nil {
		cfg.Admin = admin.New(cfg.Store, cfg.Clock)
	}
	return &Service{admin: cfg.Admin, store: cfg.Store, clock: cfg.Clock, log: cfg.Logger, defs: cfg.Definitions, channel: cfg.Channel,
		catalogs: cfg.Catalogs, sources: cfg.Sources, access: cfg.Access}, nil
}

// Attach gives the service the run service it requests runs from. The run
// service is built with this one as its control.Tenants, so one of the two
// is given to the other after both exist.
func (s *Service) Attach(runs Runs) { s.runs = runs }

func (s *Service) audit(ctx context.Context, tx store.Tx, tenant, actor, action, subject string, details any) error {
	return audit.Recorder{Clock: s.clock}.Append(ctx, tx, tenant, actor, action, subject, details)
}

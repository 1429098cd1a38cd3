package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/jobplane/jobplane/internal/api"
	"github.com/jobplane/jobplane/internal/audit"
	"github.com/jobplane/jobplane/internal/authn"
	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/config"
	"github.com/jobplane/jobplane/internal/connector"
	"github.com/jobplane/jobplane/internal/control"
	"github.com/jobplane/jobplane/internal/creds"
	"github.com/jobplane/jobplane/internal/gitsync"
	"github.com/jobplane/jobplane/internal/metrics"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
	"github.com/jobplane/jobplane/internal/store/groupcommit"
	"github.com/jobplane/jobplane/internal/store/postgres"
	"github.com/jobplane/jobplane/internal/store/sqlite"
	"github.com/jobplane/jobplane/internal/tracing"
	"github.com/jobplane/jobplane/internal/web"
)

// Server is a running control plane.
type Server struct {
	cfg      config.Server
	log      *slog.Logger
	clock    clock.Clock
	store    store.Store
	objs     objectStore
	grouped  *groupcommit.Store
	svc      *control.Service
	metrics  *metrics.Metrics
	sealer   *audit.Sealer
	http     *http.Server
	ln       net.Listener
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	serveErr chan error
}

// Options are the test seams of a server.
type Options struct {
	Logger *slog.Logger
	Clock  clock.Clock
	// ReapInterval defaults to one second.
	ReapInterval time.Duration
	// SealInterval (audit chain sealing) defaults to one second.
	SealInterval time.Duration
	// CommitBatch is groupcommit.Config.Batch (1 turns group commit off).
	CommitBatch int
	// CommitConcurrency is groupcommit.Config.Concurrency.
	CommitConcurrency int
	// Tracing makes spans of requests and store transactions; nil is off.
	Tracing *tracing.Tracing
}

// OpenStore opens the store a --db value names and applies its migrations.
func OpenStore(ctx context.Context, dsn string) (store.Store, error) {
	driver, rest, err := config.ParseDSN(dsn)
	if err != nil {
		return nil, err
	}
	switch driver {
	case "sqlite":
		return sqlite.Open(ctx, rest)
	default:
		return postgres.Open(ctx, rest)
	}
}

// Start opens everything and begins serving. The listener is bound before
// Start returns, so Addr is usable at once.
func Start(ctx context.Context, cfg config.Server, opts Options) (*Server, error) {
	cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	if opts.ReapInterval <= 0 {
		opts.ReapInterval = time.Second
	}
	if opts.SealInterval <= 0 {
		opts.SealInterval = time.Second
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	st, err := OpenStore(ctx, cfg.DB)
	if err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	st = opts.Tracing.Store(st, dbSystem(cfg.DB))
	defs, err := OpenDefinitionsWith(cfg.Definitions, gitsync.Options{Channels: cfg.Channels, Protected: cfg.Protected, MirrorDir: cfg.MirrorDir()})
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("open definitions: %w", err)
	}
	key, err := creds.LoadOrCreateServerKey(cfg.DataDir, cfg.SecretKey)
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("server key: %w", err)
	}
	box, err := creds.NewBox(key)
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("server key: %w", err)
	}
	gh, err := openGitHub(&cfg.GitHub, opts.Clock, opts.Logger)
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("github: %w", err)
	}
	tokens, err := control.NewCredentials(ctx, st, box, opts.Clock, cfg.PublicURL)
	if err != nil {
		st.Close()
		return nil, err
	}
	arts, objs, sources, err := openArtifacts(ctx, cfg)
	if err != nil {
		st.Close()
		return nil, err
	}
	mets := metrics.New(st, opts.Clock, opts.Logger)
	grouped := groupcommit.New(st, groupcommit.Config{Batch: opts.CommitBatch, Concurrency: opts.CommitConcurrency, Refusal: protocol.IsRefusal})
	svc, err := control.New(control.Config{Store: st, Grouped: grouped, Clock: opts.Clock, Definitions: defs, Logger: opts.Logger,
		APIURL: cfg.PublicURL, Credentials: tokens, Broker: connector.NewBroker(st, box), Artifacts: arts, Metrics: mets,
		GitHub: gh.runs(st, cfg.GitHub.Channel, opts.Logger)})
	if err != nil {
		st.Close()
		return nil, err
	}
	// The last good catalogs recorded before a restart come back before the
	// first request, then the current heads are recorded.
	if err := svc.LoadCatalogs(ctx); err != nil {
		st.Close()
		return nil, fmt.Errorf("load catalogs: %w", err)
	}
	if err := svc.RefreshCatalogs(ctx); err != nil {
		opts.Logger.Warn("server: first catalog sync failed", "err", err)
	}
	if cfg.AdminToken != "" {
		if err := svc.EnsureAdmin(ctx, cfg.AdminToken); err != nil {
			st.Close()
			return nil, fmt.Errorf("create admin principal: %w", err)
		}
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("listen: %w", err)
	}
	h := api.New(api.Config{
		Control:   svc,
		Auth:      &authn.Authenticator{Store: grouped, Clock: opts.Clock},
		Logger:    opts.Logger,
		Ready:     st.Ping,
		PublicURL: cfg.PublicURL,
		GitHub:    gh.webhook,
	})
	s := &Server{
		cfg: cfg, log: opts.Logger, clock: opts.Clock, store: st, objs: objs, grouped: grouped, svc: svc, ln: ln, metrics: mets,
		http: &http.Server{Handler: opts.Tracing.Handler(withMetrics(web.Mount(h, web.New(web.Config{Control: svc, Auth: &authn.Authenticator{Store: st, Clock: opts.Clock}, Logger: opts.Logger, Clock: opts.Clock, PublicURL: cfg.PublicURL})), mets, opts.Clock)),
			ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute},
		serveErr: make(chan error, 1),
	}
	bg, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.cancel = cancel
	s.loop(bg, "reaper", opts.ReapInterval, func(ctx context.Context) error {
		_, err := svc.Reap(ctx)
		return err
	})
	s.loop(bg, "lease waiters", control.StrandedWaiterInterval, func(ctx context.Context) error {
		_, err := svc.WakeStrandedWaiters(ctx)
		return err
	})
	s.loop(bg, "approval expiry", 10*time.Second, func(ctx context.Context) error {
		_, err := svc.ExpireApprovals(ctx)
		return err
	})
	s.loop(bg, "catalog sync", cfg.SyncInterval, svc.RefreshCatalogs)
	if sources != nil {
		s.loop(bg, "source sync", cfg.SyncInterval, sources.Sync)
	}
	s.loop(bg, "scheduler", control.ScheduleInterval, func(ctx context.Context) error {
		_, err := svc.FireSchedules(ctx)
		return err
	})
	s.loop(bg, "signing key reload", 30*time.Second, tokens.Reload)
	s.loop(bg, "credential revocation", 2*time.Second, func(ctx context.Context) error {
		_, err := svc.RevokeCredentials(ctx)
		return err
	})
	s.sealer = s.startSealer(bg, st, opts.Logger, opts.SealInterval)
	s.loop(bg, "nonce purge", 30*time.Second, func(ctx context.Context) error {
		_, err := svc.PurgeNonces(ctx)
		return err
	})
	s.loop(bg, "staged upload sweep", control.StagedUploadSweepInterval, func(ctx context.Context) error {
		_, err := svc.SweepStagedUploads(ctx)
		return err
	})
	s.startGitHub(bg, gh)
	go func() { s.serveErr <- s.http.Serve(ln) }()
	s.log.Info("server: listening", "addr", ln.Addr().String(), "db", driverOf(cfg.DB), "channels", cfg.Channels)
	return s, nil
}

// dbSystem names the backend as tracing's db.system.name does.
func dbSystem(dsn string) string {
	if d := driverOf(dsn); d != "sqlite" {
		return "postgresql"
	}
	return "sqlite"
}

func driverOf(dsn string) string {
	d, _, _ := config.ParseDSN(dsn)
	return d
}

// loop runs fn every interval, with jitter so replicas do not march in step.
func (s *Server) loop(ctx context.Context, name string, every time.Duration, fn func(context.Context) error) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			jitter := time.Duration(rand.Int64N(int64(every)/5 + 1))
			t := time.NewTimer(every - every/10 + jitter)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			if err := fn(ctx); err != nil && ctx.Err() == nil {
				s.log.Warn("server: background "+name+" failed", "err", err)
			}
		}
	}()
}

// Addr is the bound listen address.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// URL is the server's base URL.
func (s *Server) URL() string { return "http://" + s.Addr() }

// Control exposes the run service (for the dev command and tests).
func (s *Server) Control() *control.Service { return s.svc }

// Commits reports the group commit counters (for the benchmark).
func (s *Server) Commits() groupcommit.Stats { return s.grouped.Stats() }

// Sealer exposes the audit sealer (for tests: SealAll).
func (s *Server) Sealer() *audit.Sealer { return s.sealer }

// Store exposes the store (for tests).
func (s *Server) Store() store.Store { return s.store }

// Wait blocks until the HTTP server stops.
func (s *Server) Wait() error {
	err := <-s.serveErr
	s.serveErr <- err
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Stop drains HTTP requests, stops the loops and closes the store.
func (s *Server) Stop(ctx context.Context) error {
	err := s.http.Shutdown(ctx)
	if err != nil {
		_ = s.http.Close()
	}
	s.cancel()
	s.wg.Wait()
	return errors.Join(err, s.store.Close(), s.objs.Close())
}

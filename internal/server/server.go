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

	"github.com/jobplane/jobplane/internal/admin"
	"github.com/jobplane/jobplane/internal/api"
	"github.com/jobplane/jobplane/internal/audit"
	"github.com/jobplane/jobplane/internal/authn"
	"github.com/jobplane/jobplane/internal/catalogs"
	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/config"
	"github.com/jobplane/jobplane/internal/connector/broker"
	"github.com/jobplane/jobplane/internal/control"
	"github.com/jobplane/jobplane/internal/creds"
	"github.com/jobplane/jobplane/internal/gitsync"
	"github.com/jobplane/jobplane/internal/lease"
	"github.com/jobplane/jobplane/internal/logarchive"
	"github.com/jobplane/jobplane/internal/metrics"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/runcreds"
	"github.com/jobplane/jobplane/internal/schedule"
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
	cats     *catalogs.Service
	admin    *admin.Service
	metrics  *metrics.Metrics
	sealer   *audit.Sealer
	http     *http.Server
	ln       *onceListener
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	serveErr chan error
	// drain counts the requests in flight and says when the server stops
	// (drain.go).
	drain *drainer
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
	tokens, err := runcreds.NewKeys(ctx, st, box, opts.Clock, cfg.PublicURL)
	if err != nil {
		st.Close()
		return nil, err
	}
	objs, sources, err := openArtifacts(ctx, cfg)
	if err != nil {
		st.Close()
		return nil, err
	}
	mets := metrics.New(st, opts.Clock, opts.Logger)
	grouped := groupcommit.New(st, groupcommit.Config{Batch: opts.CommitBatch, Concurrency: opts.CommitConcurrency, Refusal: protocol.IsRefusal})
	adm := admin.New(st, opts.Clock)
	auditLog := audit.NewLog(st)
	rc := runcreds.New(runcreds.Config{Store: st, Clock: opts.Clock, Keys: tokens, Box: box, Broker: broker.NewBroker(st, box)})
	ghapp, err := gh.service(st, adm, defs, cfg.GitHub.Channel, opts.Clock, opts.Logger)
	if err != nil {
		st.Close()
		return nil, err
	}
	act, err := gh.actions(st, ghapp, opts.Clock, opts.Logger)
	if err != nil {
		st.Close()
		return nil, err
	}
	leases := lease.New(lease.Config{Store: st, Clock: opts.Clock, Logger: opts.Logger})
	var heads control.SourceHeads
	if sources != nil {
		heads = sources
	}
	svc, err := control.New(control.Config{Store: st, Grouped: grouped, Clock: opts.Clock, Definitions: defs, Logger: opts.Logger,
		APIURL: cfg.PublicURL, Credentials: tokens, Sources: heads, Metrics: mets,
		Tenants: ghapp, Leases: leases, Actions: act, IsolateWriteGrants: cfg.IsolateWriteGrants,
		Logs: &logarchive.Reader{Store: st, Objects: objs}})
	if err != nil {
		st.Close()
		return nil, err
	}
	ghapp.Attach(svc)
	act.Attach(svc)
	adm.OnRunnersChanged(svc.RunnersChanged)
	cats, err := catalogs.New(catalogs.Config{Store: st, Clock: opts.Clock, Logger: opts.Logger, Definitions: defs, Tenants: ghapp, Runs: svc})
	if err != nil {
		st.Close()
		return nil, err
	}
	sched := schedule.New(schedule.Config{Store: st, Clock: opts.Clock, Logger: opts.Logger, Runs: svc, Definitions: defs, Tenants: ghapp})
	arts, srcs := artifactServices(st, objs, sources, svc, ghapp, cfg.PublicURL, opts.Clock, opts.Logger)
	// The last good catalogs recorded before a restart come back before the
	// first request, then the current heads are recorded.
	if err := cats.LoadCatalogs(ctx); err != nil {
		st.Close()
		return nil, fmt.Errorf("load catalogs: %w", err)
	}
	if err := cats.RefreshCatalogs(ctx); err != nil {
		opts.Logger.Warn("server: first catalog sync failed", "err", err)
	}
	if cfg.AdminToken != "" {
		if err := adm.EnsureAdmin(ctx, cfg.AdminToken); err != nil {
			st.Close()
			return nil, fmt.Errorf("create admin principal: %w", err)
		}
	}
	tcp, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("listen: %w", err)
	}
	ln := &onceListener{Listener: tcp}
	drain := &drainer{}
	sweeper := newSweeper(cfg, st, objs, arts, opts.Clock, opts.Logger, mets)
	h := api.New(api.Config{
		Retention: sweeper,
		Control:   svc,
		Admin:     adm,
		Audit:     auditLog,
		Creds:     rc,
		Artifacts: arts,
		Sources:   srcs,
		Schedules: sched,
		Auth:      &authn.Authenticator{Store: grouped, Clock: opts.Clock},
		Logger:    opts.Logger,
		Ready:     drain.ready(st.Ping),
		PublicURL: cfg.PublicURL,
		GitHub:    gh.webhook,
		GitHubApp: ghapp,
		Actions:   act,
		Catalogs:  cats,
		Leases:    leases,
	})
	s := &Server{
		cfg: cfg, log: opts.Logger, clock: opts.Clock, store: st, objs: objs, grouped: grouped, svc: svc, cats: cats, admin: adm, ln: ln, metrics: mets,
		drain: drain,
		http: &http.Server{Handler: drain.wrap(opts.Tracing.Handler(withMetrics(limitBodies(web.Mount(h, web.New(web.Config{Control: svc, Catalogs: cats, Admin: adm, Audit: auditLog, Artifacts: arts, Leases: leases, Auth: &authn.Authenticator{Store: st, Clock: opts.Clock}, Logger: opts.Logger, Clock: opts.Clock, PublicURL: cfg.PublicURL}))), mets, opts.Clock))),
			ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute, ConnState: drain.track},
		serveErr: make(chan error, 1),
	}
	bg, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.cancel = cancel
	s.loop(bg, "reaper", opts.ReapInterval, func(ctx context.Context) error {
		_, err := svc.Reap(ctx)
		return err
	})
	s.loop(bg, "lease waiters", lease.StrandedWaiterInterval, func(ctx context.Context) error {
		_, err := leases.WakeStrandedWaiters(ctx)
		return err
	})
	// Queued runs' Check Runs follow runners coming and going.
	s.loop(bg, "runner availability", control.RunnerWatchInterval, func(ctx context.Context) error {
		_, err := svc.RefreshRunnerWaits(ctx)
		return err
	})
	s.loop(bg, "approval expiry", 10*time.Second, func(ctx context.Context) error {
		_, err := svc.ExpireApprovals(ctx)
		return err
	})
	s.loop(bg, "catalog sync", cfg.SyncInterval, cats.RefreshCatalogs)
	if sources != nil {
		s.loop(bg, "source sync", cfg.SyncInterval, sources.Sync)
	}
	s.loop(bg, "scheduler", schedule.Interval, func(ctx context.Context) error {
		_, err := sched.Fire(ctx)
		return err
	})
	s.loop(bg, "signing key reload", 30*time.Second, tokens.Reload)
	s.loop(bg, "credential revocation", 2*time.Second, func(ctx context.Context) error {
		_, err := rc.RevokeCredentials(ctx)
		return err
	})
	s.sealer = s.startSealer(bg, st, opts.Logger, opts.SealInterval)
	s.loop(bg, "nonce purge", 30*time.Second, func(ctx context.Context) error {
		_, err := authn.PurgeNonces(ctx, st, opts.Clock)
		return err
	})
	s.startGitHub(bg, gh, ghapp, act)
	s.startRetention(bg, sweeper)
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

// Catalogs records and shows what the definitions serve.
func (s *Server) Catalogs() *catalogs.Service { return s.cats }

// Admin is the tenant administration service (principals, tokens, runners).
func (s *Server) Admin() *admin.Service { return s.admin }

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
	if errors.Is(err, http.ErrServerClosed) || (errors.Is(err, net.ErrClosed) && s.drain.draining.Load()) {
		return nil
	}
	return err
}

// Stop stops the server gracefully within ctx (docs/operations.md,
// "Stopping a server"): it drains first — /readyz turns 503, open claim
// long-polls and log streams are answered at once, new claims are refused
// 503, every answer closes its connection, and everything else (renewals,
// results, logs) is still served on the open listener — until no request
// is in flight and every connection left open has been idle for a
// moment; then it closes the listener and idle connections, waits
// for what is left, stops the loops and closes the store. Only when ctx
// ends first are the remaining connections cut, and the error says so.
func (s *Server) Stop(ctx context.Context) error {
	// Wall time on purpose: how long a stop takes is an operator's figure.
	start := clock.Real{}.Now()
	s.log.Info("server: stopping; draining requests in flight")
	s.drain.begin()
	s.svc.Drain()
	// New connections are refused from now on, which a client knows it may
	// retry; the connections open go on being served, each answer closing
	// its own, and the idle ones are closed only once their clients have
	// left them alone for a moment, so that none is closed under a request.
	_ = s.ln.Close()
	s.drain.waitQuiet(ctx)
	drained := time.Since(start)
	err := s.http.Shutdown(ctx)
	if err != nil {
		_ = s.http.Close()
		err = fmt.Errorf("requests still in flight when the shutdown timeout ended were cut: %w", err)
	}
	served := time.Since(start)
	s.cancel()
	s.wg.Wait()
	err = errors.Join(err, s.store.Close(), s.objs.Close())
	s.log.Info("server: stopped", "drained", drained.Round(time.Millisecond), "http_closed", served.Round(time.Millisecond), "total", time.Since(start).Round(time.Millisecond))
	return err
}

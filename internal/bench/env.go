package bench

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jobplane/jobplane/internal/apiclient"
	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/config"
	"github.com/jobplane/jobplane/internal/gitsync"
	"github.com/jobplane/jobplane/internal/id"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/server"
)

// Job and Channel are what the benchmark requests.
const (
	Job     = "noop"
	Channel = "prod"
)

// Definitions is the benchmark's definitions repository: one job that does
// nothing and a policy that lets anyone run anything.
var Definitions = map[string]string{
	"jobs/noop.yaml": `name: noop
description: Does nothing; used by jobplane bench.
run:
  command: ["true"]
  timeout: 10m
  lease_ttl: 30s
`,
	"policies/all.yaml": `rules: [{id: all, jobs: ["*"], users: ["*"]}]
`,
}

// benchSecretKey seals the signing keys of every benchmark server, so
// that a database given with --db can be measured again by a later run
// (each run's server would otherwise make a key of its own in its
// temporary data directory and could not open the signing key an earlier
// run sealed there). It protects nothing: a benchmark database holds
// no-op runs only, and the docs say never to point the benchmark at
// another.
const benchSecretKey = "6a6f62706c616e652062656e6368206b6579206f6e6c792c206e6f742061206b"

// EnvConfig configures an Env.
type EnvConfig struct {
	// DB is the --db value: "sqlite:PATH" or a postgres:// URL. Empty is a
	// SQLite database in the temporary data directory.
	DB string
	// Logger receives the server's log; nil discards it.
	Logger *slog.Logger
	// CommitBatch is passed to the server (1 turns group commit off).
	CommitBatch int
	// CommitConcurrency is passed to the server (0: its default).
	CommitConcurrency int
	// MaxConns bounds the idle HTTP connections kept to the server; it
	// should be at least the number of concurrent callers. Zero is 64.
	MaxConns int
}

// Env is a running server with a fresh definitions repository, an admin
// token and an HTTP client shared by every caller.
type Env struct {
	Server *server.Server
	// URL is the server's base URL.
	URL   string
	Admin *apiclient.Client
	HTTP  *http.Client
	// Driver is "sqlite" or "postgres".
	Driver string
	// DSN is the --db value the server opened.
	DSN string
	// ClaimMax, above 1, makes the lifecycle's runners claim up to that
	// many attempts per request ("max") and work on them at once, like a
	// runner with that much capacity.
	ClaimMax int
	// RequestBatch, above 1, makes the request and lifecycle phases'
	// clients request up to that many runs per call (POST /v1/runs/batch),
	// as a backfill would; 1 requests one run per call.
	RequestBatch int

	dir string
	// repoWritten is when the definitions' branch head was written.
	repoWritten time.Time
	stopped     bool
}

// StartEnv starts a server for a benchmark. Close it when done: it stops
// the server and removes the temporary directory (a SQLite database named
// by DB outside that directory is kept).
func StartEnv(ctx context.Context, cfg EnvConfig) (env *Env, err error) {
	dir, err := os.MkdirTemp("", "jobplane-bench-")
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(dir)
		}
	}()
	repo := filepath.Join(dir, "definitions")
	if _, err := gitsync.InitRepo(repo, "main", Definitions, "jobplane bench definitions"); err != nil {
		return nil, fmt.Errorf("create definitions repository: %w", err)
	}
	written := clock.Real{}.Now()
	db := cfg.DB
	if db == "" {
		db = "sqlite:" + filepath.Join(dir, "data", "jobplane.db")
	}
	driver, _, err := config.ParseDSN(db)
	if err != nil {
		return nil, err
	}
	maxConns := cfg.MaxConns
	if maxConns <= 0 {
		maxConns = 64
	}
	token := "jpt_bench_" + id.Secret(24)
	var srv *server.Server
	// The port is probed free and then bound by the server, so that the
	// server's public URL is right; a port taken in between is retried.
	for try := 1; ; try++ {
		addr, perr := freePort()
		if perr != nil {
			return nil, perr
		}
		srv, err = server.Start(ctx, config.Server{
			Listen: addr, DB: db, Definitions: repo, Channels: map[string]string{Channel: "main"},
			DataDir: filepath.Join(dir, "data"), AdminToken: token, SecretKey: benchSecretKey,
		}, server.Options{Logger: cfg.Logger, CommitBatch: cfg.CommitBatch, CommitConcurrency: cfg.CommitConcurrency})
		if err == nil {
			break
		}
		if try >= 3 || !strings.Contains(err.Error(), "listen") {
			return nil, fmt.Errorf("start server: %w", err)
		}
	}
	hc := &http.Client{
		Timeout: apiclient.DefaultTimeout,
		Transport: &http.Transport{
			Proxy:               nil,
			MaxIdleConns:        maxConns,
			MaxIdleConnsPerHost: maxConns,
			IdleConnTimeout:     90 * time.Second,
		},
	}
	return &Env{
		Server: srv, URL: srv.URL(), HTTP: hc, Driver: driver, DSN: db, dir: dir, repoWritten: written,
		Admin: &apiclient.Client{BaseURL: srv.URL(), Token: token, HTTP: hc},
	}, nil
}

func freePort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find a free port: %w", err)
	}
	addr := ln.Addr().String()
	return addr, ln.Close()
}

// Close stops the server and removes the temporary directory.
func (e *Env) Close() error {
	return errors.Join(e.StopServer(), os.RemoveAll(e.dir))
}

// StopServer stops the server and keeps its directory (and a SQLite
// database there), so that what runs after the phases, the raw loops,
// shares neither the database nor the CPU with the server's background
// work (the audit sealer, sweeps, waiting claims). Close calls it if it
// was not called.
func (e *Env) StopServer() error {
	if e.stopped {
		return nil
	}
	e.stopped = true
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := e.Server.Stop(ctx)
	if t, ok := e.HTTP.Transport.(*http.Transport); ok {
		t.CloseIdleConnections()
	}
	return err
}

// Settle waits, once, until the definitions' branch head is older than
// gitsync.RacyWindow: until then every request and claim reads the head from
// the repository, which a server whose definitions were not written a
// moment ago never does (gitsync/headcache.go).
func (e *Env) Settle(ctx context.Context) error {
	wait := e.repoWritten.Add(gitsync.RacyWindow + 100*time.Millisecond).Sub(clock.Real{}.Now())
	if wait <= 0 {
		return nil
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Runner is one registered runner identity.
type Runner struct {
	ID     string
	Client *apiclient.RunnerClient
	// LogsApart sends each attempt's log chunk in a call of its own before
	// the result, instead of with it (as the worker does).
	LogsApart bool
	// Renew renews each attempt's lease once before its result.
	Renew bool
	// BatchResults reports the results of attempts claimed together in one
	// call (Runner.finishBatch).
	BatchResults bool
}

// RegisterRunners registers n runners, each with its own registration token
// and Ed25519 key, in the default pool.
func (e *Env) RegisterRunners(ctx context.Context, n int) ([]*Runner, error) {
	out := make([]*Runner, 0, n)
	for i := range n {
		tok, err := e.Admin.CreateRegistrationToken(ctx, protocol.RegistrationTokenRequest{Pool: "default", TTLSeconds: 600})
		if err != nil {
			return nil, fmt.Errorf("registration token %d: %w", i, err)
		}
		pub, priv, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			return nil, err
		}
		rc := &apiclient.RunnerClient{BaseURL: e.Server.URL(), Key: priv, HTTP: e.HTTP}
		resp, err := rc.Register(ctx, tok.Token, protocol.RegisterRequest{
			Name: fmt.Sprintf("bench-%d", i), PublicKey: protocol.EncodeKey(pub), Version: "bench",
		})
		if err != nil {
			return nil, fmt.Errorf("register runner %d: %w", i, err)
		}
		rc.RunnerID = resp.RunnerID
		out = append(out, &Runner{ID: resp.RunnerID, Client: rc})
	}
	return out, nil
}

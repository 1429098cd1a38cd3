package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jobplane/jobplane/internal/apiclient"
	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/config"
	"github.com/jobplane/jobplane/internal/gcfloor"
	"github.com/jobplane/jobplane/internal/gitsync"
	"github.com/jobplane/jobplane/internal/id"
	"github.com/jobplane/jobplane/internal/logging"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/server"
	"github.com/jobplane/jobplane/internal/tracing"
	"github.com/jobplane/jobplane/internal/worker"
)

// ServerCmd runs the control plane.
type ServerCmd struct {
	Listen            string        `default:"127.0.0.1:7420" help:"Address to listen on."`
	DB                string        `name:"db" help:"sqlite:PATH (default: DATA-DIR/jobplane.db) or a postgres:// URL." placeholder:"DSN"`
	Definitions       string        `required:"" help:"Definitions repository: a local path (read in place) or a URL (file://, https://, ssh://; mirrored under DATA-DIR/mirror and fetched every --sync-interval)." placeholder:"REPO"`
	Channel           []string      `help:"Channel to branch mapping NAME=BRANCH, or NAME=PATTERN for a pattern channel whose runs name the branch, e.g. 'sandbox=feature/*' (repeatable; default prod=main)." placeholder:"NAME=BRANCH"`
	Protected         []string      `help:"Branch (or pattern) whose channels count as protected in policies (repeatable; default main)." placeholder:"BRANCH"`
	SyncInterval      time.Duration `name:"sync-interval" default:"30s" help:"How often to fetch the definitions repository and record catalog activations and rejections."`
	DataDir           string        `default:".jobplane" help:"Directory for the SQLite database and server state."`
	PublicURL         string        `name:"public-url" help:"URL jobs and runners use to reach this server (default http://LISTEN)."`
	SourceRepo        []string      `name:"source-repo" help:"Code repository jobs may name in 'source: {repo: NAME}', as NAME=URL (a local path is read in place; a URL is mirrored under DATA-DIR/sources; repeatable)." placeholder:"NAME=URL"`
	Artifacts         string        `name:"artifacts" help:"Object store of artifacts: empty for DATA-DIR/artifacts, or s3://BUCKET/PREFIX?endpoint=URL&region=R, shared by every replica (credentials: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or a credentials file; docs/operations.md)." placeholder:"URL"`
	S3Credentials     string        `name:"s3-credentials-file" help:"Credentials file of the S3 store, in the AWS tools' format (default: AWS_SHARED_CREDENTIALS_FILE, else ~/.aws/credentials; profile AWS_PROFILE or default)." placeholder:"FILE"`
	LogLevel          string        `default:"info" enum:"debug,info,warn,error" help:"Log level."`
	LogFormat         string        `name:"log-format" default:"text" enum:"text,json" env:"JOBPLANE_LOG_FORMAT" help:"Log lines as text (key=value) or json (one object a line, for log pipelines)."`
	GitHubAppID       int64         `name:"github-app-id" help:"GitHub App ID; enables the GitHub integration with --github-private-key and JOBPLANE_GITHUB_WEBHOOK_SECRET (docs/github.md)." placeholder:"ID"`
	GitHubPrivateKey  string        `name:"github-private-key" help:"The GitHub App's private key (PEM file)." placeholder:"FILE"`
	GitHubAPI         string        `name:"github-api" default:"https://api.github.com" help:"GitHub REST API URL (GitHub Enterprise Server: https://HOST/api/v3)." placeholder:"URL"`
	GitHubChannel     string        `name:"github-channel" default:"prod" help:"Channel of --definitions that GitHub installations without a .jobplane repository use; pull-request runs are recorded under it." placeholder:"NAME"`
	GCHeapFloor       int           `name:"gc-heap-floor" default:"256" help:"MiB the heap may grow to before the garbage collector runs (GOGC is raised while the live heap is small; 0: Go's default; the GOGC environment variable, when set, wins)." placeholder:"MIB"`
	CommitConcurrency int           `name:"commit-concurrency" default:"0" help:"PostgreSQL: group transactions running their calls at once, with as many more committing (0: the default, 2, measured on 2 cores; raise it toward the database's cores when it has more to itself). SQLite always has one writer." placeholder:"N"`
}

// Run starts the server and blocks until interrupted.
func (c *ServerCmd) Run(g *Globals) error {
	channels, err := config.ParseChannels(c.Channel)
	if err != nil {
		return err
	}
	repos, err := config.ParseSourceRepos(c.SourceRepo)
	if err != nil {
		return err
	}
	cfg := config.Server{Listen: c.Listen, DB: c.DB, Definitions: c.Definitions, Channels: channels,
		DataDir: c.DataDir, AdminToken: os.Getenv("JOBPLANE_ADMIN_TOKEN"), PublicURL: c.PublicURL,
		SecretKey: os.Getenv("JOBPLANE_SECRET_KEY"), Protected: c.Protected, SyncInterval: c.SyncInterval, SourceRepos: repos,
		Storage: config.Storage{URL: c.Artifacts, CredentialsFile: c.S3Credentials},
		GitHub: config.GitHubApp{AppID: c.GitHubAppID, PrivateKeyFile: c.GitHubPrivateKey, API: c.GitHubAPI, Channel: c.GitHubChannel,
			WebhookSecret:         os.Getenv("JOBPLANE_GITHUB_WEBHOOK_SECRET"),
			PreviousWebhookSecret: os.Getenv("JOBPLANE_GITHUB_WEBHOOK_SECRET_PREVIOUS"),
			PreviousUntil:         os.Getenv("JOBPLANE_GITHUB_WEBHOOK_SECRET_PREVIOUS_UNTIL")}}
	if c.CommitConcurrency < 0 {
		return &config.FieldError{Field: "--commit-concurrency", Message: fmt.Sprintf("%d is negative: give 0 for the default or a number of transactions", c.CommitConcurrency)}
	}
	stopGC, err := startHeapFloor("--gc-heap-floor", c.GCHeapFloor)
	if err != nil {
		return err
	}
	defer stopGC()
	log, err := logging.New(g.Stderr, logging.Options{Level: c.LogLevel, Format: c.LogFormat})
	if err != nil {
		return err
	}
	tr, err := tracing.FromEnv(g.Ctx, "jobplane-server")
	if err != nil {
		return err
	}
	defer shutdownTracing(tr, log)
	srv, err := server.Start(g.Ctx, cfg, server.Options{Logger: log, CommitConcurrency: c.CommitConcurrency, Tracing: tr})
	if err != nil {
		return err
	}
	return serveUntilDone(g.Ctx, srv)
}

// shutdownTracing exports the spans still buffered, within a few seconds.
func shutdownTracing(tr *tracing.Tracing, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := tr.Shutdown(ctx); err != nil {
		log.Warn("tracing: spans not exported at shutdown", "err", err)
	}
}

// startHeapFloor starts gcfloor for a server process, mib MiB; a flag's
// negative value is refused.
func startHeapFloor(flag string, mib int) (stop func(), err error) {
	if mib < 0 {
		return nil, &config.FieldError{Field: flag, Message: fmt.Sprintf("%d is negative: give 0 for Go's default or a size in MiB", mib)}
	}
	return gcfloor.Start(uint64(mib)<<20, time.Second), nil
}

func serveUntilDone(ctx context.Context, srv *server.Server) error {
	done := make(chan error, 1)
	go func() { done <- srv.Wait() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	stopCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return srv.Stop(stopCtx)
}

// WorkerCmd runs an execution agent.
type WorkerCmd struct {
	Server            string   `required:"" env:"JOBPLANE_SERVER" help:"Server URL." placeholder:"URL"`
	RegistrationToken string   `name:"registration-token" env:"JOBPLANE_REGISTRATION_TOKEN" help:"Single-use registration token (needed only for the first start)." placeholder:"TOKEN"`
	Pool              string   `default:"default" help:"Pool to serve (fixed by the registration token)."`
	Labels            []string `help:"Labels of this runner (comma-separated)." sep:","`
	StateDir          string   `default:".jobplane-worker" help:"Directory for the runner's key and identity."`
	Concurrency       int      `default:"1" help:"Attempts to run at once."`
	Name              string   `help:"Runner name (default: host name)."`
	LogLevel          string   `default:"info" enum:"debug,info,warn,error" help:"Log level."`
	LogFormat         string   `name:"log-format" default:"text" enum:"text,json" env:"JOBPLANE_LOG_FORMAT" help:"Log lines as text (key=value) or json (one object a line, for log pipelines). Jobs' output is not logged here: it goes to the server, line by line."`
}

// Run runs the worker until interrupted.
func (c *WorkerCmd) Run(g *Globals) error {
	name := c.Name
	if name == "" {
		name, _ = os.Hostname()
	}
	log, err := logging.New(g.Stderr, logging.Options{Level: c.LogLevel, Format: c.LogFormat})
	if err != nil {
		return err
	}
	tr, err := tracing.FromEnv(g.Ctx, "jobplane-worker")
	if err != nil {
		return err
	}
	defer shutdownTracing(tr, log)
	w, err := worker.New(worker.Config{
		Server: strings.TrimRight(c.Server, "/"), RegistrationToken: c.RegistrationToken, Pool: c.Pool,
		Labels: c.Labels, StateDir: c.StateDir, Concurrency: c.Concurrency, Name: name, Version: Version,
		Logger: log, Clock: clock.Real{}, Tracing: tr,
	})
	if err != nil {
		return err
	}
	err = w.Run(g.Ctx)
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// DevCmd runs everything needed for a first try on one machine.
type DevCmd struct {
	Listen      string `default:"127.0.0.1:7420" help:"Address to listen on."`
	DataDir     string `default:".jobplane" help:"Directory for all dev state."`
	Definitions string `help:"Definitions repository (default: an example repository created under DATA-DIR)." placeholder:"REPO"`
	LogLevel    string `default:"warn" enum:"debug,info,warn,error" help:"Log level."`
	GCHeapFloor int    `name:"gc-heap-floor" default:"256" help:"MiB the heap may grow to before the garbage collector runs (as for jobplane server; 0: Go's default)." placeholder:"MIB"`
}

// Run starts the dev environment.
func (c *DevCmd) Run(g *Globals) error {
	stopGC, err := startHeapFloor("--gc-heap-floor", c.GCHeapFloor)
	if err != nil {
		return err
	}
	defer stopGC()
	if err := os.MkdirAll(c.DataDir, 0o700); err != nil {
		return err
	}
	defs := c.Definitions
	if defs == "" {
		defs = filepath.Join(c.DataDir, "definitions")
		if _, err := os.Stat(filepath.Join(defs, ".git")); errors.Is(err, os.ErrNotExist) {
			if _, err := gitsync.InitRepo(defs, "main", gitsync.ExampleFiles(), "Example jobplane definitions"); err != nil {
				return fmt.Errorf("create example definitions repository: %w", err)
			}
		}
	}
	token, err := devToken(c.DataDir)
	if err != nil {
		return err
	}
	log := newLogger(g.Stderr, c.LogLevel)
	srv, err := server.Start(g.Ctx, config.Server{
		Listen: c.Listen, DataDir: c.DataDir, Definitions: defs,
		Channels: map[string]string{"prod": "main"}, AdminToken: token,
	}, server.Options{Logger: log})
	if err != nil {
		return err
	}
	if err := config.WriteClient(c.DataDir, config.Client{Server: srv.URL(), Token: token}); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(g.Ctx)
	defer cancel()
	workerDone := make(chan error, 1)
	go func() { workerDone <- c.runWorker(ctx, srv.URL(), token, log) }()

	fmt.Fprintf(g.Stdout, `jobplane dev is running at %s
  web UI:      %[1]s/ (sign in with the token in %[5]s)
  data:        %[2]s
  definitions: %[3]s (channel prod = branch main)
  admin token: in %[4]s

Next, in another terminal in this directory:
  jobplane run hello --wait                 request a run and follow its log
  jobplane run hello -p name=you --wait     with a parameter
  jobplane runs                             list runs
Stop with Ctrl-C.
`, srv.URL(), c.DataDir, defs, filepath.Join(c.DataDir, config.ClientFile), filepath.Join(c.DataDir, "admin-token"))
	err = serveUntilDone(g.Ctx, srv)
	cancel()
	select {
	case <-workerDone:
	case <-time.After(10 * time.Second):
	}
	return err
}

func (c *DevCmd) runWorker(ctx context.Context, url, token string, log interface{ Warn(string, ...any) }) error {
	stateDir := filepath.Join(c.DataDir, "worker")
	regToken := ""
	if _, err := os.Stat(filepath.Join(stateDir, "runner.json")); errors.Is(err, os.ErrNotExist) {
		cl := &apiclient.Client{BaseURL: url, Token: token, HTTP: http.DefaultClient}
		resp, err := cl.CreateRegistrationToken(ctx, protocol.RegistrationTokenRequest{Pool: "default", TTLSeconds: 600})
		if err != nil {
			log.Warn("dev: create registration token", "err", err)
			return err
		}
		regToken = resp.Token
	}
	w, err := worker.New(worker.Config{
		Server: url, RegistrationToken: regToken, Pool: "default", StateDir: stateDir,
		Concurrency: 4, Name: "dev-worker", Version: Version, Clock: clock.Real{},
		Logger: newLogger(os.Stderr, "warn"),
	})
	if err != nil {
		return err
	}
	return w.Run(ctx)
}

// devToken returns the dev admin token, made once and kept in the data dir.
func devToken(dir string) (string, error) {
	p := filepath.Join(dir, "admin-token")
	b, err := os.ReadFile(p)
	if err == nil && len(strings.TrimSpace(string(b))) >= 16 {
		return strings.TrimSpace(string(b)), nil
	}
	tok := "jpt_" + id.Secret(24)
	if err := os.WriteFile(p, []byte(tok+"\n"), 0o600); err != nil {
		return "", err
	}
	return tok, nil
}

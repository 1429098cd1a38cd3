package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jobplane/jobplane/internal/apiclient"
	"github.com/jobplane/jobplane/internal/catalog"
	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/config"
	"github.com/jobplane/jobplane/internal/executor"
	"github.com/jobplane/jobplane/internal/executor/process"
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
	Listen             string        `default:"127.0.0.1:7420" help:"Address to listen on."`
	DB                 string        `name:"db" help:"sqlite:PATH (default: DATA-DIR/jobplane.db) or a postgres:// URL." placeholder:"DSN"`
	Definitions        string        `required:"" help:"Definitions repository: a local path (read in place) or a URL (file://, https://, ssh://; mirrored under DATA-DIR/mirror and fetched every --sync-interval)." placeholder:"REPO"`
	Channel            []string      `help:"Channel to branch mapping NAME=BRANCH, or NAME=PATTERN for a pattern channel whose runs name the branch, e.g. 'sandbox=feature/*' (repeatable; default prod=main)." placeholder:"NAME=BRANCH"`
	Protected          []string      `help:"Branch (or pattern) whose channels count as protected in policies (repeatable; default main)." placeholder:"BRANCH"`
	SyncInterval       time.Duration `name:"sync-interval" default:"30s" help:"How often to fetch the definitions repository and record catalog activations and rejections."`
	DataDir            string        `default:".jobplane" help:"Directory for the SQLite database and server state."`
	PublicURL          string        `name:"public-url" help:"URL jobs and runners use to reach this server (default http://LISTEN)."`
	SourceRepo         []string      `name:"source-repo" help:"Code repository jobs may name in 'source: {repo: NAME}', as NAME=URL (a local path is read in place; a URL is mirrored under DATA-DIR/sources; repeatable)." placeholder:"NAME=URL"`
	Artifacts          string        `name:"artifacts" help:"Object store of artifacts: empty for DATA-DIR/artifacts, or s3://BUCKET/PREFIX?endpoint=URL&region=R, shared by every replica (credentials: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or a credentials file; docs/operations.md)." placeholder:"URL"`
	S3Credentials      string        `name:"s3-credentials-file" help:"Credentials file of the S3 store, in the AWS tools' format (default: AWS_SHARED_CREDENTIALS_FILE, else ~/.aws/credentials; profile AWS_PROFILE or default)." placeholder:"FILE"`
	RetentionLogs      string        `name:"retention-logs" help:"Delete the logs of runs ended this long ago (30d, 36h) when their job sets no retention; default: keep (docs/operations.md, Retention)." placeholder:"PERIOD"`
	RetentionArtifacts string        `name:"retention-artifacts" help:"Delete the artifacts of runs ended this long ago (30d, 36h) when their job sets no retention; default: keep." placeholder:"PERIOD"`
	ArchiveLogsAfter   string        `name:"archive-logs-after" help:"Move the logs of runs ended this long ago (1h, 30m, 2d) from the database to the object store, where they are still served; default: keep them in the database (docs/operations.md, Logs in the object store)." placeholder:"PERIOD"`
	LogLevel           string        `default:"info" enum:"debug,info,warn,error" help:"Log level."`
	LogFormat          string        `name:"log-format" default:"text" enum:"text,json" env:"JOBPLANE_LOG_FORMAT" help:"Log lines as text (key=value) or json (one object a line, for log pipelines)."`
	GitHubAppID        int64         `name:"github-app-id" help:"GitHub App ID; enables the GitHub integration with --github-private-key and JOBPLANE_GITHUB_WEBHOOK_SECRET (docs/github.md)." placeholder:"ID"`
	GitHubPrivateKey   string        `name:"github-private-key" help:"The GitHub App's private key (PEM file)." placeholder:"FILE"`
	GitHubAPI          string        `name:"github-api" default:"https://api.github.com" help:"GitHub REST API URL (GitHub Enterprise Server: https://HOST/api/v3)." placeholder:"URL"`
	GitHubOIDCIssuer   string        `name:"github-oidc-issuer" default:"https://token.actions.githubusercontent.com" help:"Issuer of the Actions OIDC tokens that workflows of the GitHub Actions mode present (docs/github.md)." placeholder:"URL"`
	GitHubChannel      string        `name:"github-channel" default:"prod" help:"Channel of --definitions that GitHub installations without a .jobplane repository use; pull-request runs are recorded under it." placeholder:"NAME"`
	GCHeapFloor        int           `name:"gc-heap-floor" default:"256" help:"MiB the heap may grow to before the garbage collector runs (GOGC is raised while the live heap is small; 0: Go's default; the GOGC environment variable, when set, wins)." placeholder:"MIB"`
	ShutdownTimeout    time.Duration `name:"shutdown-timeout" default:"25s" help:"On SIGTERM or Ctrl-C: how long requests in flight may take to finish before their connections are cut (a clean stop takes far less: docs/operations.md)."`
	CommitConcurrency  int           `name:"commit-concurrency" default:"0" help:"PostgreSQL: group transactions running their calls at once, with as many more committing (0: the default, 2, measured on 2 cores; raise it toward the database's cores when it has more to itself). SQLite always has one writer." placeholder:"N"`
	IsolateWriteGrants bool          `name:"isolate-write-grants" help:"Hand runs with a connector granted at write only to isolated runners (docs/security.md)."`
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
		IsolateWriteGrants: c.IsolateWriteGrants,
		Storage:            config.Storage{URL: c.Artifacts, CredentialsFile: c.S3Credentials},
		GitHub: config.GitHubApp{AppID: c.GitHubAppID, PrivateKeyFile: c.GitHubPrivateKey, API: c.GitHubAPI, Channel: c.GitHubChannel, OIDCIssuer: c.GitHubOIDCIssuer,
			WebhookSecret:         os.Getenv("JOBPLANE_GITHUB_WEBHOOK_SECRET"),
			PreviousWebhookSecret: os.Getenv("JOBPLANE_GITHUB_WEBHOOK_SECRET_PREVIOUS"),
			PreviousUntil:         os.Getenv("JOBPLANE_GITHUB_WEBHOOK_SECRET_PREVIOUS_UNTIL")}}
	for _, p := range []struct {
		flag, val string
		dst       *time.Duration
	}{{"--retention-logs", c.RetentionLogs, &cfg.Retention.Logs}, {"--retention-artifacts", c.RetentionArtifacts, &cfg.Retention.Artifacts}} {
		if p.val == "" {
			continue
		}
		d, err := catalog.ParseRetention(p.val)
		if err != nil {
			return &config.FieldError{Field: p.flag, Message: err.Error()}
		}
		*p.dst = d
	}
	if c.ArchiveLogsAfter != "" {
		d, err := parseArchiveAfter(c.ArchiveLogsAfter)
		if err != nil {
			return &config.FieldError{Field: "--archive-logs-after", Message: err.Error()}
		}
		cfg.Retention.ArchiveLogs = d
	}
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
	return serveUntilDone(g.Ctx, srv, c.ShutdownTimeout)
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

// serveUntilDone serves until ctx ends (SIGTERM, Ctrl-C), then stops the
// server gracefully within timeout (server.Stop).
func serveUntilDone(ctx context.Context, srv *server.Server, timeout time.Duration) error {
	done := make(chan error, 1)
	go func() { done <- srv.Wait() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	if timeout <= 0 {
		timeout = defaultShutdownTimeout
	}
	stopCtx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return srv.Stop(stopCtx)
}

// defaultShutdownTimeout bounds a graceful stop: below the 30 s a
// container runtime usually waits between SIGTERM and SIGKILL.
const defaultShutdownTimeout = 25 * time.Second

// WorkerCmd runs an execution agent.
type WorkerCmd struct {
	Server            []string `required:"" env:"JOBPLANE_SERVER" sep:"," help:"Server URL; repeat the flag or give a comma-separated list for replicas on one database (a host name that resolves to several addresses counts as one server per address). Every call fails over from a server that is unreachable or answers 503 to the next." placeholder:"URL"`
	RegistrationToken string   `name:"registration-token" env:"JOBPLANE_REGISTRATION_TOKEN" help:"Single-use registration token (needed only for the first start)." placeholder:"TOKEN"`
	Pool              string   `default:"default" help:"Pool to serve (fixed by the registration token)."`
	Labels            []string `help:"Labels of this runner (comma-separated)." sep:","`
	StateDir          string   `default:".jobplane-worker" help:"Directory for the runner's key and identity."`
	Concurrency       int      `default:"1" help:"Attempts to run at once."`
	Name              string   `help:"Runner name (default: host name)."`
	LogLevel          string   `default:"info" enum:"debug,info,warn,error" help:"Log level."`
	LogFormat         string   `name:"log-format" default:"text" enum:"text,json" env:"JOBPLANE_LOG_FORMAT" help:"Log lines as text (key=value) or json (one object a line, for log pipelines). Jobs' output is not logged here: it goes to the server, line by line."`
	Executor          string   `default:"process" enum:"process,container,kubernetes" help:"How jobs run: process (supervised child processes of the worker), container (a container per attempt through Docker's API: Docker or Podman) or kubernetes (a Kubernetes Job per attempt; docs/executors.md)."`
	JobUser           string   `name:"job-user" help:"--executor process: run jobs as this OS user (own HOME, fresh workspace), out of reach of the runner's key; needs the worker to run as root. Without it jobs run as the worker's user and the runner is not isolated." placeholder:"USER"`
	Kubeconfig        string   `help:"--executor kubernetes: kubeconfig file (default: the pod's service account inside a cluster, else KUBECONFIG or ~/.kube/config)." placeholder:"PATH"`
	Namespace         string   `env:"POD_NAMESPACE" help:"--executor kubernetes: namespace of the attempts' Jobs and Secrets." placeholder:"NS"`
	KubeImage         string   `name:"kube-image" help:"--executor kubernetes: image of jobs whose definition names no run.image (without it they fail to start)." placeholder:"REF"`
	KubeSupervisor    string   `name:"kube-supervisor-image" help:"--executor kubernetes: an image whose entrypoint is this jobplane binary (the worker's own image); its supervisor runs in each job's pod and ends the job at the lease's end even if the worker is gone. Without it only the Job's activeDeadlineSeconds bounds the pod." placeholder:"REF"`
	ContainerFlags
}

// executor builds the executor the flags select.
func (c *WorkerCmd) executor(ctx context.Context) (executor.Executor, error) {
	if c.Executor == "container" {
		if c.JobUser != "" {
			return nil, errors.New("--job-user is for --executor process; a container is the job's isolation")
		}
		return containerExecutor(ctx, c.ContainerFlags)
	}
	if c.Executor == "kubernetes" {
		if c.JobUser != "" {
			return nil, errors.New("--job-user is for --executor process; a Kubernetes Job's pod is the job's isolation")
		}
		return kubernetesExecutor(c.Kubeconfig, c.Namespace, c.KubeImage, c.KubeSupervisor)
	}
	o := process.Options{Clock: clock.Real{}}
	if c.JobUser != "" {
		u, err := process.LookupUser(c.JobUser)
		if err != nil {
			return nil, err
		}
		o.JobUser = u
	}
	return process.New(o), nil
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
	ex, err := c.executor(g.Ctx)
	if err != nil {
		return err
	}
	switch {
	case ex.Capabilities().Isolated:
		log.Info("worker: " + ex.Name() + " executor: jobs are isolated from the runner's key and state directory")
	default:
		log.Warn("worker: NOT ISOLATED: jobs run as the worker's own user and can read the runner's key in " + c.StateDir +
			" and act as this runner; use --job-user to isolate them (see docs/security.md)")
	}
	var servers []string
	for _, s := range c.Server {
		if s = strings.TrimRight(strings.TrimSpace(s), "/"); s != "" {
			servers = append(servers, s)
		}
	}
	w, err := worker.New(worker.Config{
		Servers: servers, RegistrationToken: c.RegistrationToken, Pool: c.Pool,
		Labels: c.Labels, StateDir: c.StateDir, Concurrency: c.Concurrency, Name: name, Version: Version,
		Logger: log, Clock: clock.Real{}, Tracing: tr, Executor: ex,
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
	Executor    string `default:"process" enum:"process,container" help:"How the dev worker runs jobs: process (child processes, needs nothing) or container (a container per attempt; needs Docker or Podman's API, see --container-host)."`
	ContainerFlags
}

// devContainerImage runs the dev worker's jobs that name no run.image (the
// example jobs need a shell only).
const devContainerImage = "docker.io/library/busybox:stable"

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
	var snapFiles map[string]string
	switch {
	case defs == "":
		defs = filepath.Join(c.DataDir, "definitions")
		if _, err := os.Stat(filepath.Join(defs, ".git")); errors.Is(err, os.ErrNotExist) {
			if _, err := gitsync.InitRepo(defs, "main", gitsync.ExampleFiles(), "Example jobplane definitions"); err != nil {
				return fmt.Errorf("create example definitions repository: %w", err)
			}
		}
	case isPlainDir(defs):
		snap, files, err := snapshotDefinitions(defs, c.DataDir)
		if err != nil {
			return err
		}
		fmt.Fprintf(g.Stdout, "dev: %s is not a Git repository (the server reads definitions from commits);\n"+
			"     serving a snapshot of it committed to %s. Edit %[1]s and restart jobplane dev to see changes.\n", defs, snap)
		defs, snapFiles = snap, files
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
	var ex executor.Executor
	if c.Executor == "container" {
		if c.ContainerImage == "" {
			c.ContainerImage = devContainerImage
		}
		if ex, err = containerExecutor(g.Ctx, c.ContainerFlags); err != nil {
			stopCtx, cancel := context.WithTimeout(context.Background(), defaultShutdownTimeout)
			defer cancel()
			_ = srv.Stop(stopCtx)
			return err
		}
	}
	ctx, cancel := context.WithCancel(g.Ctx)
	defer cancel()
	workerDone := make(chan error, 1)
	go func() { workerDone <- c.runWorker(ctx, srv.URL(), token, ex, log) }()

	admin := &apiclient.Client{BaseURL: srv.URL(), Token: token, HTTP: http.DefaultClient}
	if names := connectorSecrets(snapFiles); len(names) > 0 {
		if err := seedSecrets(g.Ctx, admin, c.DataDir, names, g.Stdout); err != nil {
			log.Warn(err.Error())
		}
	}
	pending := ""
	if c.Definitions == "" {
		if pending, err = seedApproval(g.Ctx, admin, c.DataDir); err != nil {
			log.Warn(err.Error())
		}
	}

	fmt.Fprintf(g.Stdout, `jobplane dev is running at %s
  web UI:      %[1]s/ (sign in with the token in %[5]s)
  data:        %[2]s
  definitions: %[3]s (channel prod = branch main)
  admin token: in %[4]s

Next, in another terminal in this directory (no jobplane on your PATH? go install ./cmd/jobplane,
or type go run ./cmd/jobplane instead of jobplane):
  jobplane run hello --wait                 request a run and follow its log
  jobplane run hello -p name=you --wait     with a parameter
  jobplane runs                             list runs
  jobplane jobs                             the jobs, and who may run them
`, srv.URL(), c.DataDir, defs, filepath.Join(c.DataDir, config.ClientFile), filepath.Join(c.DataDir, "admin-token"))
	if pending != "" {
		fmt.Fprintf(g.Stdout, "  jobplane approve %s    %s asked to run migrate; approve it as admin (or in the web UI: Approvals)\n", pending, devSecondPrincipal)
	}
	fmt.Fprintln(g.Stdout, "Stop with Ctrl-C.")
	err = serveUntilDone(g.Ctx, srv, defaultShutdownTimeout)
	cancel()
	select {
	case <-workerDone:
	case <-time.After(10 * time.Second):
	}
	return err
}

func (c *DevCmd) runWorker(ctx context.Context, url, token string, ex executor.Executor, log interface{ Warn(string, ...any) }) error {
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
		Logger: newLogger(os.Stderr, "warn"), Executor: ex,
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

// parseArchiveAfter reads --archive-logs-after: whole days (2d) or a
// duration of at least a second.
func parseArchiveAfter(v string) (time.Duration, error) {
	if days, ok := strings.CutSuffix(v, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n < 1 || n > 3650 {
			return 0, fmt.Errorf("%q is not a number of days between 1 and 3650", v)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < time.Second {
		return 0, fmt.Errorf("%q is not a duration of at least 1s (30m, 1h, 2d)", v)
	}
	return d, nil
}

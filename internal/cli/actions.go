package cli

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/jobplane/jobplane/internal/apiclient"
	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/logging"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/tracing"
	"github.com/jobplane/jobplane/internal/worker"
)

// ActionsRunCmd runs inside a GitHub Actions workflow dispatched by the
// compatibility mode (docs/github.md): it exchanges the job's OIDC token
// for its attempt and runs it like a worker.
type ActionsRunCmd struct {
	Server    string `required:"" env:"JOBPLANE_SERVER" help:"Server URL." placeholder:"URL"`
	Attempt   string `required:"" env:"JOBPLANE_ATTEMPT" help:"The attempt the workflow was dispatched for (its jobplane_attempt input)." placeholder:"ID"`
	Audience  string `default:"jobplane" help:"Audience of the Actions OIDC token (the server's documented value)."`
	StateDir  string `name:"state-dir" help:"Directory for the job's working directory (default: $RUNNER_TEMP/jobplane)." placeholder:"DIR"`
	LogLevel  string `default:"info" enum:"debug,info,warn,error" help:"Log level."`
	LogFormat string `name:"log-format" default:"text" enum:"text,json" env:"JOBPLANE_LOG_FORMAT" help:"Log lines as text (key=value) or json."`
}

// Run exchanges, runs the attempt and exits non-zero unless it succeeded.
func (c *ActionsRunCmd) Run(g *Globals) error {
	log, err := logging.New(g.Stderr, logging.Options{Level: c.LogLevel, Format: c.LogFormat})
	if err != nil {
		return err
	}
	dir := c.StateDir
	if dir == "" {
		base := os.Getenv("RUNNER_TEMP")
		if base == "" {
			base = os.TempDir()
		}
		dir = filepath.Join(base, "jobplane")
	}
	server := strings.TrimRight(c.Server, "/")
	// The key is made here and never written anywhere: it is the
	// attempt's credential, and it dies with the job.
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return err
	}
	oidc, err := apiclient.ActionsIDToken(g.Ctx, nil, c.Audience)
	if err != nil {
		return err
	}
	rc := &apiclient.RunnerClient{BaseURL: server, Clock: clock.Real{}}
	sent := rc.Clock.Now() // the lease's trust window starts when the exchange is sent
	resp, err := rc.ActionsExchange(g.Ctx, oidc, protocol.ActionsExchangeRequest{AttemptID: c.Attempt, PublicKey: protocol.EncodeKey(pub)})
	if err != nil {
		return fmt.Errorf("exchange the Actions OIDC token for attempt %s: %w", c.Attempt, err)
	}
	tr, err := tracing.FromEnv(g.Ctx, "jobplane-actions-run")
	if err != nil {
		return err
	}
	defer shutdownTracing(tr, log)
	w, err := worker.New(worker.Config{Server: server, StateDir: dir, Name: "github-actions", Version: Version,
		Logger: log, Clock: clock.Real{}, Tracing: tr})
	if err != nil {
		return err
	}
	outcome := w.RunAssigned(g.Ctx, resp.RunnerID, key, resp.Assignment, sent)
	if errors.Is(g.Ctx.Err(), context.Canceled) {
		return fmt.Errorf("stopped before the attempt finished")
	}
	if outcome != "succeeded" {
		return fmt.Errorf("attempt %s of run %s: %s", resp.Assignment.AttemptID, resp.Assignment.RunID, orUnknown(outcome))
	}
	return nil
}

func orUnknown(s string) string {
	if s == "" {
		return "did not start"
	}
	return s
}

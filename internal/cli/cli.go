package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/alecthomas/kong"

	"github.com/jobplane/jobplane/internal/apiclient"
	"github.com/jobplane/jobplane/internal/config"
	"github.com/jobplane/jobplane/internal/logging"
	"github.com/jobplane/jobplane/internal/policy"
	"github.com/jobplane/jobplane/internal/protocol"
)

// Globals are what every command receives.
type Globals struct {
	Ctx    context.Context
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
}

// ClientFlags select the server for client verbs.
type ClientFlags struct {
	Server string `help:"Server URL (default: $JOBPLANE_SERVER, else ./.jobplane/cli.json)." placeholder:"URL"`
	Token  string `help:"API token (default: $JOBPLANE_TOKEN, else ./.jobplane/cli.json)." placeholder:"TOKEN"`
	JSON   bool   `help:"Print JSON for scripts." name:"json"`
}

func (f *ClientFlags) client() (*apiclient.Client, error) {
	c, err := config.LoadClient(f.Server, f.Token)
	if err != nil {
		return nil, err
	}
	return &apiclient.Client{BaseURL: strings.TrimRight(c.Server, "/"), Token: c.Token, HTTP: &http.Client{Timeout: 0}}, nil
}

type cliRoot struct {
	Server     ServerCmd     `cmd:"" help:"Run the control plane."`
	Worker     WorkerCmd     `cmd:"" help:"Run an execution agent that claims and runs jobs."`
	ActionsRun ActionsRunCmd `cmd:"" name:"actions-run" help:"Inside a GitHub Actions workflow: exchange the job's OIDC token for its attempt and run it."`
	Dev        DevCmd        `cmd:"" help:"Run a server, a local worker and an example definitions repository, for a first try."`
	Run        RunCmd        `cmd:"" help:"Request a run of a job."`
	Runs       RunsCmd       `cmd:"" help:"List or show runs."`
	Logs       LogsCmd       `cmd:"" help:"Print a run's log."`
	Artifacts  ArtifactsCmd  `cmd:"" help:"List a run's artifacts, or download one."`
	Cancel     CancelCmd     `cmd:"" help:"Cancel a run."`
	Approve    ApproveCmd    `cmd:"" help:"Approve a run waiting for your approval."`
	Reject     RejectCmd     `cmd:"" help:"Reject a run waiting for your approval."`
	Runners    RunnersCmd    `cmd:"" help:"Manage runners and registration tokens."`
	Principals PrincipalsCmd `cmd:"" help:"Manage principals (admin)."`
	Tokens     TokensCmd     `cmd:"" help:"Manage API tokens (admin)."`
	Leases     LeasesCmd     `cmd:"" help:"Show run leases, or force-release one (admin)."`
	Catalogs   CatalogsCmd   `cmd:"" help:"Show each channel's active and rejected commits, or sync now (admin)."`
	Schedules  SchedulesCmd  `cmd:"" help:"List the schedules of your tenant's definitions and their next firings (an installation's tenant: its .jobplane schedules)."`
	Jobs       JobsCmd       `cmd:"" help:"List a channel's jobs or show one: definition, owners, runbook, who may run it."`
	Validate   ValidateCmd   `cmd:"" help:"Validate a definitions repository (a directory on disk or a revision) and run its policy tests."`
	Diff       DiffCmd       `cmd:"" help:"Show who gains or loses the right to run which job between two revisions."`
	Import     ImportCmd     `cmd:"" help:"Inventory and classify existing CI jobs, and write definitions for those that should move to jobplane."`
	Secrets    SecretsCmd    `cmd:"" help:"Manage secrets (admin)."`
	Audit      AuditCmd      `cmd:"" help:"Read, export (--json) or verify the audit log (admin)."`
	Admin      AdminCmd      `cmd:"" help:"Administrative verbs."`
	Bench      BenchCmd      `cmd:"" help:"Measure request and claim+result throughput of no-op runs."`
	Version    VersionCmd    `cmd:"" help:"Print the version: the module version and the Git revision it was built from."`
	Completion CompletionCmd `cmd:"" help:"Print a shell completion script (bash, zsh or fish); see docs/cli.md."`

	VersionFlag kong.VersionFlag `name:"version" help:"Print the version and exit."`
}

// VersionCmd prints the version.
type VersionCmd struct{}

// Run prints the version.
func (VersionCmd) Run(g *Globals) error {
	fmt.Fprintln(g.Stdout, versionString())
	return nil
}

// ExitError carries a process exit code (for `run --wait`).
type ExitError struct{ Code int }

func (e *ExitError) Error() string { return fmt.Sprintf("exit %d", e.Code) }

// Main runs the command line and returns the exit code.
func Main(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	var root cliRoot
	exit := -1
	parser, err := newParser(&root, stdout, stderr, func(code int) { exit = code; panic(exitPanic{}) })
	if err != nil {
		fmt.Fprintln(stderr, "jobplane:", err)
		return ExitUsage
	}
	if len(args) == 0 {
		// Nothing asked: say what there is, as --help does.
		args = []string{"--help"}
	}
	code := func() (code int) {
		defer func() {
			if r := recover(); r != nil {
				if _, ok := r.(exitPanic); ok {
					code = exit
					return
				}
				panic(r)
			}
		}()
		kctx, err := parser.Parse(args)
		if err != nil {
			fmt.Fprintln(stderr, "jobplane:", err)
			return ExitUsage
		}
		err = kctx.Run(&Globals{Ctx: ctx, Stdin: stdin, Stdout: stdout, Stderr: stderr})
		var ee *ExitError
		if err != nil && !errors.As(err, &ee) {
			printErr(stderr, err)
			printHints(stderr, err)
		}
		return exitCode(err)
	}()
	return code
}

func newParser(root *cliRoot, stdout, stderr io.Writer, exit func(int)) (*kong.Kong, error) {
	return kong.New(root,
		kong.Name("jobplane"),
		kong.Description("jobplane: a job control plane. Runs with identity, leases, per-run authorization and Git-reviewed definitions.\n\nA first try: `jobplane dev`, then `jobplane run hello --wait` in another terminal. Exit codes: docs/cli.md."),
		kong.Writers(stdout, stderr),
		kong.Exit(exit),
		kong.UsageOnError(),
		kong.Vars{"version": versionString()},
	)
}

type exitPanic struct{}

func printErr(w io.Writer, err error) {
	var ae *apiclient.APIError
	if errors.As(err, &ae) {
		p := ae.Problem
		msg := p.Detail
		if msg == "" {
			msg = p.Title
		}
		fmt.Fprintf(w, "jobplane: %s (%s", msg, p.Code)
		if p.Field != "" {
			fmt.Fprintf(w, ", field %s", p.Field)
		}
		fmt.Fprintln(w, ")")
		if p.Decision != nil {
			printDecision(w, p.Decision)
		}
		if p.RunID != "" {
			fmt.Fprintf(w, "  run: %s\n", p.RunID)
		}
		return
	}
	if ue, ok := asUnreachable(err); ok {
		fmt.Fprintln(w, "jobplane:", ue.Error())
		return
	}
	fmt.Fprintln(w, "jobplane:", err)
}

// printDecision explains a policy decision: the sentence, then every rule
// considered and why it did or did not match.
func printDecision(w io.Writer, d any) {
	b, _ := json.Marshal(d)
	// The detail is the policy engine's own account of the decision.
	var dec protocol.Decision
	var detail policy.Decision
	if json.Unmarshal(b, &dec) != nil || dec.Explanation == "" || (len(dec.Detail) > 0 && json.Unmarshal(dec.Detail, &detail) != nil) {
		fmt.Fprintf(w, "  decision: %s\n", b)
		return
	}
	fmt.Fprintf(w, "  why: %s\n", dec.Explanation)
	for _, r := range detail.Rules {
		mark := "no match"
		if r.Matched {
			mark = "matched"
		}
		fmt.Fprintf(w, "  - %s rule %s (%s:%d): %s", r.Effect, r.ID, r.File, r.Line, mark)
		if r.Reason != "" {
			fmt.Fprintf(w, ": %s", r.Reason)
		}
		fmt.Fprintln(w)
	}
}

// printJSON writes v indented, without HTML escaping: the server's own
// escaping of values it relays (\u003c in a parameter or a detail) is undone
// too, so that scripts and people see the characters that were sent.
func printJSON(w io.Writer, v any) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return err
	}
	_, err := w.Write(unescapeHTML(buf.Bytes()))
	return err
}

func newLogger(w io.Writer, level string) *slog.Logger {
	log, err := logging.New(w, logging.Options{Level: level})
	if err != nil {
		// The level flags are enums that kong checks first.
		panic(err)
	}
	return log
}

func ago(t *time.Time, now time.Time) string {
	if t == nil {
		return "-"
	}
	return now.Sub(*t).Round(time.Second).String() + " ago"
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

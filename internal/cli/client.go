package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jobplane/jobplane/internal/apiclient"
	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/protocol"
)

// RunCmd requests a run.
type RunCmd struct {
	ClientFlags
	Job            string   `arg:"" help:"Job name."`
	Param          []string `short:"p" help:"Parameter key=value (repeatable). Values that parse as JSON numbers, booleans, arrays or objects are sent as such; quote them to force a string, e.g. -p 'id=\"007\"'. Commas are part of the value: -p 'ids=[1,2]'." placeholder:"KEY=VALUE" sep:"none"`
	Channel        string   `default:"prod" help:"Channel to run in."`
	Ref            string   `help:"Branch, for pattern channels."`
	Reason         string   `help:"Why this run is requested (kept with the run)."`
	IdempotencyKey string   `name:"idempotency-key" help:"Requests with the same key return the same run. With --params-file, line N's run gets KEY:N, so that the same command again requests nothing twice."`
	Wait           bool     `help:"Follow the log; exit 0 only if the run succeeded."`
	ParamsFile     string   `name:"params-file" type:"existingfile" help:"Request one run per line of this file (JSON Lines: a JSON object of parameters per line; blank lines and lines starting with # are skipped), in calls of up to 100 (a backfill). -p values apply to every line." placeholder:"FILE"`
}

// parseParams turns key=value flags into a JSON object. A value is JSON when
// it parses as JSON (number, boolean, null, array, object, quoted string),
// else it is a string.
func parseParams(kvs []string) (json.RawMessage, error) {
	m := map[string]json.RawMessage{}
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("-p %q: want key=value", kv)
		}
		if _, dup := m[k]; dup {
			return nil, fmt.Errorf("-p %s given twice", k)
		}
		var probe any
		if json.Unmarshal([]byte(v), &probe) == nil {
			m[k] = json.RawMessage(v)
		} else {
			b, _ := json.Marshal(v)
			m[k] = b
		}
	}
	b, err := json.Marshal(m)
	return b, err
}

// Run requests the run and optionally follows it.
func (c *RunCmd) Run(g *Globals) error {
	cl, err := c.client()
	if err != nil {
		return err
	}
	params, err := parseParams(c.Param)
	if err != nil {
		return &usageError{msg: err.Error()}
	}
	if c.ParamsFile != "" {
		return c.runMany(g, cl, params)
	}
	run, err := cl.CreateRun(g.Ctx, &protocol.RunRequest{Job: c.Job, Channel: c.Channel, Ref: c.Ref, Params: params, Reason: c.Reason, IdempotencyKey: c.IdempotencyKey})
	if err != nil {
		return c.explain(g, err)
	}
	if !c.Wait {
		if c.JSON {
			return printJSON(g.Stdout, run)
		}
		fmt.Fprintf(g.Stdout, "run %s %s (job %s, channel %s, commit %s)\n", run.ID, run.State, run.Job, run.Channel, short(run.Commit))
		return nil
	}
	fmt.Fprintf(g.Stderr, "run %s %s (job %s, channel %s, commit %s)\n", run.ID, run.State, run.Job, run.Channel, short(run.Commit))
	state, err := cl.FollowLogs(g.Ctx, run.ID, 0, func(l protocol.RunLogLine) error {
		return printLine(g.Stdout, l, c.JSON)
	})
	if err != nil && g.Ctx.Err() != nil {
		fmt.Fprintf(g.Stderr, "\ninterrupted: run %s goes on without you (stopping the CLI does not stop the run).\n"+
			"  follow it again:  jobplane logs -f %[1]s\n  see its state:    jobplane runs show %[1]s\n  stop it:          jobplane cancel %[1]s\n", run.ID)
		return &ExitError{Code: ExitInterrupted}
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(g.Stderr, "run %s %s\n", run.ID, state)
	if state != "succeeded" {
		return &ExitError{Code: 1}
	}
	return nil
}

// explain adds what to do to a refused request: the jobs with a name like
// the one typed, or the parameters the job takes.
func (c *RunCmd) explain(g *Globals, err error) error {
	var ae *apiclient.APIError
	if !errors.As(err, &ae) {
		return err
	}
	switch ae.Problem.Code {
	case protocol.CodeUnknownJob:
		cl, cerr := c.client()
		if cerr != nil {
			return err
		}
		v, lerr := cl.Jobs(g.Ctx, c.Channel, c.Ref)
		if lerr != nil {
			return err
		}
		names := make([]string, 0, len(v.Jobs))
		for _, j := range v.Jobs {
			names = append(names, j.Name)
		}
		if near := closest(c.Job, names); len(near) > 0 {
			return withHints(err, "did you mean "+strings.Join(near, " or ")+"?")
		}
		return withHints(err, fmt.Sprintf("jobs in channel %s: %s (jobplane jobs lists them)", v.Channel, strings.Join(names, ", ")))
	case protocol.CodeInvalidParams:
		cl, cerr := c.client()
		if cerr != nil {
			return err
		}
		v, jerr := cl.Job(g.Ctx, c.Job, c.Channel, c.Ref)
		if jerr != nil {
			return err
		}
		if hint := paramsHint(c.Job, v.Definition); hint != "" {
			return withHints(err, hint)
		}
	}
	return err
}

// paramsHint lists the parameters a job's definition declares.
func paramsHint(job string, def json.RawMessage) string {
	var d struct {
		Params struct {
			Properties map[string]struct {
				Type    any             `json:"type"`
				Default json.RawMessage `json:"default"`
			} `json:"properties"`
			Required []string `json:"required"`
		} `json:"params"`
	}
	if json.Unmarshal(def, &d) != nil {
		return ""
	}
	if len(d.Params.Properties) == 0 {
		return fmt.Sprintf("job %s takes no parameters", job)
	}
	names := make([]string, 0, len(d.Params.Properties))
	for n := range d.Params.Properties {
		names = append(names, n)
	}
	slices.Sort(names)
	parts := make([]string, 0, len(names))
	for _, n := range names {
		p := d.Params.Properties[n]
		desc := n
		var attrs []string
		if p.Type != nil {
			attrs = append(attrs, fmt.Sprint(p.Type))
		}
		if slices.Contains(d.Params.Required, n) {
			attrs = append(attrs, "required")
		}
		if len(p.Default) > 0 {
			attrs = append(attrs, "default "+string(p.Default))
		}
		if len(attrs) > 0 {
			desc += " (" + strings.Join(attrs, ", ") + ")"
		}
		parts = append(parts, desc)
	}
	return fmt.Sprintf("parameters of %s: %s; give them as -p KEY=VALUE", job, strings.Join(parts, ", "))
}

func printLine(w io.Writer, l protocol.RunLogLine, asJSON bool) error {
	if asJSON {
		b, _ := json.Marshal(l)
		_, err := fmt.Fprintln(w, string(b))
		return err
	}
	prefix := ""
	switch l.Stream {
	case "stderr":
		prefix = "! "
	case "system":
		prefix = "# "
	}
	_, err := fmt.Fprintf(w, "%s%s\n", prefix, l.Text)
	return err
}

func short(sha string) string {
	if len(sha) > 12 {
		return sha[:12]
	}
	return sha
}

// RunsCmd lists or shows runs.
type RunsCmd struct {
	List RunsListCmd `cmd:"" default:"withargs" help:"List runs, newest first."`
	Show RunsShowCmd `cmd:"" help:"Show one run."`
}

// runStates are the states --state accepts (docs/lifecycle.md).
var runStates = []string{"pending_approval", "queued", "running", "succeeded", "failed", "cancelled", "timed_out", "denied", "rejected", "expired", "superseded"}

// RunsListCmd lists runs.
type RunsListCmd struct {
	ClientFlags
	Job    string `help:"Only this job."`
	State  string `help:"Only runs in this state: pending_approval, queued, running, succeeded, failed, cancelled, timed_out, denied, rejected, expired or superseded." placeholder:"STATE"`
	Limit  int    `default:"20" help:"How many."`
	Cursor string `help:"Continue after this cursor."`
}

// Run lists runs.
func (c *RunsListCmd) Run(g *Globals) error {
	cl, err := c.client()
	if err != nil {
		return err
	}
	if c.State != "" && !slices.Contains(runStates, c.State) {
		return usageErrorf("--state %q is not a run state; one of: %s", c.State, strings.Join(runStates, ", "))
	}
	list, err := cl.ListRuns(g.Ctx, apiclient.ListRunsParams{Job: c.Job, State: c.State, Limit: c.Limit, Cursor: c.Cursor})
	if err != nil {
		return err
	}
	if c.JSON {
		return printJSON(g.Stdout, list)
	}
	tw := tabwriter.NewWriter(g.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tJOB\tCHANNEL\tSTATE\tACTOR\tCREATED")
	for _, r := range list.Runs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, r.Job, r.Channel, r.State, r.Actor, r.CreatedAt.Format(time.RFC3339))
	}
	tw.Flush()
	if list.NextCursor != "" {
		fmt.Fprintf(g.Stdout, "more: --cursor %s\n", list.NextCursor)
	}
	return nil
}

// RunsShowCmd shows a run.
type RunsShowCmd struct {
	ClientFlags
	ID string `arg:"" help:"Run ID."`
}

// Run shows a run.
func (c *RunsShowCmd) Run(g *Globals) error {
	cl, err := c.client()
	if err != nil {
		return err
	}
	r, err := cl.GetRun(g.Ctx, c.ID)
	if err != nil {
		return err
	}
	if c.JSON {
		return printJSON(g.Stdout, r)
	}
	w := g.Stdout
	fmt.Fprintf(w, "run       %s\nstate     %s\njob       %s\nchannel   %s (ref %s)\ncommit    %s\nactor     %s\n", r.ID, r.State, r.Job, r.Channel, r.Ref, r.Commit, r.Actor)
	if r.Reason != "" {
		fmt.Fprintf(w, "reason    %s\n", r.Reason)
	}
	fmt.Fprintf(w, "params    %s\ncreated   %s\n", r.Params, r.CreatedAt.Format(time.RFC3339))
	if r.FinishedAt != nil {
		fmt.Fprintf(w, "finished  %s (%s)\n", r.FinishedAt.Format(time.RFC3339), r.FinishedAt.Sub(r.CreatedAt).Round(time.Millisecond))
	}
	if r.CancelRequested {
		fmt.Fprintln(w, "cancel    requested")
	}
	if r.WaitingFor != "" {
		fmt.Fprintf(w, "waiting   %s\n", r.WaitingFor)
	}
	for _, a := range r.Approvals {
		fmt.Fprintf(w, "approval  %s %s at %s", a.Approver, a.Verdict, a.At.Format(time.RFC3339))
		if a.Comment != "" {
			fmt.Fprintf(w, ": %s", a.Comment)
		}
		fmt.Fprintln(w)
	}
	var d protocol.DecisionRecord
	if json.Unmarshal(r.Decision, &d) == nil && d.Request.Explanation != "" {
		fmt.Fprintf(w, "decision  %s\n", d.Request.Explanation)
		if d.Dispatch != nil {
			fmt.Fprintf(w, "dispatch  %s\n", d.Dispatch.Explanation)
		}
	}
	if len(r.Grants) > 0 && string(r.Grants) != "{}" {
		fmt.Fprintf(w, "grants    %s\n", r.Grants)
	}
	if len(r.Attempts) > 0 {
		fmt.Fprintln(w, "attempts")
		for _, a := range r.Attempts {
			fmt.Fprintf(w, "  #%d %s %s runner=%s", a.Number, a.ID, a.State, orDash(a.Runner))
			if a.ClaimedAt != nil {
				fmt.Fprintf(w, " claimed=%s", a.ClaimedAt.Format(time.RFC3339))
			}
			if a.EndedAt != nil {
				fmt.Fprintf(w, " ended=%s", a.EndedAt.Format(time.RFC3339))
			}
			if len(a.Result) > 0 && string(a.Result) != "null" {
				fmt.Fprintf(w, " result=%s", a.Result)
			}
			fmt.Fprintln(w)
		}
	}
	printTimeline(w, r.Timeline)
	return nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// LogsCmd prints a run's log.
type LogsCmd struct {
	ClientFlags
	ID     string `arg:"" help:"Run ID."`
	Follow bool   `short:"f" help:"Follow until the run ends."`
}

// Run prints the log.
func (c *LogsCmd) Run(g *Globals) error {
	cl, err := c.client()
	if err != nil {
		return err
	}
	if c.Follow {
		_, err := cl.FollowLogs(g.Ctx, c.ID, 0, func(l protocol.RunLogLine) error { return printLine(g.Stdout, l, c.JSON) })
		if err != nil && g.Ctx.Err() != nil {
			fmt.Fprintf(g.Stderr, "\ninterrupted: run %s goes on; stop it with: jobplane cancel %[1]s\n", c.ID)
			return &ExitError{Code: ExitInterrupted}
		}
		return err
	}
	var after int64
	for {
		page, err := cl.Logs(g.Ctx, c.ID, after)
		if err != nil {
			return err
		}
		for _, l := range page.Lines {
			if err := printLine(g.Stdout, l, c.JSON); err != nil {
				return err
			}
		}
		if len(page.Lines) == 0 {
			return nil
		}
		after = page.Next
	}
}

// CancelCmd cancels a run.
type CancelCmd struct {
	ClientFlags
	ID string `arg:"" help:"Run ID."`
}

// Run cancels.
func (c *CancelCmd) Run(g *Globals) error {
	cl, err := c.client()
	if err != nil {
		return err
	}
	r, err := cl.CancelRun(g.Ctx, c.ID)
	if err != nil {
		return err
	}
	if c.JSON {
		return printJSON(g.Stdout, r)
	}
	if r.State == "running" {
		fmt.Fprintf(g.Stdout, "run %s: cancel requested; its runner stops it at the next renew\n", r.ID)
	} else {
		fmt.Fprintf(g.Stdout, "run %s %s\n", r.ID, r.State)
	}
	return nil
}

// ApproveCmd approves a run waiting for approval.
type ApproveCmd struct {
	ClientFlags
	ID      string `arg:"" help:"Run ID."`
	Message string `short:"m" help:"Comment kept with the verdict."`
}

// Run approves.
func (c *ApproveCmd) Run(g *Globals) error { return verdict(g, &c.ClientFlags, c.ID, c.Message, true) }

// RejectCmd rejects a run waiting for approval.
type RejectCmd struct {
	ClientFlags
	ID      string `arg:"" help:"Run ID."`
	Message string `short:"m" help:"Comment kept with the verdict."`
}

// Run rejects.
func (c *RejectCmd) Run(g *Globals) error { return verdict(g, &c.ClientFlags, c.ID, c.Message, false) }

func verdict(g *Globals, f *ClientFlags, id, comment string, approve bool) error {
	cl, err := f.client()
	if err != nil {
		return err
	}
	do := cl.RejectRun
	if approve {
		do = cl.ApproveRun
	}
	r, err := do(g.Ctx, id, comment)
	if err != nil {
		return err
	}
	if f.JSON {
		return printJSON(g.Stdout, r)
	}
	fmt.Fprintf(g.Stdout, "run %s %s", r.ID, r.State)
	if r.WaitingFor != "" {
		fmt.Fprintf(g.Stdout, " (%s)", r.WaitingFor)
	}
	fmt.Fprintln(g.Stdout)
	return nil
}

// RunnersCmd manages runners.
type RunnersCmd struct {
	Token   RunnersTokenCmd   `cmd:"" help:"Registration tokens."`
	List    RunnersListCmd    `cmd:"" default:"withargs" help:"List runners."`
	Disable RunnersDisableCmd `cmd:"" help:"Disable a runner: its leases expire at once."`
	Enable  RunnersEnableCmd  `cmd:"" help:"Enable a runner."`
}

// RunnersTokenCmd groups registration token verbs.
type RunnersTokenCmd struct {
	Create RunnersTokenCreateCmd `cmd:"" help:"Create a single-use registration token."`
}

// RunnersTokenCreateCmd creates a registration token.
type RunnersTokenCreateCmd struct {
	ClientFlags
	Pool       string        `default:"default" help:"Pool the runner will serve."`
	Labels     []string      `help:"Labels the runner gets (comma-separated)." sep:","`
	SelfHosted bool          `name:"self-hosted" help:"A customer-run runner: gets only repository and commit, never source tickets."`
	TTL        time.Duration `default:"1h" help:"How long the token may be used."`
	// Installation and AllowedRepos: see docs/github.md.
	Installation int64    `help:"Register the runner in the tenant of this GitHub App installation (operator admins)." placeholder:"ID"`
	AllowedRepos []string `name:"allowed-repo" help:"Repositories (owner/name) the runner may build; repeatable. Default: all of its tenant's." sep:","`
}

// Run creates the token.
func (c *RunnersTokenCreateCmd) Run(g *Globals) error {
	cl, err := c.client()
	if err != nil {
		return err
	}
	req := protocol.RegistrationTokenRequest{Pool: c.Pool, Labels: c.Labels, SelfHosted: c.SelfHosted, AllowedRepos: c.AllowedRepos, TTLSeconds: int(c.TTL / time.Second)}
	var resp *protocol.TokenResponse
	if c.Installation != 0 {
		resp, err = cl.CreateInstallationRegistrationToken(g.Ctx, c.Installation, req)
	} else {
		resp, err = cl.CreateRegistrationToken(g.Ctx, req)
	}
	if err != nil {
		return err
	}
	if c.JSON {
		return printJSON(g.Stdout, resp)
	}
	fmt.Fprintln(g.Stdout, resp.Token)
	if resp.ExpiresAt != nil {
		fmt.Fprintf(g.Stderr, "single use, expires %s; start a worker with:\n  jobplane worker --server %s --registration-token %s\n", resp.ExpiresAt.Format(time.RFC3339), cl.BaseURL, resp.Token)
	}
	return nil
}

// RunnersListCmd lists runners.
type RunnersListCmd struct {
	ClientFlags
}

// Run lists.
func (c *RunnersListCmd) Run(g *Globals) error {
	cl, err := c.client()
	if err != nil {
		return err
	}
	list, err := cl.ListRunners(g.Ctx)
	if err != nil {
		return err
	}
	if c.JSON {
		return printJSON(g.Stdout, list)
	}
	now := clock.Real{}.Now()
	tw := tabwriter.NewWriter(g.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tPOOL\tLABELS\tEXECUTOR\tISOLATION\tSTATUS\tLAST SEEN\tATTEMPTS")
	for _, r := range list.Runners {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\n", r.ID, r.Name, r.Pool, strings.Join(r.Labels, ","), r.Executor, r.Capabilities,
			r.Status, ago(r.LastSeenAt, now), len(r.Attempts))
	}
	return tw.Flush()
}

// RunnersDisableCmd disables a runner.
type RunnersDisableCmd struct {
	ClientFlags
	ID string `arg:"" help:"Runner ID."`
}

// Run disables.
func (c *RunnersDisableCmd) Run(g *Globals) error {
	cl, err := c.client()
	if err != nil {
		return err
	}
	if err := cl.DisableRunner(g.Ctx, c.ID); err != nil {
		return err
	}
	fmt.Fprintf(g.Stdout, "runner %s disabled; its leased attempts expired\n", c.ID)
	return nil
}

// RunnersEnableCmd enables a runner.
type RunnersEnableCmd struct {
	ClientFlags
	ID string `arg:"" help:"Runner ID."`
}

// Run enables.
func (c *RunnersEnableCmd) Run(g *Globals) error {
	cl, err := c.client()
	if err != nil {
		return err
	}
	if err := cl.EnableRunner(g.Ctx, c.ID); err != nil {
		return err
	}
	fmt.Fprintf(g.Stdout, "runner %s enabled\n", c.ID)
	return nil
}

// PrincipalsCmd manages principals.
type PrincipalsCmd struct {
	Create PrincipalsCreateCmd `cmd:"" help:"Create a principal; its groups come from groups.yaml in Git."`
}

// PrincipalsCreateCmd creates a principal.
type PrincipalsCreateCmd struct {
	ClientFlags
	Name         string `arg:"" help:"Principal name (matches names in groups.yaml)."`
	Kind         string `default:"user" enum:"user,service" help:"user or service."`
	Installation int64  `help:"Create it in the tenant of this GitHub App installation (operator admins); it is never an admin there." placeholder:"ID"`
}

// Run creates the principal.
func (c *PrincipalsCreateCmd) Run(g *Globals) error {
	cl, err := c.client()
	if err != nil {
		return err
	}
	req := protocol.PrincipalRequest{Name: c.Name, Kind: c.Kind}
	var p *protocol.Principal
	if c.Installation != 0 {
		p, err = cl.CreateInstallationPrincipal(g.Ctx, c.Installation, req)
	} else {
		p, err = cl.CreatePrincipal(g.Ctx, req)
	}
	if err != nil {
		return err
	}
	if c.JSON {
		return printJSON(g.Stdout, p)
	}
	inst := ""
	if c.Installation != 0 {
		inst = fmt.Sprintf(" --installation %d", c.Installation)
	}
	fmt.Fprintf(g.Stdout, "principal %s (%s) created; give it a token with: jobplane tokens create%s --principal %s\n", p.Name, p.Kind, inst, p.Name)
	return nil
}

// TokensCmd manages API tokens.
type TokensCmd struct {
	Create TokensCreateCmd `cmd:"" help:"Create an API token for a principal (shown once)."`
	Revoke TokensRevokeCmd `cmd:"" help:"Revoke an API token."`
}

// TokensCreateCmd creates a token.
type TokensCreateCmd struct {
	ClientFlags
	Principal    string        `required:"" help:"Principal name."`
	TTL          time.Duration `help:"Lifetime (default: no expiry)."`
	Installation int64         `help:"The principal is in the tenant of this GitHub App installation (operator admins)." placeholder:"ID"`
}

// Run creates the token.
func (c *TokensCreateCmd) Run(g *Globals) error {
	cl, err := c.client()
	if err != nil {
		return err
	}
	req := protocol.PrincipalTokenRequest{TTLSeconds: int(c.TTL / time.Second)}
	var resp *protocol.TokenResponse
	if c.Installation != 0 {
		resp, err = cl.CreateInstallationPrincipalToken(g.Ctx, c.Installation, c.Principal, req)
	} else {
		resp, err = cl.CreatePrincipalToken(g.Ctx, c.Principal, req)
	}
	if err != nil {
		return err
	}
	if c.JSON {
		return printJSON(g.Stdout, resp)
	}
	fmt.Fprintln(g.Stdout, resp.Token)
	fmt.Fprintf(g.Stderr, "token %s for %s; it is shown only once\n", resp.ID, c.Principal)
	return nil
}

// TokensRevokeCmd revokes a token.
type TokensRevokeCmd struct {
	ClientFlags
	ID           string `arg:"" help:"Token ID."`
	Installation int64  `help:"The token belongs to the tenant of this GitHub App installation (operator admins)." placeholder:"ID"`
}

// Run revokes.
func (c *TokensRevokeCmd) Run(g *Globals) error {
	cl, err := c.client()
	if err != nil {
		return err
	}
	if c.Installation != 0 {
		err = cl.RevokeInstallationToken(g.Ctx, c.Installation, c.ID)
	} else {
		err = cl.RevokeToken(g.Ctx, c.ID)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(g.Stdout, "token %s revoked\n", c.ID)
	return nil
}

// SecretsCmd manages secrets.
type SecretsCmd struct {
	Set SecretsSetCmd `cmd:"" help:"Set a secret; the value is read from standard input."`
}

// SecretsSetCmd sets a secret from stdin.
type SecretsSetCmd struct {
	ClientFlags
	Name    string `arg:"" help:"Secret name, as connectors/*.yaml refer to it."`
	Channel string `help:"Only for this channel (default: every channel)."`
}

// Run reads the value from stdin and stores it. One trailing newline is
// dropped, so that "echo value | jobplane secrets set" stores "value".
func (c *SecretsSetCmd) Run(g *Globals) error {
	cl, err := c.client()
	if err != nil {
		return err
	}
	b, err := io.ReadAll(io.LimitReader(g.Stdin, 1<<20))
	if err != nil {
		return err
	}
	v := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	if v == "" {
		return errors.New("no value on standard input")
	}
	if err := cl.SetSecret(g.Ctx, c.Name, c.Channel, v); err != nil {
		return err
	}
	scope := "every channel"
	if c.Channel != "" {
		scope = "channel " + c.Channel
	}
	fmt.Fprintf(g.Stdout, "secret %s set for %s\n", c.Name, scope)
	return nil
}

// AdminCmd groups administrative verbs.
type AdminCmd struct {
	RotateKeys AdminRotateKeysCmd `cmd:"" name:"rotate-keys" help:"Rotate the run-token signing key; old keys stay published until their tokens expire."`
	Prune      AdminPruneCmd      `cmd:"" help:"Delete the logs and artifacts of ended runs past their retention now (--dry-run: list them)."`
}

// AdminRotateKeysCmd rotates the signing key.
type AdminRotateKeysCmd struct {
	ClientFlags
}

// Run rotates.
func (c *AdminRotateKeysCmd) Run(g *Globals) error {
	cl, err := c.client()
	if err != nil {
		return err
	}
	kid, err := cl.RotateSigningKeys(g.Ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(g.Stdout, "new signing key %s\n", kid)
	return nil
}

package cli

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/jobplane/jobplane/internal/protocol"
)

// CatalogsCmd shows and syncs the channels' catalogs.
type CatalogsCmd struct {
	List CatalogsListCmd `cmd:"" default:"withargs" help:"Show each channel's active commit and its rejected commits with their errors."`
	Sync CatalogsSyncCmd `cmd:"" help:"Fetch the definitions repository now and record what changed (admin)."`
}

// CatalogsListCmd shows the catalogs.
type CatalogsListCmd struct {
	ClientFlags
}

// Run prints the catalogs.
func (c *CatalogsListCmd) Run(g *Globals) error {
	cl, err := c.client()
	if err != nil {
		return err
	}
	v, err := cl.Catalogs(g.Ctx)
	if err != nil {
		return err
	}
	if c.JSON {
		return printJSON(g.Stdout, v)
	}
	printCatalogs(g.Stdout, v)
	return nil
}

// CatalogsSyncCmd syncs now.
type CatalogsSyncCmd struct {
	ClientFlags
}

// Run syncs and prints the catalogs.
func (c *CatalogsSyncCmd) Run(g *Globals) error {
	cl, err := c.client()
	if err != nil {
		return err
	}
	v, err := cl.SyncCatalogs(g.Ctx)
	if err != nil {
		return err
	}
	if c.JSON {
		return printJSON(g.Stdout, v)
	}
	printCatalogs(g.Stdout, v)
	return nil
}

func printCatalogs(w io.Writer, v *protocol.CatalogsView) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CHANNEL\tBRANCH\tACTIVE\tACTIVATED\tLAST REJECTED")
	for _, ch := range v.Channels {
		active, at, rej := "-", "-", "-"
		if ch.ActiveCommit != "" {
			active = short(ch.ActiveCommit)
		}
		if ch.ActivatedAt != nil {
			at = ch.ActivatedAt.Format("2006-01-02 15:04:05Z")
		}
		if len(ch.Rejected) > 0 {
			rej = fmt.Sprintf("%s (%d errors)", short(ch.Rejected[0].Commit), len(ch.Rejected[0].Errors))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", ch.Channel, ch.Branch, active, at, rej)
	}
	_ = tw.Flush()
	for _, ch := range v.Channels {
		if ch.Error != "" {
			fmt.Fprintf(w, "\n%s (%s): %s\n", ch.Channel, ch.Branch, ch.Error)
		}
		if len(ch.Rejected) == 0 {
			continue
		}
		r := ch.Rejected[0]
		fmt.Fprintf(w, "\n%s (%s): commit %s by %s rejected at %s:\n", ch.Channel, ch.Branch, short(r.Commit), r.Author, r.At.Format("2006-01-02 15:04:05Z"))
		for _, e := range r.Errors {
			fmt.Fprintf(w, "  %s:%d:%d: %s\n", e.File, e.Line, e.Column, e.Message)
		}
	}
}

// JobsCmd lists or shows the jobs of a channel.
type JobsCmd struct {
	List JobsListCmd `cmd:"" default:"withargs" help:"List the jobs of a channel's active commit."`
	Show JobsShowCmd `cmd:"" help:"Show a job: definition, owners, runbook and who may run it."`
}

// JobsListCmd lists jobs.
type JobsListCmd struct {
	ClientFlags
	Channel string `help:"Channel (default: the server's only channel)."`
	Ref     string `help:"Branch, for pattern channels."`
}

// Run lists the jobs.
func (c *JobsListCmd) Run(g *Globals) error {
	cl, err := c.client()
	if err != nil {
		return err
	}
	v, err := cl.Jobs(g.Ctx, c.Channel, c.Ref)
	if err != nil {
		return err
	}
	if c.JSON {
		return printJSON(g.Stdout, v)
	}
	fmt.Fprintf(g.Stdout, "channel %s (%s) at %s\n", v.Channel, v.Branch, short(v.Commit))
	tw := tabwriter.NewWriter(g.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tOWNERS\tDESCRIPTION")
	for _, j := range v.Jobs {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", j.Name, strings.Join(j.Owners, ","), j.Description)
	}
	return tw.Flush()
}

// JobsShowCmd shows a job.
type JobsShowCmd struct {
	ClientFlags
	Name    string `arg:"" help:"Job name."`
	Channel string `help:"Channel (default: the server's only channel)."`
	Ref     string `help:"Branch, for pattern channels."`
}

// Run shows the job.
func (c *JobsShowCmd) Run(g *Globals) error {
	cl, err := c.client()
	if err != nil {
		return err
	}
	v, err := cl.Job(g.Ctx, c.Name, c.Channel, c.Ref)
	if err != nil {
		return err
	}
	if c.JSON {
		return printJSON(g.Stdout, v)
	}
	w := g.Stdout
	fmt.Fprintf(w, "job %s (%s), channel %s (%s) at %s\n", v.Name, v.File, v.Channel, v.Branch, short(v.Commit))
	if v.Description != "" {
		fmt.Fprintf(w, "  %s\n", v.Description)
	}
	fmt.Fprintf(w, "owners: %s\n", strings.Join(v.Owners, ", "))
	fmt.Fprintln(w, "may run (with default parameters):")
	if len(v.MayRun) == 0 {
		fmt.Fprintln(w, "  nobody the definitions name")
	}
	for _, p := range v.MayRun {
		name := p.Principal
		if name == "*" {
			name = "any other authenticated principal"
		}
		fmt.Fprintf(w, "  %s (rule %s)", name, p.Rule)
		if p.Approval != nil {
			fmt.Fprintf(w, ": needs %d approval(s) from %s", p.Approval.Count, strings.Join(p.Approval.Groups, ", "))
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w, "definition:")
	if def, ok := humanDefinition(v.Definition, "  "); ok {
		fmt.Fprintf(w, "  %s\n", def)
	}
	if v.RunbookText != "" {
		fmt.Fprintf(w, "runbook (%s):\n\n%s", v.Runbook, v.RunbookText)
	}
	return nil
}

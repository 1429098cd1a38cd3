package cli

import (
	"fmt"
	"text/tabwriter"
	"time"
)

// AdminPruneCmd runs a retention sweep now, or lists what one would delete.
type AdminPruneCmd struct {
	ClientFlags
	DryRun bool `name:"dry-run" help:"List what a sweep would delete now, of your tenant, without deleting anything."`
	Limit  int  `default:"100" help:"With --dry-run: list at most this many (up to 1000)."`
}

// Run prunes or lists.
func (c *AdminPruneCmd) Run(g *Globals) error {
	cl, err := c.client()
	if err != nil {
		return err
	}
	if c.DryRun {
		plan, err := cl.PrunePlan(g.Ctx, c.Limit)
		if err != nil {
			return err
		}
		if c.JSON {
			return printJSON(g.Stdout, plan)
		}
		if len(plan.Items) == 0 {
			fmt.Fprintln(g.Stdout, "nothing is due for deletion")
			return nil
		}
		tw := tabwriter.NewWriter(g.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "DUE\tWHAT\tRUN\tJOB")
		for _, it := range plan.Items {
			what := it.Kind
			if it.Kind == "logs_move" {
				what = "logs move to the object store"
			}
			if it.Artifact != nil {
				what = fmt.Sprintf("artifact row %s (%s, %s)", it.Artifact.Name, it.Artifact.State, it.Artifact.ID)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", it.DueAt.Format(time.RFC3339), what, it.RunID, it.Job)
		}
		return tw.Flush()
	}
	rep, err := cl.Prune(g.Ctx)
	if err != nil {
		return err
	}
	if c.JSON {
		return printJSON(g.Stdout, rep)
	}
	if rep.Skipped {
		fmt.Fprintln(g.Stdout, "another replica is sweeping now; nothing done here")
		return nil
	}
	fmt.Fprintf(g.Stdout, "deleted the logs of %d run(s) (%d lines), the artifacts of %d run(s) (%d artifacts), %d abandoned artifact row(s), %d expired source ticket(s)\n",
		rep.LogRuns, rep.LogLines, rep.ArtifactRuns, rep.Artifacts, rep.Capabilities, rep.Tickets)
	return nil
}

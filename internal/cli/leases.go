package cli

import (
	"encoding/json"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/jobplane/jobplane/internal/protocol"
)

// LeasesCmd shows and releases run leases.
type LeasesCmd struct {
	List    LeasesListCmd    `cmd:"" default:"withargs" help:"List held lease keys."`
	Show    LeasesShowCmd    `cmd:"" help:"Show a key: holders, fencing tokens, waiting runs."`
	Release LeasesReleaseCmd `cmd:"" help:"Break-glass: force-release a key (admin); its holders are told to stop."`
}

// LeasesListCmd lists held keys.
type LeasesListCmd struct {
	ClientFlags
	Prefix string `help:"Only keys starting with this."`
}

// Run lists.
func (c *LeasesListCmd) Run(g *Globals) error {
	cl, err := c.client()
	if err != nil {
		return err
	}
	raw, err := cl.Leases(g.Ctx, c.Prefix)
	if err != nil {
		return err
	}
	if c.JSON {
		_, err := fmt.Fprintln(g.Stdout, string(raw))
		return err
	}
	var out protocol.LeaseList
	if err := json.Unmarshal(raw, &out); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(g.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tSLOT\tRUN\tRUNNER\tFENCING\tEXPIRES")
	for _, h := range out.Leases {
		exp := "-"
		if h.ExpiresAt != nil {
			exp = h.ExpiresAt.Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%d\t%s\n", h.Key, h.Slot, h.RunID, h.Runner, h.FencingToken, exp)
	}
	return tw.Flush()
}

// LeasesShowCmd shows a key.
type LeasesShowCmd struct {
	ClientFlags
	Key string `arg:"" help:"Lease key."`
}

// Run shows.
func (c *LeasesShowCmd) Run(g *Globals) error {
	cl, err := c.client()
	if err != nil {
		return err
	}
	raw, err := cl.Lease(g.Ctx, c.Key)
	if err != nil {
		return err
	}
	return printLease(g, raw, c.JSON)
}

func printLease(g *Globals, raw json.RawMessage, asJSON bool) error {
	if asJSON {
		_, err := fmt.Fprintln(g.Stdout, string(raw))
		return err
	}
	var v protocol.LeaseView
	if err := json.Unmarshal(raw, &v); err != nil {
		return err
	}
	w := g.Stdout
	fmt.Fprintf(w, "key             %s\nlast fencing    %d\n", v.Key, v.LastFencingToken)
	if v.ConsumedByRun != "" {
		fmt.Fprintf(w, "consumed by     %s (once)\n", v.ConsumedByRun)
	}
	if len(v.Holders) == 0 {
		fmt.Fprintln(w, "holders         none")
	}
	for _, h := range v.Holders {
		fmt.Fprintf(w, "holder          slot %d: run %s attempt %s runner %s fencing %d", h.Slot, h.RunID, h.AttemptID, h.Runner, h.FencingToken)
		if h.ExpiresAt != nil {
			fmt.Fprintf(w, " expires %s", h.ExpiresAt.Format(time.RFC3339))
		}
		fmt.Fprintln(w)
	}
	for _, q := range v.Waiting {
		fmt.Fprintf(w, "waiting         run %s since %s\n", q.RunID, q.Since.Format(time.RFC3339))
	}
	return nil
}

// LeasesReleaseCmd force-releases a key.
type LeasesReleaseCmd struct {
	ClientFlags
	Key    string `arg:"" help:"Lease key."`
	Reason string `required:"" help:"Why (kept in the audit)."`
}

// Run releases.
func (c *LeasesReleaseCmd) Run(g *Globals) error {
	cl, err := c.client()
	if err != nil {
		return err
	}
	raw, err := cl.ReleaseLease(g.Ctx, c.Key, c.Reason)
	if err != nil {
		return err
	}
	fmt.Fprintf(g.Stderr, "released %s; its holders stop at their next renewal and their fencing tokens are no longer current\n", c.Key)
	return printLease(g, raw, c.JSON)
}

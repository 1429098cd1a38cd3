package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jobplane/jobplane/internal/apiclient"
	"github.com/jobplane/jobplane/internal/audit"
	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/protocol"
)

// AuditCmd reads and verifies the audit log.
type AuditCmd struct {
	List   AuditListCmd   `cmd:"" default:"withargs" help:"Print audit events, oldest first (--json: JSON lines, one event per line, for export)."`
	Verify AuditVerifyCmd `cmd:"" help:"Recompute the audit hash chain and name the first broken event."`
}

// AuditListCmd prints events.
type AuditListCmd struct {
	ClientFlags
	RunID string `name:"run" help:"Only events about this run." placeholder:"ID"`
	Actor string `help:"Only events by this actor (a principal, runner:ID or system:...)." placeholder:"A"`
	Since string `help:"Only events at or after this time: RFC 3339 (2026-08-14T00:00:00Z), a date (2026-08-14) or a duration ago (24h)." placeholder:"T"`
	After int64  `help:"Only events after this sequence number." placeholder:"SEQ"`
	Limit int    `help:"Stop after this many events (0: all)."`
}

// parseSince reads --since: a time, a date, or a duration before now.
func parseSince(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("--since %q: want an RFC 3339 time (2026-08-14T00:00:00Z), a date (2026-08-14) or a duration (24h)", s)
}

// Run pages through the events and prints them.
func (c *AuditListCmd) Run(g *Globals) error {
	cl, err := c.client()
	if err != nil {
		return err
	}
	since, err := parseSince(c.Since, clock.Real{}.Now())
	if err != nil {
		return err
	}
	var tw *tabwriter.Writer
	enc := json.NewEncoder(g.Stdout)
	enc.SetEscapeHTML(false)
	if !c.JSON {
		tw = tabwriter.NewWriter(g.Stdout, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "SEQ\tAT\tACTOR\tACTION\tSUBJECT\tSEALED\tDETAILS")
	}
	n := 0
	q := apiclient.AuditQuery{After: c.After, Limit: 1000, RunID: c.RunID, Actor: c.Actor, Since: since}
	for {
		page, err := cl.AuditQuery(g.Ctx, q)
		if err != nil {
			return err
		}
		for _, e := range page.Events {
			if c.Limit > 0 && n >= c.Limit {
				break
			}
			n++
			e.Details = unescapeHTML(e.Details)
			if c.JSON {
				if err := enc.Encode(e); err != nil {
					return err
				}
				continue
			}
			sealed := "-"
			if e.Hash != "" {
				sealed = e.Hash[:12]
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", e.Seq, e.At.Format(time.RFC3339), e.Actor, e.Action, e.Subject, sealed, compactJSON(e.Details))
		}
		if len(page.Events) == 0 || (c.Limit > 0 && n >= c.Limit) {
			break
		}
		q.After = page.Next
	}
	if tw != nil {
		return tw.Flush()
	}
	return nil
}

func compactJSON(b json.RawMessage) string {
	if len(b) == 0 || string(b) == "null" {
		return ""
	}
	s := string(b)
	if len(s) > 120 {
		s = s[:117] + "..."
	}
	return strings.ReplaceAll(s, "\n", " ")
}

// AuditVerifyCmd verifies the chain.
type AuditVerifyCmd struct {
	ClientFlags
	Checkpoint     string `help:"A head printed by an earlier verify (SEQ:HASH), kept outside the database: the chain must still contain it." placeholder:"SEQ:HASH"`
	CheckpointFile string `name:"checkpoint-file" help:"A file of checkpoints kept outside the database, one SEQ:HASH per line: verify against its last line, then append the new head if the chain is sound." placeholder:"PATH"`
}

// Run verifies and prints the head to keep as the next checkpoint; a broken
// chain exits 1.
func (c *AuditVerifyCmd) Run(g *Globals) error {
	if c.Checkpoint != "" && c.CheckpointFile != "" {
		return errors.New("give --checkpoint or --checkpoint-file, not both")
	}
	cp := c.Checkpoint
	if c.CheckpointFile != "" {
		last, err := lastCheckpoint(c.CheckpointFile)
		if err != nil {
			return err
		}
		cp = last
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	rep, err := cl.AuditVerify(g.Ctx, cp)
	if err != nil {
		return err
	}
	if rep.OK && c.CheckpointFile != "" && rep.Head.Seq > 0 {
		if err := appendCheckpoint(c.CheckpointFile, fmt.Sprintf("%d:%s", rep.Head.Seq, rep.Head.Hash)); err != nil {
			return err
		}
	}
	if c.JSON {
		if err := printJSON(g.Stdout, rep); err != nil {
			return err
		}
	} else {
		printVerify(g.Stdout, rep)
	}
	if !rep.OK {
		return &ExitError{Code: 1}
	}
	return nil
}

func printVerify(w io.Writer, rep *protocol.AuditVerify) {
	if rep.OK {
		fmt.Fprintf(w, "audit chain ok: %d events sealed, %d waiting for the sealer\n", rep.Sealed, rep.Unsealed)
		if rep.Checkpoint != nil {
			fmt.Fprintf(w, "checkpoint %d:%s found in the chain\n", rep.Checkpoint.Seq, rep.Checkpoint.Hash)
		}
		fmt.Fprintf(w, "checkpoint: %d:%s\n", rep.Head.Seq, rep.Head.Hash)
		return
	}
	fmt.Fprintf(w, "audit chain BROKEN at event %d: %s\n", rep.Broken.Seq, rep.Broken.Reason)
	fmt.Fprintf(w, "the %d events before it verify; last good link %d:%s\n", rep.Sealed, rep.Head.Seq, rep.Head.Hash)
}

// printTimeline prints a run's history: time, state after, action, actor.
func printTimeline(w io.Writer, tl []protocol.TimelineEntry) {
	if len(tl) == 0 {
		return
	}
	fmt.Fprintln(w, "timeline")
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	for _, e := range tl {
		line := fmt.Sprintf("  %s\t%s\t%s\tby %s", e.At.Format("2006-01-02T15:04:05.000Z07:00"), orDash(e.State), e.Action, e.Actor)
		if e.Attempt != "" {
			line += "\t" + e.Attempt
		}
		if e.Reason != "" {
			line += "\t(" + e.Reason + ")"
		}
		fmt.Fprintln(tw, line)
	}
	_ = tw.Flush()
}

// lastCheckpoint reads the last non-empty line of a checkpoint file; a
// missing or empty file means no checkpoint yet (the first run).
func lastCheckpoint(path string) (string, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("--checkpoint-file: %w", err)
	}
	lines := strings.Fields(string(b))
	if len(lines) == 0 {
		return "", nil
	}
	last := lines[len(lines)-1]
	if _, err := audit.ParseCheckpoint(last); err != nil {
		return "", fmt.Errorf("--checkpoint-file %s, last line: %w", path, err)
	}
	return last, nil
}

func appendCheckpoint(path, cp string) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("--checkpoint-file: %w", err)
	}
	if _, err := fmt.Fprintln(f, cp); err != nil {
		_ = f.Close()
		return fmt.Errorf("--checkpoint-file: %w", err)
	}
	return f.Close()
}

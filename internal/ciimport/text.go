package ciimport

import (
	"cmp"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// TriggerText is a trigger in one short phrase: push(main),
// schedule(0 3 * * *), workflow_dispatch(target, dry_run).
func TriggerText(t Trigger) string {
	var detail []string
	switch {
	case t.Cron != "":
		detail = append(detail, t.Cron)
		if t.Timezone != "" {
			detail = append(detail, t.Timezone)
		}
	case len(t.Inputs) > 0:
		detail = append(detail, paramNames(t.Inputs))
	case len(t.Branches) > 0:
		detail = append(detail, strings.Join(t.Branches, ","))
	case len(t.Types) > 0:
		detail = append(detail, strings.Join(t.Types, ","))
	}
	if len(detail) == 0 {
		return t.Event
	}
	return t.Event + "(" + strings.Join(detail, " ") + ")"
}

func triggersText(ts []Trigger) string {
	var out []string
	for _, t := range ts {
		out = append(out, TriggerText(t))
	}
	return cmp.Or(strings.Join(out, " "), "-")
}

func orDash(s string) string { return cmp.Or(s, "-") }

func listOrDash(ss []string) string { return orDash(strings.Join(ss, ",")) }

// WriteInventory prints the inventory as a table, then each job's steps.
func WriteInventory(w io.Writer, inv *Inventory) {
	fmt.Fprintf(w, "Inventory (%s): %d jobs in %d files\n\n", inv.Kind, len(inv.Jobs), len(inv.Files))
	if len(inv.Jobs) > 0 {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "JOB\tTRIGGERS\tENVIRONMENT\tSECRETS\tVARIABLES\tCONCURRENCY\tRUNS-ON\tSTEPS")
		for _, j := range inv.Jobs {
			conc := "-"
			if j.Concurrency != nil {
				conc = j.Concurrency.Group
			}
			runs, uses := 0, 0
			for _, s := range j.Steps {
				if s.Kind == StepRun {
					runs++
				} else {
					uses++
				}
			}
			runsOn := listOrDash(j.RunsOn)
			if j.Image != "" {
				runsOn = strings.TrimPrefix(runsOn+" image:"+j.Image, "- ")
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d run, %d uses\n", j.Key, triggersText(j.Triggers), orDash(j.Environment),
				listOrDash(j.Secrets), listOrDash(j.Variables), conc, runsOn, runs, uses)
		}
		tw.Flush()
	}
	for _, j := range inv.Jobs {
		fmt.Fprintf(w, "\n%s (%s:%d)\n", j.Key, j.File, j.Line)
		if j.Calls != "" {
			fmt.Fprintf(w, "  calls %s\n", j.Calls)
		}
		if len(j.CalledBy) > 0 {
			fmt.Fprintf(w, "  called by %s\n", strings.Join(j.CalledBy, ", "))
		}
		if len(j.Matrix) > 0 {
			fmt.Fprintf(w, "  matrix: %s\n", strings.Join(j.Matrix, "; "))
		}
		for _, s := range j.Steps {
			from := ""
			if s.From != "" {
				from = " [from " + s.From + "]"
			}
			if s.Kind == StepUses {
				fmt.Fprintf(w, "  uses %s%s\n", s.Uses, from)
				continue
			}
			lines := strings.Split(strings.TrimSpace(s.Run), "\n")
			more := ""
			if len(lines) > 1 {
				more = fmt.Sprintf(" (+%d lines)", len(lines)-1)
			}
			fmt.Fprintf(w, "  run  %s%s%s\n", oneLine(truncate(lines[0], 72)), more, from)
		}
	}
	writeErrors(w, inv.Errors)
	if len(inv.Warnings) > 0 {
		fmt.Fprintf(w, "\nNot followed (the inventory misses what they hold):\n")
		for _, e := range inv.Warnings {
			fmt.Fprintf(w, "  %s\n", e.Error())
		}
	}
}

func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

func writeErrors(w io.Writer, errs []Error) {
	if len(errs) == 0 {
		return
	}
	fmt.Fprintf(w, "\n%s in the input (the inventory above is partial):\n", plural(len(errs), "problem"))
	for _, e := range errs {
		fmt.Fprintf(w, "  %s\n", e.Error())
	}
}

// WriteClassification prints each job's class, confidence and deciding
// evidence.
func WriteClassification(w io.Writer, inv *Inventory) {
	counts := map[string]int{}
	for _, j := range inv.Jobs {
		if j.Class != nil {
			counts[j.Class.Class]++
		}
	}
	fmt.Fprintf(w, "Classification: %d build/test (stay in CI), %d operational, %d data movement\n\n",
		counts[ClassBuildTest], counts[ClassOperational], counts[ClassDataMovement])
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tCLASS\tCONFIDENCE\tMOVES\tEVIDENCE")
	for _, j := range inv.Jobs {
		if j.Class == nil {
			continue
		}
		moves := "no"
		if j.Moves() {
			moves = "yes"
		} else if j.Class.Class != ClassBuildTest {
			moves = "with callers"
		}
		ev := evidenceText(j.Class)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", j.Key, j.Class.Class, j.Class.Confidence, moves, ev)
	}
	tw.Flush()
}

// evidenceText is the evidence for the chosen class, strongest first, in
// one line; an override names its file and reason.
func evidenceText(c *Classification) string {
	if c.Override != "" {
		return "set by " + c.Override + ": " + cmp.Or(c.Reason, "no reason given")
	}
	var facts []string
	for _, e := range c.Evidence {
		if e.Class == c.Class {
			facts = append(facts, e.Fact)
		}
	}
	return strings.Join(facts, "; ")
}

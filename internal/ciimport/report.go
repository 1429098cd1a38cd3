package ciimport

import (
	"fmt"
	"strings"
)

// Report is the migration report in Markdown: per job what moved and what is
// left, then the long-lived secrets still in use.
func Report(inv *Inventory, p *Plan) string {
	var b strings.Builder
	moves := map[string]*Move{}
	for _, m := range p.Moves {
		moves[m.Job.Key] = m
	}
	counts := map[string]int{}
	for _, j := range inv.Jobs {
		if j.Class != nil {
			counts[j.Class.Class]++
		}
	}
	b.WriteString("# Migration report\n\n")
	fmt.Fprintf(&b, "Imported from %s: %d jobs in %d files. %d build/test jobs stay in CI; %d operational and %d data-movement jobs were found, and %d were written as jobplane jobs.\n\n",
		inv.Kind, len(inv.Jobs), len(inv.Files), counts[ClassBuildTest], counts[ClassOperational], counts[ClassDataMovement], len(p.Moves))
	b.WriteString("Regenerate with the same command after the CI changes; keep decisions in the `--classify` file so they survive. Every generated file marks what needs a person with `REVIEW` or `TODO(import)`.\n\n")

	b.WriteString("## Jobs\n\n")
	b.WriteString("| CI job | class | confidence | becomes |\n| --- | --- | --- | --- |\n")
	for _, j := range inv.Jobs {
		if j.Class == nil {
			continue
		}
		becomes := "stays in CI"
		switch {
		case moves[j.Key] != nil:
			becomes = "`jobs/" + moves[j.Key].Name + ".yaml`"
		case j.Class.Class != ClassBuildTest && len(j.CalledBy) > 0:
			becomes = "moves with its callers (" + strings.Join(j.CalledBy, ", ") + ")"
		case j.Class.Class != ClassBuildTest:
			becomes = "a reusable workflow's job: moves with the jobs that call it"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", code(j.Key), j.Class.Class, j.Class.Confidence, becomes)
	}
	for _, j := range inv.Jobs {
		m := moves[j.Key]
		if m == nil {
			continue
		}
		fmt.Fprintf(&b, "\n### %s (`%s`)\n\n", m.Name, code(j.Key))
		fmt.Fprintf(&b, "%s, %s confidence: %s.\n\n", j.Class.Class, j.Class.Confidence, md(evidenceText(j.Class)))
		chans := make([]string, len(m.Channels))
		for i, c := range m.Channels {
			chans[i] = channelText(c)
		}
		fmt.Fprintf(&b, "Runs in %s.\n\n", strings.Join(chans, ", "))
		b.WriteString("Moved:\n\n")
		verb := "become"
		if len(j.Steps) == 1 {
			verb = "becomes"
		}
		fmt.Fprintf(&b, "- %s %s the script of `run.command`\n", plural(len(j.Steps), "step"), verb)
		for _, s := range m.Moved {
			fmt.Fprintf(&b, "- %s\n", md(s))
		}
		b.WriteString("\nLeft to do:\n\n")
		for _, s := range m.Left {
			fmt.Fprintf(&b, "- %s\n", md(s))
		}
		b.WriteString("- write the runbook's impact, rollback and expected runtime\n")
		b.WriteString("- once jobplane runs it, delete the CI job\n")
	}

	b.WriteString("\n## Long-lived secrets still in use\n\n")
	if len(p.Secrets) == 0 {
		b.WriteString("None: no job reads a secret that outlives a run.\n")
	} else {
		fmt.Fprintf(&b, "%d CI secrets outlive the runs that read them. The migration is done when this list is empty: move each reader, replace the secret with a connector whose value jobplane releases per run, then delete it from the CI.\n\n", len(p.Secrets))
		b.WriteString("| secret | read by | connector |\n| --- | --- | --- |\n")
		for _, s := range p.Secrets {
			var readers []string
			for _, r := range s.Jobs {
				state := "stays in CI"
				if r.Moves {
					state = "moved"
				}
				readers = append(readers, fmt.Sprintf("`%s` (%s)", code(r.Key), state))
			}
			conn := "-"
			if s.Connector != "" {
				conn = "`connectors/" + s.Connector + ".yaml`"
			}
			fmt.Fprintf(&b, "| `%s` | %s | %s |\n", code(s.Name), strings.Join(readers, ", "), conn)
		}
	}

	if len(p.Moves) > 0 {
		b.WriteString("\n## Before the first run\n\n")
		if len(p.Channels) > 0 {
			var cs []string
			for _, c := range p.Channels {
				cs = append(cs, "`"+c.Name+"`")
			}
			fmt.Fprintf(&b, "- start the server with a `--channel` for each channel the policies name: %s\n", strings.Join(cs, ", "))
		}
		if p.Placeholders {
			b.WriteString("- name the operators and approvers: `groups.yaml` has example members (set them under `groups:` in the `--classify` file and import again, so the policy tests follow)\n")
		}
		b.WriteString("- set each connector's secrets with `jobplane secrets set NAME`\n")
		b.WriteString("- run `jobplane validate` in this directory\n")
	}

	if len(inv.Errors) > 0 {
		fmt.Fprintf(&b, "\n## Problems in the input\n\n%s; what could not be read is missing above.\n\n", plural(len(inv.Errors), "problem"))
		for _, e := range inv.Errors {
			fmt.Fprintf(&b, "- `%s`\n", code(e.Error()))
		}
	}
	if len(inv.Warnings) > 0 {
		b.WriteString("\n## Not followed\n\n")
		for _, e := range inv.Warnings {
			fmt.Fprintf(&b, "- `%s`\n", code(e.Error()))
		}
	}
	return b.String()
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

func channelText(c Channel) string {
	s := "channel `" + c.Name + "`"
	if c.Environment != "" {
		s += " (environment " + c.Environment + ")"
	}
	if c.Approval > 0 {
		s += fmt.Sprintf(", with %d approval from approvers", c.Approval)
	}
	return s
}

// md keeps a CI string from breaking the Markdown around it: lines and
// table cells.
func md(s string) string {
	return strings.ReplaceAll(oneLine(s), "|", `\|`)
}

// code is md for the inside of a code span.
func code(s string) string {
	return strings.ReplaceAll(md(s), "`", "'")
}

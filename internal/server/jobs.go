package server

import (
	"encoding/json"
	"regexp"
	"slices"
	"strings"

	"github.com/jobplane/jobplane/internal/catalog"
	"github.com/jobplane/jobplane/internal/protocol"
)

// Jobs lists the catalog's jobs for the jobs API.
func (p *pinned) Jobs() []protocol.JobInfo {
	var out []protocol.JobInfo
	for _, j := range p.snap.Catalog.Jobs() {
		out = append(out, jobInfo(j))
	}
	return out
}

// Describe returns a job with its runbook, read from the pinned commit and
// rendered as plain text (a runbook that cannot be read says so instead).
func (p *pinned) Describe(name string) (protocol.JobInfo, bool) {
	j, ok := p.snap.Catalog.Job(name)
	if !ok {
		return protocol.JobInfo{}, false
	}
	info := jobInfo(j)
	if j.Runbook != "" {
		data, err := p.src.ReadFile(p.snap.Commit, j.Runbook)
		if err != nil {
			info.RunbookText = "(runbook " + j.Runbook + " cannot be read: " + err.Error() + ")"
		} else {
			info.RunbookText = PlainText(string(data))
			info.RunbookMarkdown = string(data)
		}
	}
	return info, true
}

// Principals lists every name the definitions give a principal: members of
// every group and users of rules, plus "*" standing for any other
// authenticated principal (it matches `users: ["*"]` rules and no group).
func (p *pinned) Principals() []string {
	c := p.snap.Catalog
	out := []string{"*"}
	for _, g := range c.Groups() {
		out = append(out, g.Members...)
	}
	for _, r := range c.Rules() {
		for _, u := range r.Users {
			if u != "*" {
				out = append(out, u)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func jobInfo(j *catalog.Job) protocol.JobInfo {
	def, _ := json.Marshal(j)
	owners := j.Owners
	if owners == nil {
		owners = []string{}
	}
	return protocol.JobInfo{Name: j.Name, File: j.File, Description: j.Description, Owners: owners, Runbook: j.Runbook, Definition: def}
}

var (
	mdLink     = regexp.MustCompile(`!?\[([^\]]*)\]\(([^)\s]*)[^)]*\)`)
	mdEmphasis = regexp.MustCompile("(\\*\\*|__|\\*|`)")
	mdHeading  = regexp.MustCompile(`^#{1,6}\s+`)
)

// PlainText renders Markdown as plain text for a terminal: headings lose
// their marks and are underlined, links become "text (url)", emphasis and
// code marks go, code fences are dropped but their lines kept.
func PlainText(md string) string {
	var b strings.Builder
	for _, line := range strings.Split(strings.ReplaceAll(md, "\r\n", "\n"), "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			continue
		}
		if mdHeading.MatchString(trimmed) {
			h := mdEmphasis.ReplaceAllString(mdHeading.ReplaceAllString(trimmed, ""), "")
			b.WriteString(h + "\n" + strings.Repeat("=", len([]rune(h))) + "\n")
			continue
		}
		line = mdLink.ReplaceAllStringFunc(line, func(m string) string {
			sub := mdLink.FindStringSubmatch(m)
			if sub[2] == "" || sub[1] == sub[2] {
				return sub[1]
			}
			return sub[1] + " (" + sub[2] + ")"
		})
		line = mdEmphasis.ReplaceAllString(line, "")
		b.WriteString(strings.TrimRight(line, " \t") + "\n")
	}
	return strings.TrimRight(b.String(), "\n") + "\n"
}

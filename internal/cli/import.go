package cli

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/jobplane/jobplane/internal/catalog"
	"github.com/jobplane/jobplane/internal/ciimport"
	"github.com/jobplane/jobplane/internal/review"
)

// ImportCmd inventories a team's CI jobs, classifies them and writes the
// definitions of those that should move to jobplane.
type ImportCmd struct {
	GitHubActions ImportGitHubCmd `cmd:"" name:"github-actions" help:"Import GitHub Actions workflows: a repository checkout, a .github/workflows directory or workflow files."`
	GitLabCI      ImportGitLabCmd `cmd:"" name:"gitlab-ci" help:"Import a GitLab CI pipeline: a .gitlab-ci.yml (with its local includes) or the directory holding it."`
}

// importFlags are the flags of both import verbs.
type importFlags struct {
	Classify string `help:"A reviewed file of decisions (classes, names, crons, environments, groups) that override the import's." placeholder:"FILE"`
	Write    string `help:"Write a definitions repository for the operational and data-movement jobs into DIR, with the migration report, then validate it." placeholder:"DIR"`
	Report   bool   `help:"Print the migration report (Markdown) instead of the tables."`
	JSON     bool   `help:"Print the inventory, classification and report as JSON." name:"json"`
}

// ImportGitHubCmd is `jobplane import github-actions`.
type ImportGitHubCmd struct {
	Paths []string `arg:"" name:"path" help:"Repository checkouts, .github/workflows directories or workflow files."`
	importFlags
}

// ImportGitLabCmd is `jobplane import gitlab-ci`.
type ImportGitLabCmd struct {
	Path string `arg:"" name:"path" help:"A .gitlab-ci.yml, or the directory holding it."`
	importFlags
}

// Run imports GitHub Actions workflows.
func (c *ImportGitHubCmd) Run(g *Globals) error {
	srcs, err := ciimport.GitHubSources(c.Paths)
	if err != nil {
		return err
	}
	return c.run(g, ciimport.KindGitHub, srcs)
}

// Run imports a GitLab CI pipeline.
func (c *ImportGitLabCmd) Run(g *Globals) error {
	src, err := ciimport.GitLabSource(c.Path)
	if err != nil {
		return err
	}
	return c.run(g, ciimport.KindGitLab, []ciimport.Source{src})
}

// importJSON is what --json prints.
type importJSON struct {
	*ciimport.Inventory
	Secrets []ciimport.SecretUse `json:"secrets"`
	// Definitions are the files of the repository the import plans (and
	// writes, with --write).
	Definitions []string `json:"definitions"`
	Written     string   `json:"written,omitempty"`
	Report      string   `json:"report"`
	// Validation is `jobplane validate`'s report on the written directory.
	Validation *review.Report `json:"validation,omitempty"`
}

func (f *importFlags) run(g *Globals, kind string, srcs []ciimport.Source) error {
	var ov *ciimport.Overrides
	var ovErrs []ciimport.Error
	if f.Classify != "" {
		data, err := os.ReadFile(f.Classify)
		if err != nil {
			return fmt.Errorf("read --classify file: %w", err)
		}
		ov, ovErrs = ciimport.ParseOverrides(f.Classify, data)
	}
	res := ciimport.Import(kind, srcs, ov)
	inv := res.Inventory
	inv.Errors = append(ovErrs, inv.Errors...)
	failed := len(inv.Errors) > 0

	var validation *review.Report
	var stale []string
	if f.Write != "" {
		var err error
		stale, err = writeTree(f.Write, res.Plan.Files)
		if err != nil {
			return err
		}
		files, extra, err := review.ReadDir(f.Write)
		if err != nil {
			return fmt.Errorf("validate %s: %w", f.Write, err)
		}
		rep := review.Validate(files, extra...)
		validation = &rep
		failed = failed || !rep.OK
	}

	switch {
	case f.JSON:
		out := importJSON{Inventory: inv, Secrets: res.Plan.Secrets, Report: res.Report(), Written: f.Write, Validation: validation}
		out.Definitions = slices.Sorted(mapKeys(res.Plan.Files))
		if out.Secrets == nil {
			out.Secrets = []ciimport.SecretUse{}
		}
		if err := printJSON(g.Stdout, out); err != nil {
			return err
		}
	case f.Report || f.Write != "":
		io.WriteString(g.Stdout, res.Report())
	default:
		ciimport.WriteInventory(g.Stdout, inv)
		fmt.Fprintln(g.Stdout)
		ciimport.WriteClassification(g.Stdout, inv)
	}
	if f.Write != "" && !f.JSON {
		fmt.Fprintf(g.Stderr, "jobplane: wrote %d files to %s (the report is %s)\n", len(res.Plan.Files), f.Write, filepath.Join(f.Write, ciimport.ReportFile))
		for _, s := range stale {
			fmt.Fprintf(g.Stderr, "jobplane: %s was not written by this import; delete it if an earlier import wrote it\n", filepath.Join(f.Write, s))
		}
		if validation.OK {
			fmt.Fprintf(g.Stderr, "jobplane validate %s: %s\n", f.Write, validation.Summary())
		} else {
			var b bytes.Buffer
			validation.WriteText(&b)
			fmt.Fprintf(g.Stderr, "jobplane validate %s:\n%s", f.Write, indent(b.String()))
		}
	}
	if !f.JSON && (f.Report || f.Write != "") && len(inv.Errors) > 0 {
		for _, e := range inv.Errors {
			fmt.Fprintf(g.Stderr, "%s\n", e.Error())
		}
	}
	if failed {
		return &ExitError{Code: 1}
	}
	return nil
}

func mapKeys(m map[string][]byte) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func indent(s string) string {
	lines := strings.SplitAfter(s, "\n")
	for i, l := range lines {
		if l != "" {
			lines[i] = "  " + l
		}
	}
	return strings.Join(lines, "")
}

// errNotGenerated refuses to replace a file the import did not write.
var errNotGenerated = errors.New("will not replace files that jobplane import did not write")

// writeTree writes the planned files under dir, replacing each one
// atomically, and returns the definition files already there that the plan
// does not hold (left alone: they may be the team's own).
func writeTree(dir string, files map[string][]byte) ([]string, error) {
	// A file in the way that the import did not write is the team's own
	// (their groups.yaml, say): refuse before writing anything.
	var theirs []string
	for _, p := range slices.Sorted(mapKeys(files)) {
		b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(p)))
		if err == nil && !ciimport.Generated(b) {
			theirs = append(theirs, filepath.Join(dir, filepath.FromSlash(p)))
		}
	}
	if len(theirs) > 0 {
		return nil, fmt.Errorf("%w: %s (write into an empty directory, or move them away)", errNotGenerated, strings.Join(theirs, ", "))
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("write %s: %w", dir, err)
	}
	for _, p := range slices.Sorted(mapKeys(files)) {
		dst := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return nil, fmt.Errorf("write %s: %w", dst, err)
		}
		tmp, err := os.CreateTemp(filepath.Dir(dst), ".import-*")
		if err != nil {
			return nil, fmt.Errorf("write %s: %w", dst, err)
		}
		_, werr := tmp.Write(files[p])
		cerr := tmp.Close()
		if err := errors.Join(werr, cerr); err != nil {
			os.Remove(tmp.Name())
			return nil, fmt.Errorf("write %s: %w", dst, err)
		}
		if err := os.Chmod(tmp.Name(), 0o644); err != nil {
			os.Remove(tmp.Name())
			return nil, fmt.Errorf("write %s: %w", dst, err)
		}
		if err := os.Rename(tmp.Name(), dst); err != nil {
			os.Remove(tmp.Name())
			return nil, fmt.Errorf("write %s: %w", dst, err)
		}
	}
	var stale []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == ".git" {
				return filepath.SkipDir
			}
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		if _, planned := files[rel]; !planned && (catalog.IsDefinitionFile(rel) || strings.HasPrefix(rel, catalog.RunbooksDir)) {
			stale = append(stale, rel)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", dir, err)
	}
	return stale, nil
}

package gitsync

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/index"
	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/jobplane/jobplane/internal/clock"
)

// The author of commits written by this package.
const (
	AuthorName  = "jobplane"
	AuthorEmail = "jobplane@localhost"
)

// CommitOption adjusts a commit written by InitRepo or CommitFiles.
type CommitOption func(*commitConfig)

type commitConfig struct {
	when time.Time
}

// WithTime sets the commit's author and committer time, for reproducible
// commits in tests; the default is the current time.
func WithTime(t time.Time) CommitOption {
	return func(c *commitConfig) { c.when = t }
}

// InitRepo creates a non-bare repository in dir whose first commit, on
// branch, holds files (repo-relative slash paths → content).
func InitRepo(dir, branch string, files map[string]string, message string, opts ...CommitOption) (string, error) {
	if branch == "" {
		return "", errors.New("init repository: empty branch name")
	}
	_, err := git.PlainInitWithOptions(dir, &git.PlainInitOptions{
		InitOptions: git.InitOptions{DefaultBranch: plumbing.NewBranchReferenceName(branch)},
	})
	if err != nil {
		return "", fmt.Errorf("init repository %s: %w", dir, err)
	}
	return CommitFiles(dir, branch, files, message, opts...)
}

// CommitFiles writes files (an empty value deletes the file) to the
// repository in dir and commits them on branch. A branch that does not exist
// yet starts from the current HEAD commit.
func CommitFiles(dir, branch string, files map[string]string, message string, opts ...CommitOption) (string, error) {
	cfg := commitConfig{}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.when.IsZero() {
		cfg.when = clock.Real{}.Now()
	}
	repo, err := git.PlainOpen(dir)
	if err != nil {
		return "", fmt.Errorf("commit files: %w", err)
	}
	wt, err := repo.Worktree()
	if err != nil {
		return "", fmt.Errorf("commit files: %w", err)
	}
	if err := switchBranch(repo, wt, plumbing.NewBranchReferenceName(branch)); err != nil {
		return "", fmt.Errorf("commit files: %w", err)
	}
	for _, name := range slices.Sorted(maps.Keys(files)) {
		clean := path.Clean(name)
		if name == "" || path.IsAbs(name) || clean != name || clean == ".." || strings.HasPrefix(clean, "../") || strings.HasPrefix(clean, ".git/") || clean == ".git" {
			return "", fmt.Errorf("commit files: invalid path %q", name)
		}
		full := filepath.Join(dir, filepath.FromSlash(name))
		if files[name] == "" {
			if err := os.Remove(full); err != nil && !errors.Is(err, os.ErrNotExist) {
				return "", fmt.Errorf("commit files: %w", err)
			}
			if _, err := wt.Remove(name); err != nil && !errors.Is(err, os.ErrNotExist) && !errors.Is(err, index.ErrEntryNotFound) {
				return "", fmt.Errorf("commit files: remove %s: %w", name, err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return "", fmt.Errorf("commit files: %w", err)
		}
		if err := os.WriteFile(full, []byte(files[name]), 0o644); err != nil {
			return "", fmt.Errorf("commit files: %w", err)
		}
		if _, err := wt.Add(name); err != nil {
			return "", fmt.Errorf("commit files: add %s: %w", name, err)
		}
	}
	sig := &object.Signature{Name: AuthorName, Email: AuthorEmail, When: cfg.when}
	hash, err := wt.Commit(message, &git.CommitOptions{Author: sig, Committer: sig, AllowEmptyCommits: true})
	if err != nil {
		return "", fmt.Errorf("commit files: %w", err)
	}
	return hash.String(), nil
}

// switchBranch points HEAD and the worktree at branch, creating it from the
// current commit if needed. In a repository without commits it only moves
// HEAD, and the first commit creates the branch.
func switchBranch(repo *git.Repository, wt *git.Worktree, branch plumbing.ReferenceName) error {
	head, err := repo.Storer.Reference(plumbing.HEAD)
	if err != nil {
		return fmt.Errorf("read HEAD: %w", err)
	}
	if head.Type() == plumbing.SymbolicReference && head.Target() == branch {
		return nil
	}
	if _, err := repo.Reference(branch, true); err == nil {
		return wt.Checkout(&git.CheckoutOptions{Branch: branch})
	}
	if _, err := repo.Head(); err != nil {
		// No commit yet: nothing to check out.
		return repo.Storer.SetReference(plumbing.NewSymbolicReference(plumbing.HEAD, branch))
	}
	return wt.Checkout(&git.CheckoutOptions{Branch: branch, Create: true})
}

// ExampleFiles returns the definitions repository `jobplane dev` starts
// with, using every part of the product so that no page is empty: a job
// anyone may run, one only operators may run, one holding a lease key that a
// developer may run once an operator approved, and a scheduled one.
func ExampleFiles() map[string]string {
	return map[string]string{
		"README.md": "# jobplane definitions\n\nJobs live in jobs/, authorization rules in policies/, groups in groups.yaml.\n",
		"jobs/hello.yaml": `name: hello
description: Greets someone; a first job to try.
owners: [operators]
params:
  type: object
  additionalProperties: false
  properties:
    name:
      type: string
      default: world
      pattern: "^[A-Za-z0-9 _-]{1,64}$"
run:
  # Parameters arrive as environment variables, never templated into argv.
  command: [sh, -c, 'echo "hello, $JOBPLANE_PARAM_NAME"; sleep 1; echo done']
  timeout: 1m
retries: {max_attempts: 1}
`,
		"jobs/count.yaml": `name: count
description: Counts to a number, one per second; useful to watch logs and cancel.
owners: [operators]
params:
  type: object
  additionalProperties: false
  properties:
    to: {type: integer, minimum: 1, maximum: 600, default: 10}
run:
  command: [sh, -c, 'i=1; while [ "$i" -le "$JOBPLANE_PARAM_TO" ]; do echo "$i"; i=$((i+1)); sleep 1; done']
  timeout: 15m
retries: {max_attempts: 2, backoff: 5s}
`,
		"jobs/migrate.yaml": `name: migrate
description: Applies (pretend) schema migrations; never two at once per channel.
owners: [operators]
params:
  type: object
  additionalProperties: false
  properties:
    target_version: {type: integer, minimum: 1, default: 1}
run:
  command: [sh, -c, 'echo "migrating to version $JOBPLANE_PARAM_TARGET_VERSION"; sleep 3; echo "migrated"']
  timeout: 5m
leases:
  # A second migration in the same channel waits for the first.
  - key: "migrate:{channel}"
    on_conflict: queue
retries: {max_attempts: 1}
`,
		"jobs/tidy.yaml": `name: tidy
description: Tidies up every five minutes, as the scheduler.
owners: [operators]
run:
  command: [sh, -c, 'echo "tidying up"; sleep 2; echo "tidy"']
  timeout: 1m
schedule: {cron: "*/5 * * * *", channel: prod, catch_up: latest}
`,
		"groups.yaml": `groups:
  operators:
    members: [admin]
  developers:
    members: [alice]
`,
		"policies/dev.yaml": `rules:
  - id: anyone-runs-hello
    jobs: [hello]
    users: ["*"]
  - id: operators-run-everything
    jobs: ["*"]
    groups: [operators]
  # A developer migrates once an operator approved (never their own run).
  - id: developers-migrate-with-approval
    jobs: [migrate]
    groups: [developers]
    approval: {count: 1, groups: [operators]}
  - id: scheduler-tidies
    jobs: [tidy]
    users: [scheduler]
`,
		"tests/dev.yaml": `tests:
  - name: a developer's migration waits for an operator
    request: {actor: alice, job: migrate, channel: prod}
    expect: approval
  - name: developers do not count
    request: {actor: alice, job: count, channel: prod}
    expect: deny
  - name: the scheduler tidies
    request: {actor: scheduler, job: tidy, channel: prod}
    expect: allow
`,
	}
}

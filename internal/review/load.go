package review

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/jobplane/jobplane/internal/catalog"
)

// wanted reports whether a loader keeps the file at this repo-relative path:
// what catalog.Parse reads, plus runbooks, whose existence is checked.
func wanted(p string) bool {
	if catalog.IsDefinitionFile(p) {
		return true
	}
	rest, ok := strings.CutPrefix(p, catalog.RunbooksDir)
	return ok && strings.HasSuffix(rest, ".md") && !strings.Contains(rest, "/")
}

// ErrNoDefinitions is a directory or revision without a single job,
// policy or groups file: most likely not the definitions repository at all
// (a CI step run in the wrong directory), which must not pass as "ok".
var ErrNoDefinitions = errors.New("no definitions")

// HasDefinitions reports whether files hold a job, a policy or groups.yaml.
func HasDefinitions(files map[string][]byte) bool {
	for p := range files {
		if strings.HasPrefix(p, "jobs/") || strings.HasPrefix(p, "policies/") || p == "groups.yaml" {
			return true
		}
	}
	return false
}

// isRunbook reports whether only the file's existence matters.
func isRunbook(p string) bool { return strings.HasPrefix(p, catalog.RunbooksDir) }

// ReadDir reads the definitions files of a directory on disk: the work tree
// of a pull request checkout, before or without a commit. Every file is read
// up to catalog.MaxFileSize+1 bytes, so an oversized file reaches Parse,
// which reports it, without being loaded whole. Symbolic links are refused
// like anything else that is not a regular file: in a commit they would be
// links, not content.
func ReadDir(dir string) (map[string][]byte, []catalog.Error, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("read definitions: %w", err)
	}
	defer root.Close()
	files := map[string][]byte{}
	var errs []catalog.Error
	read := func(rel string, d fs.DirEntry) error {
		if !wanted(rel) {
			return nil
		}
		if !d.Type().IsRegular() {
			errs = append(errs, catalog.Error{File: rel, Message: "must be a regular file"})
			return nil
		}
		if isRunbook(rel) {
			files[rel] = nil
			return nil
		}
		f, err := root.Open(filepath.FromSlash(rel))
		if err != nil {
			return fmt.Errorf("read %s: %w", rel, err)
		}
		defer f.Close()
		data, err := io.ReadAll(io.LimitReader(f, catalog.MaxFileSize+1))
		if err != nil {
			return fmt.Errorf("read %s: %w", rel, err)
		}
		files[rel] = data
		return nil
	}
	for _, sub := range []string{".", "jobs", "policies", "connectors", "tests", "runbooks"} {
		entries, err := fs.ReadDir(root.FS(), sub)
		if errors.Is(err, fs.ErrNotExist) && sub != "." {
			continue
		}
		if err != nil {
			return nil, nil, fmt.Errorf("read definitions: %w", err)
		}
		for _, e := range entries {
			rel := path.Join(sub, e.Name())
			if err := read(rel, e); err != nil {
				return nil, nil, err
			}
		}
	}
	return files, errs, nil
}

// Revision is one commit's definitions.
type Revision struct {
	Commit string
	Files  map[string][]byte
	// Errors are problems of the tree itself (a link where a file should
	// be), reported with the parse errors.
	Errors []catalog.Error
}

// ReadRevision reads the definitions files of the commit rev (anything
// go-git's ResolveRevision understands: a branch, a tag, a sha, HEAD~1) of
// the Git repository containing dir.
func ReadRevision(dir, rev string) (*Revision, error) {
	repo, err := git.PlainOpenWithOptions(dir, &git.PlainOpenOptions{DetectDotGit: true})
	if err != nil {
		return nil, fmt.Errorf("open repository %s: %w", dir, err)
	}
	hash, err := repo.ResolveRevision(plumbing.Revision(rev))
	if err != nil {
		return nil, fmt.Errorf("resolve revision %q: %w", rev, err)
	}
	commit, err := repo.CommitObject(*hash)
	if err != nil {
		return nil, fmt.Errorf("read commit %s: %w", hash, err)
	}
	tree, err := commit.Tree()
	if err != nil {
		return nil, fmt.Errorf("read tree of %s: %w", hash, err)
	}
	out := &Revision{Commit: hash.String(), Files: map[string][]byte{}}
	err = tree.Files().ForEach(func(f *object.File) error {
		if !wanted(f.Name) {
			return nil
		}
		if f.Mode != filemode.Regular && f.Mode != filemode.Executable {
			out.Errors = append(out.Errors, catalog.Error{File: f.Name, Message: "must be a regular file"})
			return nil
		}
		if isRunbook(f.Name) {
			out.Files[f.Name] = nil
			return nil
		}
		r, err := f.Reader()
		if err != nil {
			return fmt.Errorf("read %s: %w", f.Name, err)
		}
		defer r.Close()
		data, err := io.ReadAll(io.LimitReader(r, catalog.MaxFileSize+1))
		if err != nil {
			return fmt.Errorf("read %s: %w", f.Name, err)
		}
		out.Files[f.Name] = data
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

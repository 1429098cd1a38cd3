package gitsync

import (
	"errors"
	"fmt"
	"io"
	"net/url"
	"path"
	"regexp"
	"strings"
	"sync"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/jobplane/jobplane/internal/catalog"
)

var (
	// ErrUnknownChannel is returned for a channel that maps to no branch.
	ErrUnknownChannel = errors.New("unknown channel")
	// ErrBranchNotFound is returned when a channel's branch does not exist.
	ErrBranchNotFound = errors.New("branch not found")
	// ErrCommitNotFound is returned by AtCommit for a commit the repository
	// does not hold.
	ErrCommitNotFound = errors.New("commit not found")
)

// maxRejections bounds the rejections kept per channel; the newest are kept.
const maxRejections = 20

// CatalogError reports a commit whose definitions do not validate.
type CatalogError struct {
	Channel string // empty for AtCommit
	Commit  string
	Errors  []catalog.Error
}

func (e *CatalogError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "definitions at commit %s do not validate (%d errors)", e.Commit, len(e.Errors))
	for _, ce := range e.Errors {
		b.WriteString("\n  ")
		b.WriteString(ce.Error())
	}
	return b.String()
}

// Snapshot is the catalog a channel serves.
type Snapshot struct {
	Channel string
	Branch  string
	// Commit is the commit the catalog comes from: the branch head, or the
	// last good commit when the head was rejected.
	Commit  string
	Head    string // the branch head when resolved
	Catalog *catalog.Catalog
}

// Rejection is a branch head whose definitions did not validate.
type Rejection struct {
	Commit string          `json:"commit"`
	Errors []catalog.Error `json:"errors"`
}

// parsed is the outcome of parsing one commit; both good and bad results are
// cached, so a bad head is not re-parsed on every Resolve.
type parsed struct {
	cat  *catalog.Catalog
	errs []catalog.Error
}

// Source reads channel catalogs from one local repository. It is safe for
// concurrent use.
type Source struct {
	path     string
	channels map[string]string

	mu         sync.Mutex
	byCommit   map[string]*parsed
	lastGood   map[string]*Snapshot
	rejections map[string][]Rejection
}

// Open checks that repo (a path or file:// URL) is a Git repository, bare or
// not, and returns a Source serving the given channel → branch mapping.
func Open(repo string, channels map[string]string) (*Source, error) {
	p := repo
	if strings.HasPrefix(repo, "file://") {
		u, err := url.Parse(repo)
		if err != nil {
			return nil, fmt.Errorf("open definitions repository: %w", err)
		}
		p = u.Path
	}
	if _, err := openRepo(p); err != nil {
		return nil, fmt.Errorf("open definitions repository %s: %w", repo, err)
	}
	s := &Source{
		path:       p,
		channels:   map[string]string{},
		byCommit:   map[string]*parsed{},
		lastGood:   map[string]*Snapshot{},
		rejections: map[string][]Rejection{},
	}
	for ch, br := range channels {
		if ch == "" || br == "" {
			return nil, fmt.Errorf("open definitions repository: channel %q maps to branch %q", ch, br)
		}
		s.channels[ch] = br
	}
	return s, nil
}

// openRepo opens the repository afresh for every read: go-git's Repository is
// not documented as safe for concurrent use, and a fresh open sees packs and
// refs written by other processes (git push, git gc) since the last read.
func openRepo(p string) (*git.Repository, error) {
	return git.PlainOpenWithOptions(p, &git.PlainOpenOptions{DetectDotGit: false})
}

// Channels returns the channel → branch mapping.
func (s *Source) Channels() map[string]string {
	out := make(map[string]string, len(s.channels))
	for k, v := range s.channels {
		out[k] = v
	}
	return out
}

// Resolve returns the catalog a channel serves now. The branch is re-read on
// every call, so a new commit takes effect immediately; parsing happens once
// per commit. If the head does not validate, the last good snapshot this
// process saw for the channel is returned and the rejection recorded; if there
// is none, the error is a *CatalogError.
func (s *Source) Resolve(channel string) (*Snapshot, error) {
	branch, ok := s.channels[channel]
	if !ok {
		return nil, fmt.Errorf("resolve channel %q: %w", channel, ErrUnknownChannel)
	}
	repo, err := openRepo(s.path)
	if err != nil {
		return nil, fmt.Errorf("resolve channel %s: %w", channel, err)
	}
	ref, err := repo.Reference(plumbing.NewBranchReferenceName(branch), true)
	if err != nil {
		if errors.Is(err, plumbing.ErrReferenceNotFound) {
			return nil, fmt.Errorf("resolve channel %s: %s: %w", channel, branch, ErrBranchNotFound)
		}
		return nil, fmt.Errorf("resolve channel %s: read branch %s: %w", channel, branch, err)
	}
	head := ref.Hash().String()
	p, err := s.parse(repo, ref.Hash())
	if err != nil {
		return nil, fmt.Errorf("resolve channel %s: %w", channel, err)
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if p.cat != nil {
		snap := &Snapshot{Channel: channel, Branch: branch, Commit: head, Head: head, Catalog: p.cat}
		s.lastGood[channel] = snap
		return snap, nil
	}
	s.reject(channel, head, p.errs)
	if good, ok := s.lastGood[channel]; ok {
		out := *good
		out.Head = head
		return &out, nil
	}
	return nil, &CatalogError{Channel: channel, Commit: head, Errors: p.errs}
}

// reject records a rejected head once; s.mu must be held.
func (s *Source) reject(channel, commit string, errs []catalog.Error) {
	rs := s.rejections[channel]
	for _, r := range rs {
		if r.Commit == commit {
			return
		}
	}
	rs = append(rs, Rejection{Commit: commit, Errors: errs})
	if len(rs) > maxRejections {
		rs = rs[len(rs)-maxRejections:]
	}
	s.rejections[channel] = rs
}

// Rejections returns the heads of the channel's branch that were rejected
// since this process started, oldest first.
func (s *Source) Rejections(channel string) []Rejection {
	s.mu.Lock()
	defer s.mu.Unlock()
	rs := s.rejections[channel]
	out := make([]Rejection, len(rs))
	copy(out, rs)
	return out
}

var commitRe = regexp.MustCompile(`^[0-9a-f]{40}$`)

// AtCommit returns the catalog of an exact commit, for runs pinned to the
// commit that was active when they were requested.
func (s *Source) AtCommit(commit string) (*catalog.Catalog, error) {
	if !commitRe.MatchString(commit) {
		return nil, fmt.Errorf("catalog at commit %q: %w", commit, ErrCommitNotFound)
	}
	repo, err := openRepo(s.path)
	if err != nil {
		return nil, fmt.Errorf("catalog at commit %s: %w", commit, err)
	}
	p, err := s.parse(repo, plumbing.NewHash(commit))
	if err != nil {
		return nil, fmt.Errorf("catalog at commit %s: %w", commit, err)
	}
	if p.cat == nil {
		return nil, &CatalogError{Commit: commit, Errors: p.errs}
	}
	return p.cat, nil
}

func (s *Source) parse(repo *git.Repository, hash plumbing.Hash) (*parsed, error) {
	key := hash.String()
	s.mu.Lock()
	p, ok := s.byCommit[key]
	s.mu.Unlock()
	if ok {
		return p, nil
	}
	// Two callers may parse the same commit at once; both get equal results
	// and the first stored wins, which is cheaper than a per-commit lock.
	commit, err := repo.CommitObject(hash)
	if err != nil {
		if errors.Is(err, plumbing.ErrObjectNotFound) {
			return nil, fmt.Errorf("%s: %w", key, ErrCommitNotFound)
		}
		return nil, fmt.Errorf("read commit %s: %w", key, err)
	}
	files, ferrs, err := readDefinitions(commit)
	if err != nil {
		return nil, err
	}
	cat, errs := catalog.Parse(files)
	errs = append(ferrs, errs...)
	if len(ferrs) > 0 {
		cat = nil
	}
	p = &parsed{cat: cat, errs: errs}
	s.mu.Lock()
	defer s.mu.Unlock()
	if prev, ok := s.byCommit[key]; ok {
		return prev, nil
	}
	s.byCommit[key] = p
	return p, nil
}

// readDefinitions reads the files catalog.Parse uses from a commit's tree.
// Oversized files are reported as catalog errors, not read: a commit must not
// make the server load arbitrary amounts of data.
func readDefinitions(commit *object.Commit) (map[string][]byte, []catalog.Error, error) {
	tree, err := commit.Tree()
	if err != nil {
		return nil, nil, fmt.Errorf("read tree of %s: %w", commit.Hash, err)
	}
	files := map[string][]byte{}
	var errs []catalog.Error
	read := func(t *object.Tree, dir string, e object.TreeEntry) error {
		p := path.Join(dir, e.Name)
		if !catalog.IsDefinitionFile(p) {
			return nil
		}
		if e.Mode != filemode.Regular && e.Mode != filemode.Executable {
			errs = append(errs, catalog.Error{File: p, Message: "must be a regular file"})
			return nil
		}
		f, err := t.TreeEntryFile(&e)
		if err != nil {
			return fmt.Errorf("read %s: %w", p, err)
		}
		if f.Size > catalog.MaxFileSize {
			errs = append(errs, catalog.Error{File: p, Message: fmt.Sprintf("file is larger than %d bytes", catalog.MaxFileSize)})
			return nil
		}
		r, err := f.Reader()
		if err != nil {
			return fmt.Errorf("read %s: %w", p, err)
		}
		defer r.Close()
		data, err := io.ReadAll(io.LimitReader(r, catalog.MaxFileSize+1))
		if err != nil {
			return fmt.Errorf("read %s: %w", p, err)
		}
		files[p] = data
		return nil
	}
	for _, e := range tree.Entries {
		if err := read(tree, "", e); err != nil {
			return nil, nil, err
		}
	}
	for _, dir := range []string{strings.TrimSuffix(catalog.JobsDir, "/"), strings.TrimSuffix(catalog.PoliciesDir, "/"), strings.TrimSuffix(catalog.ConnectorsDir, "/")} {
		sub, err := tree.Tree(dir)
		if errors.Is(err, object.ErrDirectoryNotFound) {
			continue
		}
		if err != nil {
			return nil, nil, fmt.Errorf("read %s: %w", dir, err)
		}
		for _, e := range sub.Entries {
			if err := read(sub, dir, e); err != nil {
				return nil, nil, err
			}
		}
	}
	return files, errs, nil
}

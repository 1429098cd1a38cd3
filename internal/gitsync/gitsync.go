package gitsync

import (
	"errors"
	"fmt"
	"io"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

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
	// ErrRefRequired is returned when a pattern channel is resolved without
	// naming the branch.
	ErrRefRequired = errors.New("a pattern channel needs a ref naming the branch")
	// ErrRefNotAllowed is returned for a ref the channel does not serve: one
	// not matching a pattern channel's pattern, or any other branch than a
	// fixed channel's own.
	ErrRefNotAllowed = errors.New("ref not served by this channel")
)

const (
	// maxRejections bounds the rejections kept per channel and branch; the
	// newest are kept.
	maxRejections = 20
	// maxWalk bounds how far back the first-parent history is searched for a
	// good commit when a branch's head is bad and no good commit is known.
	maxWalk = 50
	// maxFile bounds a file read with ReadFile (runbooks).
	maxFile = catalog.MaxFileSize
)

// Options configure a Source.
type Options struct {
	// Channels maps a channel to a branch, or to a branch pattern
	// (path.Match syntax, e.g. feature/*) for a pattern channel.
	Channels map[string]string
	// Protected lists the branches (names or path.Match patterns) that count
	// as protected in policies; nil means just main.
	Protected []string
	// MirrorDir is where URLs are cloned (bare); without it only local
	// paths and file:// URLs (read in place) are accepted.
	MirrorDir string
}

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

// Snapshot is the catalog a channel serves for one branch.
type Snapshot struct {
	Channel string
	Branch  string
	// Commit is the active commit the catalog comes from: the branch head,
	// or the last good commit when the head was rejected.
	Commit string
	Head   string // the branch head when resolved
	// Author and CommittedAt describe Commit.
	Author      string
	CommittedAt time.Time
	// Protected reports whether Branch counts as protected in policies.
	Protected bool
	Catalog   *catalog.Catalog
}

// Rejection is a commit whose definitions did not validate.
type Rejection struct {
	Commit string          `json:"commit"`
	Author string          `json:"author"`
	At     time.Time       `json:"at"` // commit time
	Errors []catalog.Error `json:"errors"`
}

// parsed is the outcome of parsing one commit; both good and bad results are
// cached, so a bad head is not re-parsed on every Resolve.
type parsed struct {
	cat     *catalog.Catalog
	errs    []catalog.Error
	author  string
	when    time.Time
	parents []plumbing.Hash
}

// key names one branch of one channel: a pattern channel has many.
type key struct{ channel, branch string }

// Source reads channel catalogs from one repository. It is safe for
// concurrent use.
type Source struct {
	path      string // what is read: the repository itself, or its mirror
	url       string // the remote a mirror follows; empty when read in place
	channels  map[string]string
	protected []string

	syncMu sync.Mutex // one fetch at a time

	mu         sync.Mutex
	byCommit   map[string]*parsed
	lastGood   map[key]*Snapshot
	rejections map[key][]Rejection

	heads *headCache
}

// Open returns a Source serving opts.Channels from repo. A local path or a
// file:// URL without opts.MirrorDir is read in place (bare or not); any
// other URL, or a file:// URL with opts.MirrorDir, is cloned bare into
// opts.MirrorDir and fetched now, then on every Sync. When the first fetch
// fails but an earlier mirror exists, the stale mirror is served until a
// Sync succeeds.
func Open(repo string, opts Options) (*Source, error) {
	s := &Source{
		channels:   map[string]string{},
		protected:  opts.Protected,
		byCommit:   map[string]*parsed{},
		lastGood:   map[key]*Snapshot{},
		rejections: map[key][]Rejection{},
	}
	if s.protected == nil {
		s.protected = []string{"main"}
	}
	for _, p := range s.protected {
		if _, err := path.Match(p, ""); err != nil {
			return nil, fmt.Errorf("open definitions repository: protected branch pattern %q: %w", p, err)
		}
	}
	for ch, br := range opts.Channels {
		if ch == "" || br == "" {
			return nil, fmt.Errorf("open definitions repository: channel %q maps to branch %q", ch, br)
		}
		if _, err := path.Match(br, ""); err != nil {
			return nil, fmt.Errorf("open definitions repository: channel %s: branch pattern %q: %w", ch, br, err)
		}
		s.channels[ch] = br
	}
	local, isURL, err := classify(repo)
	if err != nil {
		return nil, fmt.Errorf("open definitions repository: %w", err)
	}
	if !isURL || (strings.HasPrefix(repo, "file://") && opts.MirrorDir == "") {
		s.path = local
		if _, err := openRepo(s.path); err != nil {
			return nil, fmt.Errorf("open definitions repository %s: %w", repo, err)
		}
		s.heads = newHeadCache(s.path)
		return s, nil
	}
	if opts.MirrorDir == "" {
		return nil, fmt.Errorf("open definitions repository %s: a remote repository needs a mirror directory", redact(repo))
	}
	s.url = repo
	if err := s.initMirror(opts.MirrorDir); err != nil {
		return nil, fmt.Errorf("open definitions repository %s: %w", redact(repo), err)
	}
	s.heads = newHeadCache(s.path)
	return s, nil
}

// classify tells a URL from a local path; for a local path or a file://
// URL it returns the file system path.
func classify(repo string) (local string, isURL bool, err error) {
	switch {
	case strings.HasPrefix(repo, "file://"):
		u, err := url.Parse(repo)
		if err != nil {
			return "", false, err
		}
		return u.Path, true, nil
	case strings.Contains(repo, "://"):
		return "", true, nil
	case scpLike.MatchString(repo):
		return "", true, nil
	}
	return repo, false, nil
}

// scpLike matches git's user@host:path form (but not a Windows drive).
var scpLike = regexp.MustCompile(`^[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:`)

// redact drops a password from a URL before it reaches an error message.
func redact(repo string) string {
	u, err := url.Parse(repo)
	if err != nil || u.User == nil {
		return repo
	}
	return u.Redacted()
}

// openRepo opens the repository afresh for every read: go-git's Repository is
// not documented as safe for concurrent use, and a fresh open sees packs and
// refs written by other processes (git push, git gc, a Sync) since the last
// read.
func openRepo(p string) (*git.Repository, error) {
	return git.PlainOpenWithOptions(p, &git.PlainOpenOptions{DetectDotGit: false})
}

// Mirrored reports whether the repository is a mirror that Sync refreshes.
func (s *Source) Mirrored() bool { return s.url != "" }

// Channels returns the channel → branch (or pattern) mapping.
func (s *Source) Channels() map[string]string {
	out := make(map[string]string, len(s.channels))
	for k, v := range s.channels {
		out[k] = v
	}
	return out
}

// IsPattern reports whether a channel maps to a branch pattern, so that its
// requests must name the branch.
func (s *Source) IsPattern(channel string) bool {
	return isPattern(s.channels[channel])
}

func isPattern(branch string) bool { return strings.ContainsAny(branch, "*?[") }

// Protected reports whether a branch counts as protected in policies.
func (s *Source) Protected(branch string) bool {
	for _, p := range s.protected {
		if ok, _ := path.Match(p, branch); ok {
			return true
		}
	}
	return false
}

// Branches lists the branches a channel serves now: its one branch (whether
// or not it exists yet), or every existing branch matching its pattern.
func (s *Source) Branches(channel string) ([]string, error) {
	pattern, ok := s.channels[channel]
	if !ok {
		return nil, fmt.Errorf("channel %q: %w", channel, ErrUnknownChannel)
	}
	if !isPattern(pattern) {
		return []string{pattern}, nil
	}
	repo, err := openRepo(s.path)
	if err != nil {
		return nil, fmt.Errorf("list branches of channel %s: %w", channel, err)
	}
	it, err := repo.Branches()
	if err != nil {
		return nil, fmt.Errorf("list branches of channel %s: %w", channel, err)
	}
	var out []string
	err = it.ForEach(func(r *plumbing.Reference) error {
		b := r.Name().Short()
		if ok, _ := path.Match(pattern, b); ok {
			out = append(out, b)
		}
		return nil
	})
	slices.Sort(out)
	return out, err
}

// branchFor checks a request's ref against the channel and returns the
// branch to read.
func (s *Source) branchFor(channel, ref string) (string, error) {
	pattern, ok := s.channels[channel]
	if !ok {
		return "", fmt.Errorf("resolve channel %q: %w", channel, ErrUnknownChannel)
	}
	if !isPattern(pattern) {
		if ref != "" && ref != pattern {
			return "", fmt.Errorf("resolve channel %s: ref %q: the channel serves only %s: %w", channel, ref, pattern, ErrRefNotAllowed)
		}
		return pattern, nil
	}
	if ref == "" {
		return "", fmt.Errorf("resolve channel %s (%s): %w", channel, pattern, ErrRefRequired)
	}
	if ok, _ := path.Match(pattern, ref); !ok || !validBranch(ref) {
		return "", fmt.Errorf("resolve channel %s: ref %q does not match %s: %w", channel, ref, pattern, ErrRefNotAllowed)
	}
	return ref, nil
}

// validBranch refuses names git itself would refuse and anything that could
// step outside refs/heads when used as a path.
func validBranch(b string) bool {
	if b == "" || strings.HasPrefix(b, "-") || strings.HasSuffix(b, ".lock") || strings.ContainsAny(b, " ~^:?*[\\\x7f") {
		return false
	}
	for _, seg := range strings.Split(b, "/") {
		if seg == "" || seg == "." || seg == ".." || strings.HasPrefix(seg, ".") {
			return false
		}
	}
	for _, r := range b {
		if r < 0x20 {
			return false
		}
	}
	return true
}

// Resolve returns the catalog a channel serves now; ref names the branch of
// a pattern channel (and may name a fixed channel's own branch). The branch
// is re-read whenever its ref files changed, so a new commit takes effect
// immediately (for a mirror: after the Sync that fetched it); parsing happens
// once per commit.
// If the head does not validate, the rejection is recorded and the last good
// snapshot of the channel's branch is returned with Head set to the bad head;
// if none is known, the branch's history is searched for one, and if there
// is none either, the error is a *CatalogError.
func (s *Source) Resolve(channel, ref string) (*Snapshot, error) {
	branch, err := s.branchFor(channel, ref)
	if err != nil {
		return nil, err
	}
	// headcache.go: the head read last time, while its ref files are
	// unchanged; then the commit is parsed already.
	st, cacheable := s.heads.stamp(branch)
	var hash plumbing.Hash
	var p *parsed
	if cacheable {
		if h, ok := s.heads.get(branch, st); ok {
			s.mu.Lock()
			p = s.byCommit[h.String()]
			s.mu.Unlock()
			hash = h
		}
	}
	var repo *git.Repository
	if p == nil {
		repo, err = openRepo(s.path)
		if err != nil {
			return nil, fmt.Errorf("resolve channel %s: %w", channel, err)
		}
		name := plumbing.NewBranchReferenceName(branch)
		r, err := repo.Reference(name, true)
		if err != nil {
			if errors.Is(err, plumbing.ErrReferenceNotFound) {
				return nil, fmt.Errorf("resolve channel %s: %s: %w", channel, branch, ErrBranchNotFound)
			}
			return nil, fmt.Errorf("resolve channel %s: read branch %s: %w", channel, branch, err)
		}
		hash = r.Hash()
		if p, err = s.parse(repo, hash); err != nil {
			return nil, fmt.Errorf("resolve channel %s: %w", channel, err)
		}
		// A symbolic branch follows another ref, whose file the stamp
		// does not cover.
		if cacheable && r.Name() == name {
			s.heads.put(branch, st, hash)
		}
	}
	head := hash.String()
	k := key{channel, branch}
	if p.cat != nil {
		snap := s.snapshot(k, head, head, p)
		s.mu.Lock()
		s.lastGood[k] = snap
		s.mu.Unlock()
		return snap, nil
	}

	s.mu.Lock()
	s.reject(k, head, p)
	good, ok := s.lastGood[k]
	s.mu.Unlock()
	if ok {
		out := *good
		out.Head = head
		return &out, nil
	}
	// No good commit known for this branch: the newest good ancestor is the
	// active commit, as if this process had seen every push.
	if repo == nil {
		var err error
		if repo, err = openRepo(s.path); err != nil {
			return nil, fmt.Errorf("resolve channel %s: %w", channel, err)
		}
	}
	if hash, gp, err := s.goodAncestor(repo, p); err != nil {
		return nil, fmt.Errorf("resolve channel %s: %w", channel, err)
	} else if gp != nil {
		snap := s.snapshot(k, hash, head, gp)
		s.mu.Lock()
		if _, ok := s.lastGood[k]; !ok {
			s.lastGood[k] = snap
		}
		s.mu.Unlock()
		return snap, nil
	}
	return nil, &CatalogError{Channel: channel, Commit: head, Errors: p.errs}
}

func (s *Source) snapshot(k key, commit, head string, p *parsed) *Snapshot {
	return &Snapshot{Channel: k.channel, Branch: k.branch, Commit: commit, Head: head, Author: p.author,
		CommittedAt: p.when, Protected: s.Protected(k.branch), Catalog: p.cat}
}

// goodAncestor walks first parents from a bad commit to the newest one that
// validates, at most maxWalk steps.
func (s *Source) goodAncestor(repo *git.Repository, p *parsed) (string, *parsed, error) {
	for range maxWalk {
		if len(p.parents) == 0 {
			return "", nil, nil
		}
		h := p.parents[0]
		var err error
		if p, err = s.parse(repo, h); err != nil {
			if errors.Is(err, ErrCommitNotFound) { // a shallow history ends here
				return "", nil, nil
			}
			return "", nil, err
		}
		if p.cat != nil {
			return h.String(), p, nil
		}
	}
	return "", nil, nil
}

// Seed makes commit the last good commit of a channel's branch unless one is
// known already: the server hands back the active commit it persisted, so
// that a restart does not lose it. A commit that is missing or does not
// validate is refused.
func (s *Source) Seed(channel, branch, commit string) error {
	if _, ok := s.channels[channel]; !ok {
		return fmt.Errorf("seed channel %q: %w", channel, ErrUnknownChannel)
	}
	p, err := s.atCommit(commit)
	if err != nil {
		return fmt.Errorf("seed channel %s: %w", channel, err)
	}
	if p.cat == nil {
		return fmt.Errorf("seed channel %s: %w", channel, &CatalogError{Channel: channel, Commit: commit, Errors: p.errs})
	}
	k := key{channel, branch}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.lastGood[k]; !ok {
		s.lastGood[k] = s.snapshot(k, commit, commit, p)
	}
	return nil
}

// reject records a rejected head once; s.mu must be held.
func (s *Source) reject(k key, commit string, p *parsed) {
	rs := s.rejections[k]
	for _, r := range rs {
		if r.Commit == commit {
			return
		}
	}
	rs = append(rs, Rejection{Commit: commit, Author: p.author, At: p.when, Errors: p.errs})
	if len(rs) > maxRejections {
		rs = rs[len(rs)-maxRejections:]
	}
	s.rejections[k] = rs
}

// Rejections returns the heads of a channel's branch that were rejected
// since this process started, oldest first.
func (s *Source) Rejections(channel, branch string) []Rejection {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.rejections[key{channel, branch}])
}

var commitRe = regexp.MustCompile(`^[0-9a-f]{40}$`)

// AtCommit returns the catalog of an exact commit, for runs pinned to the
// commit that was active when they were requested.
func (s *Source) AtCommit(commit string) (*catalog.Catalog, error) {
	p, err := s.atCommit(commit)
	if err != nil {
		return nil, fmt.Errorf("catalog at commit %s: %w", commit, err)
	}
	if p.cat == nil {
		return nil, &CatalogError{Commit: commit, Errors: p.errs}
	}
	return p.cat, nil
}

func (s *Source) atCommit(commit string) (*parsed, error) {
	if !commitRe.MatchString(commit) {
		return nil, fmt.Errorf("%q: %w", commit, ErrCommitNotFound)
	}
	repo, err := openRepo(s.path)
	if err != nil {
		return nil, err
	}
	return s.parse(repo, plumbing.NewHash(commit))
}

// ReadFile returns a file of a commit's tree (a job's runbook, say). Files
// larger than the catalog's file limit are refused.
func (s *Source) ReadFile(commit, name string) ([]byte, error) {
	if !commitRe.MatchString(commit) {
		return nil, fmt.Errorf("read %s at %q: %w", name, commit, ErrCommitNotFound)
	}
	repo, err := openRepo(s.path)
	if err != nil {
		return nil, err
	}
	c, err := repo.CommitObject(plumbing.NewHash(commit))
	if err != nil {
		return nil, fmt.Errorf("read %s at %s: %w", name, commit, ErrCommitNotFound)
	}
	f, err := c.File(path.Clean(name))
	if err != nil {
		return nil, fmt.Errorf("read %s at %s: %w", name, commit, err)
	}
	if f.Size > maxFile {
		return nil, fmt.Errorf("read %s at %s: larger than %d bytes", name, commit, maxFile)
	}
	r, err := f.Reader()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(io.LimitReader(r, maxFile))
}

func (s *Source) parse(repo *git.Repository, hash plumbing.Hash) (*parsed, error) {
	k := hash.String()
	s.mu.Lock()
	p, ok := s.byCommit[k]
	s.mu.Unlock()
	if ok {
		return p, nil
	}
	// Two callers may parse the same commit at once; both get equal results
	// and the first stored wins, which is cheaper than a per-commit lock.
	commit, err := repo.CommitObject(hash)
	if err != nil {
		if errors.Is(err, plumbing.ErrObjectNotFound) {
			return nil, fmt.Errorf("%s: %w", k, ErrCommitNotFound)
		}
		return nil, fmt.Errorf("read commit %s: %w", k, err)
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
	author := commit.Author.Name
	if commit.Author.Email != "" {
		author += " <" + commit.Author.Email + ">"
	}
	p = &parsed{cat: cat, errs: errs, author: author, when: commit.Committer.When.UTC(), parents: commit.ParentHashes}
	s.mu.Lock()
	defer s.mu.Unlock()
	if prev, ok := s.byCommit[k]; ok {
		return prev, nil
	}
	s.byCommit[k] = p
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

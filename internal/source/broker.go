package source

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/jobplane/jobplane/internal/gitsync"
)

// Errors of the broker.
var (
	// ErrUnknownRepo: no repository of that name is configured.
	ErrUnknownRepo = errors.New("unknown source repository")
	// ErrBadCommit: the commit is not a full, lowercase SHA-1 hex id.
	ErrBadCommit = errors.New("commit must be a full 40-character lowercase hex id")
	// ErrNotFound: the branch or commit is not in the mirror.
	ErrNotFound = errors.New("not found in the source mirror")
	// ErrCorrupt: the mirror's object does not hash to its id.
	ErrCorrupt = errors.New("commit object does not match its id")
)

var (
	repoNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)
	commitRE   = regexp.MustCompile(`^[0-9a-f]{40}$`)
)

// ValidRepoName reports whether a repository name is acceptable.
func ValidRepoName(name string) bool { return repoNameRE.MatchString(name) }

// Broker serves the configured repositories. It is safe for concurrent use.
type Broker struct {
	repos map[string]*gitsync.Source
}

// Open opens (mirroring URLs under mirrorDir/NAME) every repository of
// repos, a map of name to URL or local path.
func Open(repos map[string]string, mirrorDir string) (*Broker, error) {
	b := &Broker{repos: map[string]*gitsync.Source{}}
	for _, name := range slices.Sorted(maps.Keys(repos)) {
		if !ValidRepoName(name) {
			return nil, fmt.Errorf("source repository name %q must match %s", name, repoNameRE)
		}
		src, err := gitsync.Open(repos[name], gitsync.Options{MirrorDir: filepath.Join(mirrorDir, name)})
		if err != nil {
			return nil, fmt.Errorf("source repository %s: %w", name, err)
		}
		b.repos[name] = src
	}
	return b, nil
}

// Names lists the configured repositories.
func (b *Broker) Names() []string { return slices.Sorted(maps.Keys(b.repos)) }

// Sync fetches every mirrored repository.
func (b *Broker) Sync(ctx context.Context) error {
	var errs []error
	for _, name := range b.Names() {
		if err := b.repos[name].Sync(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (b *Broker) open(name string) (*git.Repository, error) {
	src, ok := b.repos[name]
	if !ok {
		return nil, fmt.Errorf("%q: %w", name, ErrUnknownRepo)
	}
	return src.Repository()
}

// Head returns the commit a branch of a repository points at now.
func (b *Broker) Head(repo, branch string) (string, error) {
	r, err := b.open(repo)
	if err != nil {
		return "", err
	}
	ref, err := r.Reference(plumbing.NewBranchReferenceName(branch), true)
	if err != nil {
		return "", fmt.Errorf("branch %s of %s: %w", branch, repo, ErrNotFound)
	}
	return ref.Hash().String(), nil
}

// Archive verifies commit in the mirror of repo and then writes it as a
// gzipped tar. open is called once, after verification and before the
// first byte, to obtain the writer: a caller can still refuse cleanly
// until then.
func (b *Broker) Archive(ctx context.Context, repo, commit string, open func() io.Writer) error {
	if !commitRE.MatchString(commit) {
		return fmt.Errorf("%q: %w", commit, ErrBadCommit)
	}
	r, err := b.open(repo)
	if err != nil {
		return err
	}
	c, err := verifiedCommit(r, plumbing.NewHash(commit))
	if err != nil {
		return err
	}
	tree, err := c.Tree()
	if err != nil {
		return fmt.Errorf("tree of %s: %w", commit, err)
	}
	zw := gzip.NewWriter(open())
	tw := tar.NewWriter(zw)
	// Like git archive: the commit id in a pax global header, and the
	// commit time on every entry.
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeXGlobalHeader, Name: "pax_global_header",
		PAXRecords: map[string]string{"comment": commit}, Format: tar.FormatPAX}); err != nil {
		return err
	}
	if err := writeTree(ctx, r, tw, tree, "", c.Committer.When); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return zw.Close()
}

// verifiedCommit reads a commit and re-hashes its encoding: a packfile
// entry is not re-verified by go-git on every read, and the id is the whole
// point of the ticket.
func verifiedCommit(r *git.Repository, h plumbing.Hash) (*object.Commit, error) {
	obj, err := r.Storer.EncodedObject(plumbing.CommitObject, h)
	if err != nil {
		return nil, fmt.Errorf("commit %s: %w", h, ErrNotFound)
	}
	rd, err := obj.Reader()
	if err != nil {
		return nil, err
	}
	defer rd.Close()
	hasher := plumbing.NewHasher(plumbing.CommitObject, obj.Size())
	if _, err := io.Copy(hasher, rd); err != nil {
		return nil, err
	}
	if hasher.Sum() != h {
		return nil, fmt.Errorf("commit %s: %w", h, ErrCorrupt)
	}
	return object.DecodeCommit(r.Storer, obj)
}

func writeTree(ctx context.Context, r *git.Repository, tw *tar.Writer, t *object.Tree, prefix string, mtime time.Time) error {
	for _, e := range t.Entries {
		if err := ctx.Err(); err != nil {
			return err
		}
		name := prefix + e.Name
		switch e.Mode {
		case filemode.Dir:
			if err := tw.WriteHeader(dirHeader(name, mtime)); err != nil {
				return err
			}
			sub, err := r.TreeObject(e.Hash)
			if err != nil {
				return fmt.Errorf("tree %s: %w", name, err)
			}
			if err := writeTree(ctx, r, tw, sub, name+"/", mtime); err != nil {
				return err
			}
		case filemode.Submodule:
			// git archive leaves a submodule as an empty directory.
			if err := tw.WriteHeader(dirHeader(name, mtime)); err != nil {
				return err
			}
		case filemode.Symlink, filemode.Regular, filemode.Executable, filemode.Deprecated:
			blob, err := r.BlobObject(e.Hash)
			if err != nil {
				return fmt.Errorf("blob %s: %w", name, err)
			}
			if err := writeBlob(tw, blob, name, e.Mode, mtime); err != nil {
				return err
			}
		default:
			return fmt.Errorf("%s: unsupported file mode %s", name, e.Mode)
		}
	}
	return nil
}

func dirHeader(name string, mtime time.Time) *tar.Header {
	return &tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: 0o775, ModTime: mtime, Format: tar.FormatPAX}
}

func writeBlob(tw *tar.Writer, blob *object.Blob, name string, mode filemode.FileMode, mtime time.Time) error {
	rd, err := blob.Reader()
	if err != nil {
		return err
	}
	defer rd.Close()
	h := &tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o664, Size: blob.Size, ModTime: mtime, Format: tar.FormatPAX}
	switch mode {
	case filemode.Executable:
		h.Mode = 0o775
	case filemode.Symlink:
		target, err := io.ReadAll(io.LimitReader(rd, 4096))
		if err != nil {
			return err
		}
		h = &tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: string(target), Mode: 0o777, ModTime: mtime, Format: tar.FormatPAX}
		return tw.WriteHeader(h)
	}
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	_, err = io.Copy(tw, rd)
	return err
}

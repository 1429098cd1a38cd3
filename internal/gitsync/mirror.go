package gitsync

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/go-git/go-billy/v5/osfs"
	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/go-git/go-git/v5/plumbing/transport/client"
	"github.com/go-git/go-git/v5/plumbing/transport/server"
	"github.com/go-git/go-git/v5/storage/filesystem"
)

// go-git's default file:// transport runs the git binary (git-upload-pack).
// Serving it in process needs no git installation and no subprocess per
// fetch. go-git's own loader only finds bare repositories, so ours also
// accepts a working tree and reads its .git directory.
func init() {
	client.InstallProtocol("file", server.NewServer(fileLoader{}))
}

type fileLoader struct{}

func (fileLoader) Load(ep *transport.Endpoint) (storer.Storer, error) {
	dir := ep.Path
	if fi, err := os.Stat(filepath.Join(dir, ".git")); err == nil && fi.IsDir() {
		dir = filepath.Join(dir, ".git")
	}
	if _, err := os.Stat(filepath.Join(dir, "config")); err != nil {
		return nil, transport.ErrRepositoryNotFound
	}
	return filesystem.NewStorage(osfs.New(dir), cache.NewObjectLRUDefault()), nil
}

// fetchSpec mirrors branches only: tags and other refs (a forge's pull
// request refs, say) are never served and can be large.
var fetchSpec = config.RefSpec("+refs/heads/*:refs/heads/*")

// initMirror creates or reopens the bare mirror of s.url under dir and
// fetches it once.
func (s *Source) initMirror(dir string) error {
	sum := sha256.Sum256([]byte(s.url))
	s.path = filepath.Join(dir, hex.EncodeToString(sum[:8])+".git")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create mirror directory: %w", err)
	}
	repo, err := openRepo(s.path)
	if errors.Is(err, git.ErrRepositoryNotExists) {
		repo, err = git.PlainInit(s.path, true)
		if err == nil {
			_, err = repo.CreateRemote(&config.RemoteConfig{Name: "origin", URLs: []string{s.url}, Fetch: []config.RefSpec{fetchSpec}})
		}
	}
	if err != nil {
		return fmt.Errorf("mirror %s: %w", s.path, err)
	}
	err = s.Sync(context.Background())
	if err == nil {
		return nil
	}
	// A mirror fetched before still serves its last state: a remote that
	// is down at start must not keep the server from starting.
	if refs, rerr := repo.Branches(); rerr == nil {
		n := 0
		_ = refs.ForEach(func(*plumbing.Reference) error { n++; return nil })
		if n > 0 {
			return nil
		}
	}
	return err
}

// Sync fetches the remote into the mirror: every branch, forced (a
// force-push is mirrored as is) and pruned (a deleted branch disappears). It
// does nothing for a repository read in place.
func (s *Source) Sync(ctx context.Context) error {
	if s.url == "" {
		return nil
	}
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	repo, err := openRepo(s.path)
	if err != nil {
		return fmt.Errorf("sync %s: %w", redact(s.url), err)
	}
	err = repo.FetchContext(ctx, &git.FetchOptions{RemoteName: "origin", RefSpecs: []config.RefSpec{fetchSpec}, Prune: true, Force: true, Tags: git.NoTags})
	// The fetch rewrote the ref files, which changes their stamps anyway;
	// forgetting costs one read per branch and depends on nothing.
	s.heads.forget()
	if err != nil && !errors.Is(err, git.NoErrAlreadyUpToDate) {
		return fmt.Errorf("sync %s: %w", redact(s.url), err)
	}
	return nil
}

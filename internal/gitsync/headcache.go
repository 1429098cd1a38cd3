package gitsync

import (
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/go-git/go-git/v5/plumbing"

	"github.com/jobplane/jobplane/internal/clock"
)

// Every run request and every claim (the policy re-check at dispatch)
// resolves a channel, and opening the repository to read the branch head
// took about a tenth of the server's CPU in `jobplane bench`. A branch head
// lives in its loose ref file or in packed-refs, and both change only by
// writing those files: the head read last time is reused while neither file
// changed (same inode, size and modification time), which costs two stat
// calls instead of an open and a read. A new commit, a Sync, a push by
// another process all rewrite one of them, so a policy change still takes
// effect on the next request.
//
// A file written twice within one tick of the file system's clock can keep
// its stat: a read made in that tick could miss the second write. So a head
// is only reused when both files were last modified well before it was read
// (racyWindow), the rule git applies to its index for the same reason.

// racyWindow is how long after a ref file's modification time its stat is
// trusted to reveal the next write; it covers coarse file system
// timestamps.
const racyWindow = 2 * time.Second

// RacyWindow is how long after a branch head was written Resolve reads it
// from the repository each time rather than from its cache.
const RacyWindow = racyWindow

type fileStamp struct {
	exists bool
	ino    uint64
	size   int64
	mtime  int64 // ns
}

func stampOf(p string) (fileStamp, bool) {
	fi, err := os.Stat(p)
	if os.IsNotExist(err) {
		return fileStamp{}, true
	}
	if err != nil {
		return fileStamp{}, false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileStamp{}, false
	}
	return fileStamp{exists: true, ino: st.Ino, size: fi.Size(), mtime: fi.ModTime().UnixNano()}, true
}

type refStamp struct{ loose, packed fileStamp }

type headEntry struct {
	stamp refStamp
	hash  plumbing.Hash
}

type headCache struct {
	gitDir string // empty: no caching (a linked worktree, say)
	mu     sync.Mutex
	m      map[string]headEntry // by branch
}

// newHeadCache caches heads of the repository at p: a bare repository or a
// work tree with a .git directory.
func newHeadCache(p string) *headCache {
	c := &headCache{}
	if fi, err := os.Stat(filepath.Join(p, ".git")); err == nil && fi.IsDir() {
		c.gitDir = filepath.Join(p, ".git")
	} else if fi, err := os.Stat(filepath.Join(p, "HEAD")); err == nil && !fi.IsDir() {
		c.gitDir = p
	}
	return c
}

// stamp returns the current stamp of a branch's ref files; ok is false when
// they cannot be trusted to reveal the next change.
func (c *headCache) stamp(branch string) (refStamp, bool) {
	if c == nil || c.gitDir == "" {
		return refStamp{}, false
	}
	loose, ok1 := stampOf(filepath.Join(c.gitDir, "refs", "heads", filepath.FromSlash(branch)))
	packed, ok2 := stampOf(filepath.Join(c.gitDir, "packed-refs"))
	if !ok1 || !ok2 {
		return refStamp{}, false
	}
	limit := clock.Real{}.Now().Add(-racyWindow).UnixNano()
	if loose.mtime > limit || packed.mtime > limit {
		return refStamp{}, false
	}
	return refStamp{loose, packed}, true
}

// get returns the head read under the same stamp.
func (c *headCache) get(branch string, st refStamp) (plumbing.Hash, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[branch]
	if !ok || e.stamp != st {
		return plumbing.ZeroHash, false
	}
	return e.hash, true
}

// put records the head read after taking the stamp st: a write between the
// stamp and the read changes the stamp, so the entry is only ever reused
// for the head it holds or a newer read.
func (c *headCache) put(branch string, st refStamp, h plumbing.Hash) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]headEntry{}
	}
	c.m[branch] = headEntry{stamp: st, hash: h}
}

// forget drops every cached head (after a Sync).
func (c *headCache) forget() {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.m)
}

package gitsync

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// age sets the ref files' modification time back, as if the branch had not
// moved for an hour, so that the cached head may be reused.
func age(t *testing.T, dir string) {
	t.Helper()
	old := time.Now().Add(-time.Hour)
	for _, p := range []string{filepath.Join(dir, ".git", "refs", "heads", "main"), filepath.Join(dir, ".git", "packed-refs")} {
		if err := os.Chtimes(p, old, old); err != nil && !os.IsNotExist(err) {
			require.NoError(t, err)
		}
	}
}

func TestResolveHeadCacheReusesAndSeesNewCommits(t *testing.T) {
	t.Parallel()
	b := setup(t)
	age(t, b.dir)

	snap, err := b.src.Resolve("prod", "")
	require.NoError(t, err)
	require.Equal(t, b.good, snap.Commit)
	st, ok := b.src.heads.stamp("main")
	require.True(t, ok, "ref files older than the racy window are trusted")
	h, ok := b.src.heads.get("main", st)
	require.True(t, ok, "the head was cached")
	require.Equal(t, b.good, h.String())

	// A commit rewrites the ref file: the next Resolve reads the new head,
	// however soon it comes.
	next, err := CommitFiles(b.dir, "main", map[string]string{"jobs/count.yaml": ""}, "drop count", WithTime(t0.Add(time.Minute)))
	require.NoError(t, err)
	snap, err = b.src.Resolve("prod", "")
	require.NoError(t, err)
	require.Equal(t, next, snap.Commit)
	_, ok = snap.Catalog.Job("count")
	require.False(t, ok)

	// Fresh ref files are not trusted: nothing is cached until they age.
	_, ok = b.src.heads.stamp("main")
	require.False(t, ok)

	// A ref file rewritten with the old stamp's time but another content
	// (another size or inode) is noticed too.
	age(t, b.dir)
	_, err = b.src.Resolve("prod", "")
	require.NoError(t, err)
	ref := filepath.Join(b.dir, ".git", "refs", "heads", "main")
	tmp := ref + ".new"
	require.NoError(t, os.WriteFile(tmp, []byte(b.good+"\n"), 0o644))
	require.NoError(t, os.Rename(tmp, ref)) // git's way: a new inode
	age(t, b.dir)
	snap, err = b.src.Resolve("prod", "")
	require.NoError(t, err)
	require.Equal(t, b.good, snap.Commit, "the branch was moved back")
}

func TestResolveHeadCacheBranchGoneAndSync(t *testing.T) {
	t.Parallel()
	b := setup(t)
	age(t, b.dir)
	_, err := b.src.Resolve("prod", "")
	require.NoError(t, err)
	require.NoError(t, os.Remove(filepath.Join(b.dir, ".git", "refs", "heads", "main")))
	_, err = b.src.Resolve("prod", "")
	require.ErrorIs(t, err, ErrBranchNotFound, "a deleted branch is not served from the cache")

	b.src.heads.forget()
	st, _ := b.src.heads.stamp("main")
	_, ok := b.src.heads.get("main", st)
	require.False(t, ok)
}

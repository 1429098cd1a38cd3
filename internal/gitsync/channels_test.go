package gitsync

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/catalog"
)

const badHello = "name: hello\nrun:\n  command: [x]\n  timeout: soon\n"

// resetBranch moves a branch to an older commit, as a force-push would.
func resetBranch(t *testing.T, dir, branch, commit string) {
	t.Helper()
	repo, err := git.PlainOpen(dir)
	require.NoError(t, err)
	require.NoError(t, repo.Storer.SetReference(plumbing.NewHashReference(plumbing.NewBranchReferenceName(branch), plumbing.NewHash(commit))))
}

func TestLastGoodLifecycle(t *testing.T) {
	t.Parallel()
	b := setup(t)

	t.Run("a good commit activates", func(t *testing.T) {
		snap, err := b.src.Resolve("prod", "")
		require.NoError(t, err)
		require.Equal(t, b.good, snap.Commit)
		require.Equal(t, t0, snap.CommittedAt)
		require.Equal(t, "jobplane <jobplane@localhost>", snap.Author)
	})

	bad, err := CommitFiles(b.dir, "main", map[string]string{"jobs/hello.yaml": badHello, "policies/y.yaml": "rules:\n  - id: r\n    jobs: [x]\n"}, "break it", WithTime(t0.Add(time.Minute)))
	require.NoError(t, err)
	t.Run("a bad commit is rejected with every error, the good one stays", func(t *testing.T) {
		snap, err := b.src.Resolve("prod", "")
		require.NoError(t, err)
		require.Equal(t, b.good, snap.Commit)
		require.Equal(t, bad, snap.Head)
		rej := b.src.Rejections("prod", "main")
		require.Len(t, rej, 1)
		require.Equal(t, bad, rej[0].Commit)
		require.Equal(t, t0.Add(time.Minute), rej[0].At)
		require.Equal(t, []catalog.Error{
			{File: "jobs/hello.yaml", Line: 4, Column: 12, Field: "run.timeout", Message: `invalid duration "soon" (use units, like 30s, 10m or 1h30m)`},
			{File: "policies/y.yaml", Line: 2, Column: 5, Field: "rules[0]", Message: "must name groups or users"},
		}, rej[0].Errors)
	})

	t.Run("a revert re-activates", func(t *testing.T) {
		revert, err := CommitFiles(b.dir, "main", map[string]string{"jobs/hello.yaml": ExampleFiles()["jobs/hello.yaml"], "policies/y.yaml": ""}, "revert", WithTime(t0.Add(2*time.Minute)))
		require.NoError(t, err)
		snap, err := b.src.Resolve("prod", "")
		require.NoError(t, err)
		require.Equal(t, revert, snap.Commit)
		require.Equal(t, revert, snap.Head)
	})

	t.Run("a force-push to an older commit makes it active again", func(t *testing.T) {
		resetBranch(t, b.dir, "main", b.good)
		snap, err := b.src.Resolve("prod", "")
		require.NoError(t, err)
		require.Equal(t, b.good, snap.Commit)
	})
}

func TestSeedSurvivesRestart(t *testing.T) {
	t.Parallel()
	b := setup(t)
	second, err := CommitFiles(b.dir, "main", map[string]string{"README.md": "changed\n"}, "good too", WithTime(t0.Add(time.Minute)))
	require.NoError(t, err)
	_, err = CommitFiles(b.dir, "main", map[string]string{"jobs/hello.yaml": badHello}, "bad", WithTime(t0.Add(2*time.Minute)))
	require.NoError(t, err)
	// The persisted active commit is the first one (say the server never saw
	// the second): a new process serves it, not the head nor its parent.
	src, err := Open(b.dir, Options{Channels: map[string]string{"prod": "main"}})
	require.NoError(t, err)
	require.NoError(t, src.Seed("prod", "main", b.good))
	snap, err := src.Resolve("prod", "")
	require.NoError(t, err)
	require.Equal(t, b.good, snap.Commit)

	// Without a seed the newest good ancestor is found.
	src, err = Open(b.dir, Options{Channels: map[string]string{"prod": "main"}})
	require.NoError(t, err)
	snap, err = src.Resolve("prod", "")
	require.NoError(t, err)
	require.Equal(t, second, snap.Commit)

	require.ErrorIs(t, src.Seed("nope", "main", b.good), ErrUnknownChannel)
	require.ErrorIs(t, src.Seed("prod", "main", "0123456789012345678901234567890123456789"), ErrCommitNotFound)
}

func TestPatternChannels(t *testing.T) {
	t.Parallel()
	b := setup(t)
	f1, err := CommitFiles(b.dir, "feature/one", map[string]string{"README.md": "one\n"}, "one", WithTime(t0.Add(time.Minute)))
	require.NoError(t, err)
	f2bad, err := CommitFiles(b.dir, "feature/two", map[string]string{"jobs/hello.yaml": badHello}, "two", WithTime(t0.Add(2*time.Minute)))
	require.NoError(t, err)
	src, err := Open(b.dir, Options{Channels: map[string]string{"prod": "main", "sandbox": "feature/*"}, Protected: []string{"main", "release/*"}})
	require.NoError(t, err)
	require.True(t, src.IsPattern("sandbox"))
	require.False(t, src.IsPattern("prod"))

	snap, err := src.Resolve("sandbox", "feature/one")
	require.NoError(t, err)
	require.Equal(t, f1, snap.Commit)
	require.Equal(t, "feature/one", snap.Branch)
	require.False(t, snap.Protected)

	snap, err = src.Resolve("sandbox", "feature/two")
	require.NoError(t, err)
	require.Equal(t, f1, snap.Commit, "each branch has its own last good commit (feature/two starts at feature/one)")
	require.Equal(t, f2bad, snap.Head)
	require.Len(t, src.Rejections("sandbox", "feature/two"), 1)
	require.Empty(t, src.Rejections("sandbox", "feature/one"))

	_, err = src.Resolve("sandbox", "")
	require.ErrorIs(t, err, ErrRefRequired)
	for _, ref := range []string{"main", "feature/a/b", "feature/.."} {
		_, err = src.Resolve("sandbox", ref)
		require.ErrorIs(t, err, ErrRefNotAllowed, ref)
	}
	_, err = src.Resolve("sandbox", "feature/none")
	require.ErrorIs(t, err, ErrBranchNotFound)
	_, err = src.Resolve("prod", "feature/one")
	require.ErrorIs(t, err, ErrRefNotAllowed, "a fixed channel serves its own branch only")
	snap, err = src.Resolve("prod", "main")
	require.NoError(t, err)
	require.True(t, snap.Protected)

	branches, err := src.Branches("sandbox")
	require.NoError(t, err)
	require.Equal(t, []string{"feature/one", "feature/two"}, branches)
	require.True(t, src.Protected("release/1.2"))
	require.False(t, src.Protected("feature/one"))
}

func TestRemoteMirror(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// The working repository's .git directory is a bare repository; the
	// server reaches it by URL, as it would a remote.
	url := "file://" + filepath.Join(b.dir, ".git")
	mirrors := t.TempDir()
	src, err := Open(url, Options{Channels: map[string]string{"prod": "main"}, MirrorDir: mirrors})
	require.NoError(t, err)
	require.True(t, src.Mirrored())
	entries, err := os.ReadDir(mirrors)
	require.NoError(t, err)
	require.Len(t, entries, 1, "one bare mirror")

	snap, err := src.Resolve("prod", "")
	require.NoError(t, err)
	require.Equal(t, b.good, snap.Commit)

	next, err := CommitFiles(b.dir, "main", map[string]string{"README.md": "next\n"}, "next", WithTime(t0.Add(time.Minute)))
	require.NoError(t, err)
	snap, err = src.Resolve("prod", "")
	require.NoError(t, err)
	require.Equal(t, b.good, snap.Commit, "the mirror changes only on Sync")

	require.NoError(t, src.Sync(context.Background()))
	snap, err = src.Resolve("prod", "")
	require.NoError(t, err)
	require.Equal(t, next, snap.Commit, "one sync picks up the new commit")

	// A force-push is mirrored as is.
	resetBranch(t, b.dir, "main", b.good)
	require.NoError(t, src.Sync(context.Background()))
	snap, err = src.Resolve("prod", "")
	require.NoError(t, err)
	require.Equal(t, b.good, snap.Commit)
	require.NoError(t, src.Sync(context.Background()), "nothing new is not an error")

	// Reopening reuses the mirror, and a remote that is gone does not keep a
	// mirror that was fetched before from serving.
	require.NoError(t, os.Rename(b.dir, b.dir+".moved"))
	again, err := Open(url, Options{Channels: map[string]string{"prod": "main"}, MirrorDir: mirrors})
	require.NoError(t, err)
	snap, err = again.Resolve("prod", "")
	require.NoError(t, err)
	require.Equal(t, b.good, snap.Commit)
	require.Error(t, again.Sync(context.Background()))

	_, err = Open(url+"-never", Options{Channels: map[string]string{"prod": "main"}, MirrorDir: mirrors})
	require.Error(t, err, "a remote never fetched is an error")
	_, err = Open("https://example.invalid/defs.git", Options{Channels: map[string]string{"prod": "main"}})
	require.ErrorContains(t, err, "mirror directory")
}

func TestReadFile(t *testing.T) {
	t.Parallel()
	b := setup(t)
	data, err := b.src.ReadFile(b.good, "README.md")
	require.NoError(t, err)
	require.Contains(t, string(data), "jobplane definitions")
	_, err = b.src.ReadFile(b.good, "nope.md")
	require.Error(t, err)
	_, err = b.src.ReadFile("HEAD", "README.md")
	require.ErrorIs(t, err, ErrCommitNotFound)
}

// BenchmarkRead500Jobs reads a 500-job repository at a commit from a cold
// cache: open the repository, walk the tree, read and validate every file.
// Run: go test ./internal/gitsync -run '^$' -bench Read500Jobs -benchtime 20x
func BenchmarkRead500Jobs(b *testing.B) {
	dir := b.TempDir()
	files := map[string]string{
		"groups.yaml":        "groups:\n  operators:\n    members: [alice, bob]\n",
		"policies/main.yaml": "rules:\n  - id: operators-run-everything\n    jobs: [\"*\"]\n    groups: [operators]\n",
	}
	for i := range 500 {
		name := fmt.Sprintf("job-%03d", i)
		files["jobs/"+name+".yaml"] = fmt.Sprintf(`name: %s
description: Benchmark job %d
owners: [operators]
params:
  type: object
  additionalProperties: false
  properties:
    account: {type: string, pattern: "^[0-9]{1,12}$"}
run:
  command: [sh, -c, 'echo "$JOBPLANE_PARAM_ACCOUNT"']
  timeout: 10m
retries: {max_attempts: 2, backoff: 10s}
`, name, i)
	}
	commit, err := InitRepo(dir, "main", files, "500 jobs", WithTime(t0))
	require.NoError(b, err)
	b.ResetTimer()
	for b.Loop() {
		src, err := Open(dir, Options{Channels: map[string]string{"prod": "main"}})
		if err != nil {
			b.Fatal(err)
		}
		cat, err := src.AtCommit(commit)
		if err != nil {
			b.Fatal(err)
		}
		if len(cat.Jobs()) != 500 {
			b.Fatalf("%d jobs", len(cat.Jobs()))
		}
	}
}

package gitsync

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/catalog"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

type testBundle struct {
	dir  string
	good string // first commit, on main
	src  *Source
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	dir := t.TempDir()
	good, err := InitRepo(dir, "main", ExampleFiles(), "initial", WithTime(t0))
	require.NoError(t, err)
	src, err := Open(dir, Options{Channels: map[string]string{"prod": "main", "staging": "release"}})
	require.NoError(t, err)
	return &testBundle{dir: dir, good: good, src: src}
}

func TestExampleFilesParse(t *testing.T) {
	t.Parallel()

	files := map[string][]byte{}
	for k, v := range ExampleFiles() {
		files[k] = []byte(v)
	}
	c, errs := catalog.Parse(files)
	require.Empty(t, errs)
	hello, ok := c.Job("hello")
	require.True(t, ok)
	params, err := hello.ValidateParams(nil)
	require.NoError(t, err)
	require.JSONEq(t, `{"name":"world"}`, string(params))
	require.True(t, c.Decide(catalog.Request{Job: "hello", Channel: "anything", Actor: "someone"}).Allowed)
	require.False(t, c.Decide(catalog.Request{Job: "count", Channel: "prod", Actor: "someone"}).Allowed)
	require.True(t, c.Decide(catalog.Request{Job: "count", Channel: "prod", Actor: "admin"}).Allowed)
}

func TestResolveHead(t *testing.T) {
	t.Parallel()
	b := setup(t)

	snap, err := b.src.Resolve("prod", "")
	require.NoError(t, err)
	require.Equal(t, &Snapshot{Channel: "prod", Branch: "main", Commit: b.good, Head: b.good, Author: AuthorName + " <" + AuthorEmail + ">",
		CommittedAt: t0, Protected: true, Catalog: snap.Catalog}, snap)
	_, ok := snap.Catalog.Job("hello")
	require.True(t, ok)

	again, err := b.src.Resolve("prod", "")
	require.NoError(t, err)
	require.Same(t, snap.Catalog, again.Catalog, "catalogs are cached by commit")
}

func TestResolveUnknownChannelAndBranch(t *testing.T) {
	t.Parallel()
	b := setup(t)

	_, err := b.src.Resolve("nope", "")
	require.ErrorIs(t, err, ErrUnknownChannel)
	_, err = b.src.Resolve("staging", "")
	require.ErrorIs(t, err, ErrBranchNotFound)
}

func TestResolveBadCommitKeepsLastGood(t *testing.T) {
	t.Parallel()
	b := setup(t)

	first, err := b.src.Resolve("prod", "")
	require.NoError(t, err)

	bad, err := CommitFiles(b.dir, "main", map[string]string{"jobs/hello.yaml": "name: hello\nrun:\n  command: [x]\n  timeout: soon\n"}, "break it", WithTime(t0.Add(time.Minute)))
	require.NoError(t, err)

	snap, err := b.src.Resolve("prod", "")
	require.NoError(t, err)
	require.Equal(t, b.good, snap.Commit)
	require.Equal(t, bad, snap.Head)
	require.Same(t, first.Catalog, snap.Catalog)

	_, err = b.src.Resolve("prod", "") // a second look records the rejection once
	require.NoError(t, err)
	rej := b.src.Rejections("prod", "main")
	require.Len(t, rej, 1)
	require.Equal(t, bad, rej[0].Commit)
	require.Equal(t, []catalog.Error{{File: "jobs/hello.yaml", Line: 4, Column: 12, Field: "run.timeout", Message: `invalid duration "soon" (use units, like 30s, 10m or 1h30m)`}}, rej[0].Errors)

	fixed, err := CommitFiles(b.dir, "main", map[string]string{"jobs/hello.yaml": "name: hello\nrun:\n  command: [x]\n  timeout: 5m\n", "jobs/count.yaml": ""}, "fix it", WithTime(t0.Add(2*time.Minute)))
	require.NoError(t, err)
	snap, err = b.src.Resolve("prod", "")
	require.NoError(t, err)
	require.Equal(t, fixed, snap.Commit, "a new commit is picked up at once")
	hello, _ := snap.Catalog.Job("hello")
	require.Equal(t, 5*time.Minute, hello.Run.Timeout)
	_, ok := snap.Catalog.Job("count")
	require.False(t, ok, "deleted file")

	old, err := b.src.AtCommit(b.good)
	require.NoError(t, err)
	_, ok = old.Job("count")
	require.True(t, ok, "AtCommit reads the old commit")
	require.Same(t, first.Catalog, old)

	_, err = b.src.AtCommit(bad)
	var ce *CatalogError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, bad, ce.Commit)

	_, err = b.src.AtCommit("0123456789012345678901234567890123456789")
	require.ErrorIs(t, err, ErrCommitNotFound)
	_, err = b.src.AtCommit("HEAD")
	require.ErrorIs(t, err, ErrCommitNotFound)
}

func TestResolveNeverGood(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bad, err := InitRepo(dir, "release", map[string]string{"policies/x.yaml": "rules:\n  - id: r\n    jobs: [x]\n"}, "bad release", WithTime(t0))
	require.NoError(t, err)
	src, err := Open(dir, Options{Channels: map[string]string{"staging": "release"}})
	require.NoError(t, err)
	_, err = src.Resolve("staging", "")
	var ce *CatalogError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "staging", ce.Channel)
	require.Equal(t, bad, ce.Commit)
	require.Equal(t, "policies/x.yaml", ce.Errors[0].File)
	require.Contains(t, err.Error(), "policies/x.yaml:2:5: rules[0]: must name groups or users")
	require.Len(t, src.Rejections("staging", "release"), 1)
}

func TestResolveBadHeadServesGoodAncestor(t *testing.T) {
	t.Parallel()
	b := setup(t)

	// release starts from main's good commit; its own first commit is bad.
	bad, err := CommitFiles(b.dir, "release", map[string]string{"policies/x.yaml": "rules:\n  - id: r\n    jobs: [x]\n"}, "bad release", WithTime(t0))
	require.NoError(t, err)
	snap, err := b.src.Resolve("staging", "")
	require.NoError(t, err)
	require.Equal(t, b.good, snap.Commit, "the newest good commit of the branch is active")
	require.Equal(t, bad, snap.Head)
	require.Len(t, b.src.Rejections("staging", "release"), 1)

	// The other channel is unaffected.
	snap, err = b.src.Resolve("prod", "")
	require.NoError(t, err)
	require.Equal(t, b.good, snap.Commit)
}

func TestOversizedFileRejected(t *testing.T) {
	t.Parallel()
	b := setup(t)

	big := make([]byte, catalog.MaxFileSize+1)
	for i := range big {
		big[i] = 'x'
	}
	_, err := CommitFiles(b.dir, "release", map[string]string{"groups.yaml": string(big)}, "big", WithTime(t0))
	require.NoError(t, err)
	_, err = b.src.Resolve("staging", "")
	require.NoError(t, err, "the good ancestor stays active")
	rej := b.src.Rejections("staging", "release")
	require.Len(t, rej, 1)
	require.Equal(t, "groups.yaml", rej[0].Errors[0].File)
	require.Contains(t, rej[0].Errors[0].Message, "larger than")
}

func TestOpenFileURLAndBare(t *testing.T) {
	t.Parallel()
	b := setup(t)

	src, err := Open("file://"+b.dir, Options{Channels: map[string]string{"prod": "main"}})
	require.NoError(t, err)
	snap, err := src.Resolve("prod", "")
	require.NoError(t, err)
	require.Equal(t, b.good, snap.Commit)

	// A bare repository: the .git directory of the one above is one.
	src, err = Open(b.dir+"/.git", Options{Channels: map[string]string{"prod": "main"}})
	require.NoError(t, err)
	snap, err = src.Resolve("prod", "")
	require.NoError(t, err)
	require.Equal(t, b.good, snap.Commit)

	_, err = Open(t.TempDir(), Options{})
	require.Error(t, err)
}

func TestResolveConcurrent(t *testing.T) {
	t.Parallel()
	b := setup(t)

	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 16 {
		wg.Go(func() {
			snap, err := b.src.Resolve("prod", "")
			if err == nil && snap.Commit != b.good {
				err = errors.New("wrong commit " + snap.Commit)
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

func TestCommitFilesRejectsBadPaths(t *testing.T) {
	t.Parallel()
	b := setup(t)

	for _, p := range []string{"../x", "/etc/x", ".git/config", "a/../b"} {
		_, err := CommitFiles(b.dir, "main", map[string]string{p: "x"}, "m")
		require.Error(t, err, "CommitFiles(%q)", p)
	}
}

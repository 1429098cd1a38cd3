package source

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type entry struct {
	Name, Link string
	Type       byte
	Mode       int64
	Data       string
	MTime      int64
}

func readTar(t *testing.T, r io.Reader) (entries []entry, comment string) {
	t.Helper()
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return entries, comment
		}
		require.NoError(t, err)
		if h.Typeflag == tar.TypeXGlobalHeader {
			comment = h.PAXRecords["comment"]
			continue
		}
		data, err := io.ReadAll(tr)
		require.NoError(t, err)
		entries = append(entries, entry{Name: h.Name, Link: h.Linkname, Type: h.Typeflag, Mode: h.Mode, Data: string(data), MTime: h.ModTime.Unix()})
	}
}

func runGit(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com",
		"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com", "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir)
	out, err := cmd.Output()
	require.NoError(t, err, "git %v", args)
	return strings.TrimSpace(string(out))
}

// codeRepo makes a repository with the real git binary: nested
// directories, an executable, a symlink, a file with spaces; and a second
// commit, so that the first is not the head.
func codeRepo(t *testing.T) (dir, first, second string) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git binary not installed") // the comparison needs the reference implementation
	}
	dir = t.TempDir()
	runGit(t, dir, "init", "-q", "-b", "main")
	write := func(name, data string, mode os.FileMode) {
		p := filepath.Join(dir, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(data), mode))
	}
	write("README.md", "hello\n", 0o644)
	write("src/pkg/main.go", "package main\n", 0o644)
	write("bin/run.sh", "#!/bin/sh\necho run\n", 0o755)
	write("dir with space/file name.txt", strings.Repeat("x", 70000), 0o644)
	require.NoError(t, os.Symlink("src/pkg/main.go", filepath.Join(dir, "link")))
	runGit(t, dir, "add", "-A")
	runGit(t, dir, "commit", "-q", "-m", "first")
	first = runGit(t, dir, "rev-parse", "HEAD")
	write("README.md", "changed\n", 0o644)
	runGit(t, dir, "commit", "-q", "-am", "second")
	second = runGit(t, dir, "rev-parse", "HEAD")
	return dir, first, second
}

func archive(t *testing.T, b *Broker, repo, commit string) ([]byte, error) {
	t.Helper()
	var buf bytes.Buffer
	err := b.Archive(context.Background(), repo, commit, func() io.Writer { return &buf })
	return buf.Bytes(), err
}

// TestArchiveMatchesGitArchive: the broker's archive of a commit has the
// entries `git archive` produces for it: names, types, modes, contents,
// link targets, times and the commit id comment.
func TestArchiveMatchesGitArchive(t *testing.T) {
	t.Parallel()
	dir, first, second := codeRepo(t)
	b, err := Open(map[string]string{"code": dir}, t.TempDir())
	require.NoError(t, err)
	head, err := b.Head("code", "main")
	require.NoError(t, err)
	require.Equal(t, second, head)
	for _, commit := range []string{first, second} {
		gz, err := archive(t, b, "code", commit)
		require.NoError(t, err)
		zr, err := gzip.NewReader(bytes.NewReader(gz))
		require.NoError(t, err)
		got, gotComment := readTar(t, zr)

		cmd := exec.Command("git", "archive", "--format=tar", commit)
		cmd.Dir = dir
		want, err := cmd.Output()
		require.NoError(t, err)
		wantEntries, wantComment := readTar(t, bytes.NewReader(want))
		require.Len(t, wantEntries, 9, "dirs, files, the executable and the symlink")
		require.Equal(t, wantEntries, got, "commit %s", commit)
		require.Equal(t, wantComment, gotComment)
		require.Equal(t, commit, gotComment)
	}
}

// TestArchiveBinding is RELIABILITY ST2 at the broker: only a full commit
// id of a configured repository is archived; abbreviations, branch and tag
// names, other spellings of the repository and unknown commits are refused
// before a byte is written.
func TestArchiveBinding(t *testing.T) {
	t.Parallel()
	dir, first, _ := codeRepo(t)
	runGit(t, dir, "tag", "v1", first)
	b, err := Open(map[string]string{"code": dir}, t.TempDir())
	require.NoError(t, err)
	for _, c := range []struct {
		repo, commit string
		want         error
	}{
		{"code", first[:12], ErrBadCommit},
		{"code", "main", ErrBadCommit},
		{"code", "v1", ErrBadCommit},
		{"code", "HEAD", ErrBadCommit},
		{"code", strings.ToUpper(first), ErrBadCommit},
		{"code", first + "\n", ErrBadCommit},
		{"code", strings.Repeat("0", 40), ErrNotFound},
		{"Code", first, ErrUnknownRepo},
		{"code.git", first, ErrUnknownRepo},
		{dir, first, ErrUnknownRepo},
		{"file://" + dir, first, ErrUnknownRepo},
	} {
		opened := false
		err := b.Archive(context.Background(), c.repo, c.commit, func() io.Writer { opened = true; return io.Discard })
		require.ErrorIs(t, err, c.want, "Archive(%q, %q)", c.repo, c.commit)
		require.False(t, opened, "nothing written for Archive(%q, %q)", c.repo, c.commit)
	}
	_, err = b.Head("code", "nope")
	require.ErrorIs(t, err, ErrNotFound)
	_, err = Open(map[string]string{"Bad Name": dir}, t.TempDir())
	require.Error(t, err)
}

// TestArchiveFromMirror: a URL is mirrored under the data directory and
// archived from the mirror.
func TestArchiveFromMirror(t *testing.T) {
	t.Parallel()
	dir, _, second := codeRepo(t)
	mirrors := t.TempDir()
	b, err := Open(map[string]string{"code": "file://" + dir}, mirrors)
	require.NoError(t, err)
	head, err := b.Head("code", "main")
	require.NoError(t, err)
	require.Equal(t, second, head)
	require.NoError(t, b.Sync(context.Background()))
	_, err = archive(t, b, "code", second)
	require.NoError(t, err)
	matches, _ := filepath.Glob(filepath.Join(mirrors, "code", "*.git"))
	require.Len(t, matches, 1, "mirrored under MIRRORDIR/NAME")
}

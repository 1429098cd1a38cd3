package server

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/github"
	"github.com/jobplane/jobplane/internal/github/fakegithub"
)

func TestGitHubSourcesArchive(t *testing.T) {
	t.Parallel()
	fc := clock.NewFake(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))
	key := fakegithub.Key(t, 0)
	f := fakegithub.New(t, fakegithub.Options{AppID: 5, PublicKey: &key.PublicKey, Clock: fc})
	f.AddInstallation(1, "acme", github.Permissions{"contents": "read", "metadata": "read"})
	f.AddInstallation(2, "globex", github.Permissions{"contents": "read", "metadata": "read"})
	dir, sha := fakegithub.InitRepo(t, map[string]string{"main.go": "package main\n", "sub/dir/file.txt": "x"})
	f.AddRepo(1, "app", dir)
	app, err := github.New(github.Config{AppID: 5, PrivateKey: key, BaseURL: f.URL, Clock: fc})
	require.NoError(t, err)
	g := &githubSources{app: app}

	var buf bytes.Buffer
	require.NoError(t, g.Archive(context.Background(), 1, "acme/app", sha, func() io.Writer { return &buf }))
	zr, err := gzip.NewReader(&buf)
	require.NoError(t, err)
	tr := tar.NewReader(zr)
	names := map[string]string{}
	commit := ""
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		if h.Typeflag == tar.TypeXGlobalHeader {
			commit = h.PAXRecords["comment"]
			continue
		}
		b, _ := io.ReadAll(tr)
		names[h.Name] = string(b)
	}
	require.Equal(t, sha, commit, "the commit header is kept for the runner's check")
	require.Equal(t, "package main\n", names["main.go"], "entries are at the root")
	require.Equal(t, "x", names["sub/dir/file.txt"])
	require.Contains(t, names, "sub/")

	// Another installation cannot even get a token for the repository
	// (422), and the writer is never opened.
	opened := false
	err = g.Archive(context.Background(), 2, "acme/app", sha, func() io.Writer { opened = true; return io.Discard })
	require.ErrorContains(t, err, "422")
	require.False(t, opened)

	// An archive of another commit than asked is refused before any byte.
	other := fakegithub.Commit(t, dir, map[string]string{"main.go": "package other\n"})
	f.ServeWrongCommit("acme/app", sha, other)
	err = g.Archive(context.Background(), 1, "acme/app", sha, func() io.Writer { opened = true; return io.Discard })
	require.ErrorIs(t, err, github.ErrSourceMismatch)
	require.False(t, opened)
}

func TestStripTopDirRefusesEscapes(t *testing.T) {
	t.Parallel()
	var in bytes.Buffer
	zw := gzip.NewWriter(&in)
	tw := tar.NewWriter(zw)
	for _, name := range []string{"top/", "top/a", "elsewhere/b"} {
		typ := byte(tar.TypeReg)
		if name == "top/" {
			typ = tar.TypeDir
		}
		require.NoError(t, tw.WriteHeader(&tar.Header{Name: name, Typeflag: typ, Mode: 0o644}))
	}
	require.NoError(t, tw.Close())
	require.NoError(t, zw.Close())
	err := stripTopDir(io.Discard, &in)
	require.ErrorContains(t, err, `entry "elsewhere/b" is outside the top directory "top"`)

	in.Reset()
	zw = gzip.NewWriter(&in)
	tw = tar.NewWriter(zw)
	require.NoError(t, tw.WriteHeader(&tar.Header{Name: "/etc/passwd", Typeflag: tar.TypeReg, Mode: 0o644}))
	require.NoError(t, tw.Close())
	require.NoError(t, zw.Close())
	require.ErrorContains(t, stripTopDir(io.Discard, &in), "has no top directory")
}

// FuzzStripTopDir: whatever GitHub's side sends, re-packing never panics,
// and what it writes keeps every entry under the top directory it removed
// (no absolute or parent-relative name appears that was not in the input).
func FuzzStripTopDir(f *testing.F) {
	mk := func(names ...string) []byte {
		var b bytes.Buffer
		zw := gzip.NewWriter(&b)
		tw := tar.NewWriter(zw)
		for _, n := range names {
			_ = tw.WriteHeader(&tar.Header{Name: n, Typeflag: tar.TypeReg, Mode: 0o644, Size: 1})
			_, _ = tw.Write([]byte("x"))
		}
		_ = tw.Close()
		_ = zw.Close()
		return b.Bytes()
	}
	f.Add(mk("top/a", "top/b/c"))
	f.Add(mk("top/../x"))
	f.Add(mk("/abs"))
	f.Add([]byte("not gzip"))
	f.Fuzz(func(t *testing.T, in []byte) {
		var out bytes.Buffer
		if err := stripTopDir(&out, bytes.NewReader(in)); err != nil {
			return
		}
		zr, err := gzip.NewReader(&out)
		if err != nil {
			t.Fatalf("output is not gzip: %v", err)
		}
		tr := tar.NewReader(zr)
		for {
			h, err := tr.Next()
			if err != nil {
				return
			}
			if h.Typeflag != tar.TypeXGlobalHeader && (h.Name == "" || strings.HasPrefix(h.Name, "/")) {
				t.Fatalf("re-packed entry %q", h.Name)
			}
		}
	})
}

package server

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
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
}
